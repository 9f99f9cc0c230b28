// cudacpu.h: CUDA C++ device code compiled as C++17 for the CPU (the gate's `emulate` tier).
//
// Force-included (g++ -include) ahead of a kernel source that `gate.cudacpu.prepass` rewrote
// (`__shared__` declarations into block-shared storage, inline PTX into `cudacpu::ptx::exec`).
// Execution model: a launch runs its blocks one after another; the threads of a block are
// fibers (ucontext) on one OS thread, each run until it blocks at a barrier, a warp collective
// or its end. A block barrier releases once every thread still running waits at it; a warp
// collective (shuffle, vote, match, reduce, __syncwarp, mma.sync, ldmatrix) resolves once every
// lane of its mask that has not exited waits at it. The order in which a block's threads run
// alternates between blocks (first to last, last to first), so a read of another thread's
// write that no barrier orders sees the shared memory's poison (all bits set) in one order or
// the other. cp.async copies complete when a thread waits for their group, not when issued.
// The emulated device is an sm_90a GPU (`__CUDA_ARCH__` 900).
#pragma once
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <csetjmp>
#include <csignal>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <math.h>
#include <string>
#include <sys/mman.h>
#include <type_traits>
#include <ucontext.h>
#include <unistd.h>
#include <unordered_map>
#include <utility>
#include <vector>

#define __CUDA_ARCH__ 900
#define __CUDACC__ 1
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __grid_constant__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __maxnreg__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __builtin_align__(n) __attribute__((aligned(n)))
#define __cudart_builtin__
#define CUDART_CB

// ---------------------------------------------------------------------------------------------
// Vector types
#define CUDACPU_ALIGN2(T) (2 * sizeof(T) > 16 ? 16 : 2 * sizeof(T))
#define CUDACPU_ALIGN4(T) (4 * sizeof(T) > 16 ? 16 : 4 * sizeof(T))
#define CUDACPU_VEC(T, N)                                                                       \
  struct N##1 { T x; };                                                                        \
  struct __attribute__((aligned(CUDACPU_ALIGN2(T)))) N##2 { T x, y; };                         \
  struct N##3 { T x, y, z; };                                                                  \
  struct __attribute__((aligned(CUDACPU_ALIGN4(T)))) N##4 { T x, y, z, w; };                   \
  inline N##1 make_##N##1(T x) { N##1 r; r.x = x; return r; }                                  \
  inline N##2 make_##N##2(T x, T y) { N##2 r; r.x = x; r.y = y; return r; }                    \
  inline N##3 make_##N##3(T x, T y, T z) { N##3 r; r.x = x; r.y = y; r.z = z; return r; }      \
  inline N##4 make_##N##4(T x, T y, T z, T w) { N##4 r; r.x = x; r.y = y; r.z = z; r.w = w; return r; }
CUDACPU_VEC(signed char, char)
CUDACPU_VEC(unsigned char, uchar)
CUDACPU_VEC(short, short)
CUDACPU_VEC(unsigned short, ushort)
CUDACPU_VEC(int, int)
CUDACPU_VEC(unsigned int, uint)
CUDACPU_VEC(long, long)
CUDACPU_VEC(unsigned long, ulong)
CUDACPU_VEC(long long, longlong)
CUDACPU_VEC(unsigned long long, ulonglong)
CUDACPU_VEC(float, float)
CUDACPU_VEC(double, double)
#undef CUDACPU_VEC

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};
typedef struct CUstream_st* cudaStream_t;
enum cudaError_t { cudaSuccess = 0 };

// ---------------------------------------------------------------------------------------------
// 16-bit floating point types
namespace cudacpu {
inline uint32_t f2u(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float u2f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline unsigned short float_to_half(float f) {  // round to nearest even
  uint32_t x = f2u(f);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return 0x7fffu;
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (ax < 0x38800000u) {  // a half subnormal (or zero): a multiple of 2^-24
    return (unsigned short)(sign | (uint32_t)nearbyintf(u2f(ax) * 16777216.0f));
  }
  uint32_t r = ax - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return (unsigned short)(sign | (r >> 13));
}
inline float half_to_float(unsigned short h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  // cvt.f32.f16 gives the canonical f32 NaN (0x7fffffff: no sign, no payload), as the CUDA
  // headers' own model of it (__internal_half2float) does; an infinity keeps its sign
  if (e == 0x1f) return u2f(m ? 0x7fffffffu : (sign | 0x7f800000u));
  if (e == 0) { float v = (float)m * 5.9604644775390625e-08f; return sign ? -v : v; }
  return u2f(sign | ((e + 112u) << 23) | (m << 13));
}
inline unsigned short float_to_bf16(float f) {
  uint32_t x = f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
inline float bf16_to_float(unsigned short b) { return u2f((uint32_t)b << 16); }
}  // namespace cudacpu

struct __half_raw { unsigned short x; };
struct __nv_bfloat16_raw { unsigned short x; };

#define CUDACPU_HALF_TYPE(H, RAW, TO, FROM)                                                     \
  struct __attribute__((aligned(2))) H {                                                        \
    unsigned short __x;                                                                         \
    H() = default;                                                                              \
    constexpr H(const RAW& r) : __x(r.x) {}                                                     \
    H(float f) : __x(cudacpu::TO(f)) {}                                                         \
    H(double f) : __x(cudacpu::TO((float)f)) {}                                                 \
    H(int v) : __x(cudacpu::TO((float)v)) {}                                                    \
    H(unsigned int v) : __x(cudacpu::TO((float)v)) {}                                           \
    H(short v) : __x(cudacpu::TO((float)v)) {}                                                  \
    H(unsigned short v) : __x(cudacpu::TO((float)v)) {}                                         \
    H(long long v) : __x(cudacpu::TO((float)v)) {}                                              \
    H(unsigned long long v) : __x(cudacpu::TO((float)v)) {}                                     \
    operator float() const { return cudacpu::FROM(__x); }                                       \
    operator RAW() const { RAW r; r.x = __x; return r; }                                        \
    H& operator=(const RAW& r) { __x = r.x; return *this; }                                     \
    H& operator=(float f) { __x = cudacpu::TO(f); return *this; }                               \
    H& operator=(double f) { __x = cudacpu::TO((float)f); return *this; }                       \
  };                                                                                            \
  inline H operator+(const H& a, const H& b) { return H((float)a + (float)b); }                 \
  inline H operator-(const H& a, const H& b) { return H((float)a - (float)b); }                 \
  inline H operator*(const H& a, const H& b) { return H((float)a * (float)b); }                 \
  inline H operator/(const H& a, const H& b) { return H((float)a / (float)b); }                 \
  inline H operator-(const H& a) { H r = a; r.__x ^= 0x8000u; return r; }                       \
  inline H operator+(const H& a) { return a; }                                                  \
  inline H& operator+=(H& a, const H& b) { a = a + b; return a; }                               \
  inline H& operator-=(H& a, const H& b) { a = a - b; return a; }                               \
  inline H& operator*=(H& a, const H& b) { a = a * b; return a; }                               \
  inline H& operator/=(H& a, const H& b) { a = a / b; return a; }                               \
  inline bool operator==(const H& a, const H& b) { return (float)a == (float)b; }               \
  inline bool operator!=(const H& a, const H& b) { return (float)a != (float)b; }               \
  inline bool operator<(const H& a, const H& b) { return (float)a < (float)b; }                 \
  inline bool operator>(const H& a, const H& b) { return (float)a > (float)b; }                 \
  inline bool operator<=(const H& a, const H& b) { return (float)a <= (float)b; }               \
  inline bool operator>=(const H& a, const H& b) { return (float)a >= (float)b; }
CUDACPU_HALF_TYPE(__half, __half_raw, float_to_half, half_to_float)
CUDACPU_HALF_TYPE(__nv_bfloat16, __nv_bfloat16_raw, float_to_bf16, bf16_to_float)
#undef CUDACPU_HALF_TYPE

#define CUDACPU_HALF2_TYPE(H2, H)                                                               \
  struct __attribute__((aligned(4))) H2 {                                                       \
    H x, y;                                                                                     \
    H2() = default;                                                                             \
    constexpr H2(const H& a, const H& b) : x(a), y(b) {}                                        \
  };                                                                                            \
  inline H2 operator+(const H2& a, const H2& b) { return H2(a.x + b.x, a.y + b.y); }            \
  inline H2 operator-(const H2& a, const H2& b) { return H2(a.x - b.x, a.y - b.y); }            \
  inline H2 operator*(const H2& a, const H2& b) { return H2(a.x * b.x, a.y * b.y); }            \
  inline H2 operator/(const H2& a, const H2& b) { return H2(a.x / b.x, a.y / b.y); }            \
  inline H2 operator-(const H2& a) { return H2(-a.x, -a.y); }                                   \
  inline H2& operator+=(H2& a, const H2& b) { a = a + b; return a; }                            \
  inline H2& operator-=(H2& a, const H2& b) { a = a - b; return a; }                            \
  inline H2& operator*=(H2& a, const H2& b) { a = a * b; return a; }                            \
  inline H2& operator/=(H2& a, const H2& b) { a = a / b; return a; }
CUDACPU_HALF2_TYPE(__half2, __half)
CUDACPU_HALF2_TYPE(__nv_bfloat162, __nv_bfloat16)
#undef CUDACPU_HALF2_TYPE
typedef __half half;
typedef __half2 half2;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;
struct __half2_raw { unsigned short x, y; };
struct __nv_bfloat162_raw { unsigned short x, y; };

inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline __half __double2half(double f) { return __half((float)f); }
inline float __half2float(__half h) { return (float)h; }
inline __half2 __float2half2_rn(float f) { return __half2(__half(f), __half(f)); }
inline __half2 __floats2half2_rn(float a, float b) { return __half2(__half(a), __half(b)); }
inline __half2 __float22half2_rn(float2 f) { return __half2(__half(f.x), __half(f.y)); }
inline float2 __half22float2(__half2 h) { return make_float2((float)h.x, (float)h.y); }
inline __half2 make_half2(__half a, __half b) { return __half2(a, b); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __double2bfloat16(double f) { return __nv_bfloat16((float)f); }
inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
inline __nv_bfloat162 __float2bfloat162_rn(float f) { return __nv_bfloat162(__nv_bfloat16(f), __nv_bfloat16(f)); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162(__nv_bfloat16(a), __nv_bfloat16(b)); }
inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __nv_bfloat162(__nv_bfloat16(f.x), __nv_bfloat16(f.y)); }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return make_float2((float)h.x, (float)h.y); }
inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
inline __half __ushort_as_half(unsigned short u) { __half_raw r; r.x = u; return __half(r); }
inline __half __short_as_half(short u) { return __ushort_as_half((unsigned short)u); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline short __half_as_short(__half h) { return (short)h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16_raw r; r.x = u; return __nv_bfloat16(r); }
inline __nv_bfloat16 __short_as_bfloat16(short u) { return __ushort_as_bfloat16((unsigned short)u); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
inline __half __int2half_rn(int v) { return __half((float)v); }
inline __half __uint2half_rn(unsigned v) { return __half((float)v); }
inline int __half2int_rn(__half h) { return (int)nearbyintf((float)h); }
inline int __half2int_rz(__half h) { return (int)(float)h; }
inline __nv_bfloat16 __int2bfloat16_rn(int v) { return __nv_bfloat16((float)v); }
inline int __bfloat162int_rn(__nv_bfloat16 h) { return (int)nearbyintf((float)h); }
inline int __bfloat162int_rz(__nv_bfloat16 h) { return (int)(float)h; }
inline __half __hadd_sat(__half a, __half b) { return __half(std::fmin(std::fmax((float)a + (float)b, 0.f), 1.f)); }

#define CUDACPU_HALF_OPS(H, H2, SUF)                                                            \
  inline H __hadd(H a, H b) { return a + b; }                                                   \
  inline H __hsub(H a, H b) { return a - b; }                                                   \
  inline H __hmul(H a, H b) { return a * b; }                                                   \
  inline H __hdiv(H a, H b) { return a / b; }                                                   \
  inline H __hfma(H a, H b, H c) { return H(std::fma((float)a, (float)b, (float)c)); }          \
  inline H __hneg(H a) { return -a; }                                                           \
  inline H __habs(H a) { H r = a; r.__x &= 0x7fffu; return r; }                                 \
  inline H __hmax(H a, H b) { return (float)a > (float)b || std::isnan((float)b) ? a : b; }     \
  inline H __hmin(H a, H b) { return (float)a < (float)b || std::isnan((float)b) ? a : b; }     \
  inline bool __heq(H a, H b) { return a == b; }                                                \
  inline bool __hne(H a, H b) { return a != b; }                                                \
  inline bool __hlt(H a, H b) { return a < b; }                                                 \
  inline bool __hle(H a, H b) { return a <= b; }                                                \
  inline bool __hgt(H a, H b) { return a > b; }                                                 \
  inline bool __hge(H a, H b) { return a >= b; }                                                \
  inline bool __hisnan(H a) { return std::isnan((float)a); }                                    \
  inline int __hisinf(H a) { float f = (float)a; return std::isinf(f) ? (f > 0 ? 1 : -1) : 0; } \
  inline H hexp(H a) { return H(std::exp((float)a)); }                                          \
  inline H hexp2(H a) { return H(std::exp2((float)a)); }                                        \
  inline H hlog(H a) { return H(std::log((float)a)); }                                          \
  inline H hlog2(H a) { return H(std::log2((float)a)); }                                        \
  inline H hsqrt(H a) { return H(std::sqrt((float)a)); }                                        \
  inline H hrsqrt(H a) { return H(1.0f / std::sqrt((float)a)); }                                \
  inline H hrcp(H a) { return H(1.0f / (float)a); }                                             \
  inline H htanh(H a) { return H(std::tanh((float)a)); }                                        \
  inline H hfloor(H a) { return H(std::floor((float)a)); }                                      \
  inline H hceil(H a) { return H(std::ceil((float)a)); }                                        \
  inline H2 __hadd2(H2 a, H2 b) { return a + b; }                                               \
  inline H2 __hsub2(H2 a, H2 b) { return a - b; }                                               \
  inline H2 __hmul2(H2 a, H2 b) { return a * b; }                                               \
  inline H2 __h2div(H2 a, H2 b) { return a / b; }                                               \
  inline H2 __hfma2(H2 a, H2 b, H2 c) { return H2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); } \
  inline H2 __hneg2(H2 a) { return -a; }                                                        \
  inline H2 __habs2(H2 a) { return H2(__habs(a.x), __habs(a.y)); }                              \
  inline H2 __hmax2(H2 a, H2 b) { return H2(__hmax(a.x, b.x), __hmax(a.y, b.y)); }              \
  inline H2 __hmin2(H2 a, H2 b) { return H2(__hmin(a.x, b.x), __hmin(a.y, b.y)); }              \
  inline H2 h2exp(H2 a) { return H2(hexp(a.x), hexp(a.y)); }                                   \
  inline H __low2##SUF(H2 a) { return a.x; }                                                    \
  inline H __high2##SUF(H2 a) { return a.y; }                                                   \
  inline float __low2float(H2 a) { return (float)a.x; }                                         \
  inline float __high2float(H2 a) { return (float)a.y; }                                        \
  inline H2 __lows2##SUF##2(H2 a, H2 b) { return H2(a.x, b.x); }                                \
  inline H2 __highs2##SUF##2(H2 a, H2 b) { return H2(a.y, b.y); }                               \
  inline H2 __lowhigh2highlow(H2 a) { return H2(a.y, a.x); }                                    \
  inline H2 __low2##SUF##2(H2 a) { return H2(a.x, a.x); }                                       \
  inline H2 __high2##SUF##2(H2 a) { return H2(a.y, a.y); }
CUDACPU_HALF_OPS(__half, __half2, half)
CUDACPU_HALF_OPS(__nv_bfloat16, __nv_bfloat162, bfloat16)
#undef CUDACPU_HALF_OPS
inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
inline __half2 __half2half2(__half a) { return __half2(a, a); }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return __nv_bfloat162(a, a); }

// ---------------------------------------------------------------------------------------------
// The runtime: launches, blocks, fibers, barriers and warp collectives
namespace cudacpu {

// Fiber contexts. On x86-64 a switch saves the callee-saved registers and the FP control
// words on the fiber's own stack (tens of nanoseconds); elsewhere ucontext (a system call per
// switch for the signal mask).
#if defined(__x86_64__)
extern "C" void cudacpu_switch(void** save_sp, void* next_sp);
asm(R"(
  .text
  .p2align 4
  .type cudacpu_switch, @function
cudacpu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cudacpu_switch, .-cudacpu_switch
)");
struct Context {
  void* sp = nullptr;
};
inline void context_make(Context& c, char* stack, size_t size, void (*entry)()) {
  uintptr_t top = ((uintptr_t)(stack + size)) & ~(uintptr_t)15;
  void** sp = (void**)top;
  *--sp = nullptr;              // the entry function's return address: it never returns
  *--sp = (void*)entry;         // where the first switch returns to
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp rbx r12 r13 r14 r15
  --sp;
  uint32_t csr = 0x1f80, cw = 0x037f;
  std::memcpy(sp, &csr, 4);
  std::memcpy((char*)sp + 4, &cw, 4);
  c.sp = sp;
}
inline void context_switch(Context& save, Context& next) { cudacpu_switch(&save.sp, next.sp); }
inline void context_jump(Context& next) {
  void* ignored;
  cudacpu_switch(&ignored, next.sp);
  __builtin_unreachable();
}
#else
struct Context {
  ucontext_t uc;
};
inline void context_make(Context& c, char* stack, size_t size, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
inline void context_switch(Context& save, Context& next) { swapcontext(&save.uc, &next.uc); }
inline void context_jump(Context& next) {
  setcontext(&next.uc);
  __builtin_unreachable();
}
#endif

enum State { RUNNABLE, AT_BARRIER, AT_WARP, AT_LOCKSTEP, AT_NAMED, DONE };
enum Op { OP_NONE, OP_SHFL_IDX, OP_SHFL_UP, OP_SHFL_DOWN, OP_SHFL_XOR, OP_BALLOT, OP_ANY, OP_ALL,
          OP_MATCH_ANY, OP_MATCH_ALL, OP_REDUCE_ADD, OP_REDUCE_MIN, OP_REDUCE_MAX, OP_REDUCE_UMIN,
          OP_REDUCE_UMAX, OP_REDUCE_AND, OP_REDUCE_OR, OP_REDUCE_XOR, OP_SYNCWARP, OP_CUSTOM,
          OP_WARPGROUP };
static const char* const OP_NAMES[] = {
    "none", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
    "__any_sync", "__all_sync", "__match_any_sync", "__match_all_sync", "__reduce_add_sync",
    "__reduce_min_sync", "__reduce_max_sync", "__reduce_min_sync", "__reduce_max_sync",
    "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync", "__syncwarp", "a warp-wide PTX instruction",
    "a warpgroup-wide PTX instruction"};

struct Copy { void* dst; const void* src; unsigned bytes; unsigned src_bytes; };
struct Thread;
typedef void (*CustomFn)(Thread** lanes, unsigned group);

struct Thread {
  Context ctx;
  char* stack;
  uint3 tid;
  unsigned linear, lane, warp;
  State state;
  int op;
  unsigned mask;
  uint64_t val, result;
  int arg, width;
  CustomFn custom;
  const void* in;
  void* out;
  int bar_pred;
  unsigned bar_id, bar_count;  // a named barrier (bar.sync id, count) it waits at
  bool spin;  // at AT_LOCKSTEP: it polls (a wait that found nothing yet), nothing else
  std::vector<Copy> cp_open;
  std::vector<std::vector<Copy>> cp_groups;
};

struct Launch {
  dim3 grid, block;
  size_t dynamic_bytes;
  void (*invoke)(void**);
  void** args;
  unsigned nthreads;
  Thread* threads;
  uint3 block_idx;
  Context sched;
  sigjmp_buf fault;
  bool failed;
  char error[512];
  const char* kernel;
  unsigned named_arrived[16];  // arrivals (bar.arrive) at each named barrier's current phase
};

inline thread_local Launch* L = nullptr;
inline thread_local Thread* cur = nullptr;
inline unsigned long launch_seq = 0;
inline unsigned long block_seq = 0;  // counts the blocks run (state kept per block checks it)
inline unsigned long progress = 0;   // counts what threads do for one another (see run_launch)

// Shared memory as the GPU lays it out: the module's static `__shared__` variables from address
// 0 (each given its offset when the library loads), the launch's dynamic shared memory after
// them (1 KiB aligned), so that addresses stay below 256 KiB as wgmma descriptors need.
constexpr size_t SHARED_WINDOW = 512 * 1024;
constexpr size_t DYNAMIC_SHARED_CAP = 256 * 1024;
// 4 KiB aligned: swizzled layouts (TMA, wgmma) follow shared-address bits, as on the GPU.
alignas(4096) inline unsigned char shared_window[SHARED_WINDOW];
inline size_t static_shared_used = 0;
inline size_t dynamic_base() { return (static_shared_used + 1023) & ~size_t(1023); }

[[noreturn]] inline void fail(const char* fmt, ...) {
  Launch* l = L;
  va_list ap;
  va_start(ap, fmt);
  if (l != nullptr && !l->failed) {
    vsnprintf(l->error, sizeof(l->error), fmt, ap);
    l->failed = true;
  }
  va_end(ap);
  if (l != nullptr && cur != nullptr) context_jump(l->sched);
  if (l != nullptr) siglongjmp(l->fault, 1);  // from the scheduler: back to run_launch
  std::abort();
}

inline void yield() { context_switch(cur->ctx, L->sched); }

// Per-block shared memory: static declarations get fixed offsets in the shared window when the
// library loads (the same in every block and launch: blocks run one at a time).
inline size_t allocate_static(size_t bytes, size_t align) {
  size_t at = (static_shared_used + align - 1) & ~(align - 1);
  if (at + bytes > SHARED_WINDOW - DYNAMIC_SHARED_CAP) {
    fprintf(stderr, "cudacpu: static shared memory exceeds %zu bytes\n", SHARED_WINDOW - DYNAMIC_SHARED_CAP);
    std::abort();
  }
  static_shared_used = at + bytes;
  return at;
}
template <class T, int ID, size_t ALIGN>
inline const size_t shared_offset = allocate_static(sizeof(T), ALIGN > 16 ? ALIGN : 16);
template <class T, int ID, size_t ALIGN = 16>
inline T& shared_var() {
  return *reinterpret_cast<T*>(shared_window + shared_offset<T, ID, ALIGN>);
}
template <class T>
inline T& dynamic_shared() {
  return *reinterpret_cast<T*>(shared_window + dynamic_base());
}
inline unsigned char* shared_base() { return shared_window; }
inline bool is_shared(const void* p) {
  return (const unsigned char*)p >= shared_window && (const unsigned char*)p < shared_window + sizeof(shared_window);
}

// ---- cp.async: copies queue per thread and complete when their group is waited for ----
inline void do_copy(const Copy& c) {
  if (c.src_bytes > 0) std::memcpy(c.dst, c.src, c.src_bytes < c.bytes ? c.src_bytes : c.bytes);
  if (c.src_bytes < c.bytes) std::memset((char*)c.dst + c.src_bytes, 0, c.bytes - c.src_bytes);
}
inline void cp_async(void* dst, const void* src, unsigned bytes, unsigned src_bytes) {
  cur->cp_open.push_back(Copy{dst, src, bytes, src_bytes});
}
inline void cp_commit() {
  cur->cp_groups.push_back(std::move(cur->cp_open));
  cur->cp_open.clear();
}
inline void cp_wait(unsigned pending) {
  Thread* t = cur;
  while (t->cp_groups.size() > pending) {
    for (const Copy& c : t->cp_groups.front()) do_copy(c);
    t->cp_groups.erase(t->cp_groups.begin());
  }
}
inline void cp_wait_all() {
  cp_commit();
  cp_wait(0);
}

// ---- barriers and warp collectives ----
// Named barriers (bar.sync / bar.arrive id, count): a barrier completes once `count` threads
// have arrived at it, waiting (sync) or not (arrive); its waiting threads are then released.
inline void named_barrier_sync(unsigned id, unsigned count) {
  if (id >= 16) fail("named barrier %u (0 to 15)", id);
  ++progress;
  cur->bar_id = id;
  cur->bar_count = count;
  cur->state = AT_NAMED;
  yield();
}
inline void named_barrier_arrive(unsigned id, unsigned count) {
  if (id >= 16) fail("named barrier %u (0 to 15)", id);
  (void)count;
  ++progress;
  L->named_arrived[id] += 1;
}
inline bool release_named(Launch& l) {
  bool any = false;
  for (unsigned id = 0; id < 16; ++id) {
    unsigned waiting = 0, count = 0;
    for (unsigned i = 0; i < l.nthreads; ++i)
      if (l.threads[i].state == AT_NAMED && l.threads[i].bar_id == id) {
        ++waiting;
        count = l.threads[i].bar_count;
      }
    if (waiting == 0 || waiting + l.named_arrived[id] < count) continue;
    for (unsigned i = 0; i < l.nthreads; ++i)
      if (l.threads[i].state == AT_NAMED && l.threads[i].bar_id == id) l.threads[i].state = RUNNABLE;
    l.named_arrived[id] -= count > waiting ? count - waiting : 0;  // extra arrivals: the next phase's
    any = true;
  }
  return any;
}

inline void block_barrier(int pred = 0) {
  ++progress;
  cur->bar_pred = pred;
  cur->state = AT_BARRIER;
  yield();
}
inline uint64_t warp_collective(int op, unsigned mask, uint64_t val, int arg = 0, int width = 32,
                                CustomFn custom = nullptr, const void* in = nullptr, void* out = nullptr) {
  Thread* t = cur;
  ++progress;
  t->op = op;
  t->mask = mask;
  t->val = val;
  t->arg = arg;
  t->width = width;
  t->custom = custom;
  t->in = in;
  t->out = out;
  t->state = AT_WARP;
  yield();
  return t->result;
}

// Accesses through `volatile` pointers (`lockstep_ptr`): warp-synchronous code written for
// lanes that run in lockstep. Each access waits until every lane of the warp that is still
// running has come to such an access or is blocked elsewhere, so the lanes of a warp perform
// their n-th volatile accesses together, as converged lanes do on the GPU.
inline void lockstep(bool spin = false) {
  cur->state = AT_LOCKSTEP;
  cur->spin = spin;
  yield();
}
inline bool release_lockstep(Launch& l) {
  bool any = false;
  for (unsigned i = 0; i < l.nthreads; ++i)
    if (l.threads[i].state == AT_LOCKSTEP) {
      l.threads[i].state = RUNNABLE;
      any = true;
    }
  return any;
}
template <class T>
struct lockstep_ref {
  T* p;
  operator T() const {
    lockstep();
    return *(volatile T*)p;
  }
  const lockstep_ref& operator=(T v) const {
    lockstep();
    *(volatile T*)p = v;
    return *this;
  }
  const lockstep_ref& operator=(const lockstep_ref& o) const { return *this = (T)o; }
  const lockstep_ref& operator+=(T v) const { return *this = (T)*this + v; }
  const lockstep_ref& operator-=(T v) const { return *this = (T)*this - v; }
  const lockstep_ref& operator*=(T v) const { return *this = (T)*this * v; }
  const lockstep_ref& operator/=(T v) const { return *this = (T)*this / v; }
  T* operator&() const { return p; }
};
template <class T>
struct lockstep_ptr {
  T* p;
  lockstep_ptr(T* q = nullptr) : p(q) {}
  lockstep_ptr(volatile T* q) : p(const_cast<T*>(q)) {}
  lockstep_ref<T> operator[](ptrdiff_t i) const { return lockstep_ref<T>{p + i}; }
  lockstep_ref<T> operator*() const { return lockstep_ref<T>{p}; }
  lockstep_ptr operator+(ptrdiff_t i) const { return lockstep_ptr(p + i); }
  lockstep_ptr operator-(ptrdiff_t i) const { return lockstep_ptr(p - i); }
  lockstep_ptr& operator+=(ptrdiff_t i) { p += i; return *this; }
  lockstep_ptr& operator-=(ptrdiff_t i) { p -= i; return *this; }
  operator volatile T*() const { return p; }
};

inline void resolve_group(Thread** lanes, unsigned group) {
  Thread* first = nullptr;
  for (int l = 0; l < 32; ++l)
    if (group >> l & 1u) { first = lanes[l]; break; }
  int op = first->op;
  if (op == OP_CUSTOM) {
    first->custom(lanes, group);
  } else {
    for (int l = 0; l < 32; ++l) {
      if (!(group >> l & 1u)) continue;
      Thread* t = lanes[l];
      uint64_t r = t->val;
      int w = t->width <= 0 || t->width > 32 ? 32 : t->width;
      int base = l & ~(w - 1);
      int src = -1;
      switch (op) {
        case OP_SHFL_IDX: src = base + (t->arg & (w - 1)); break;
        case OP_SHFL_UP: src = (l - base) >= t->arg ? l - t->arg : l; break;
        case OP_SHFL_DOWN: src = (l - base) + t->arg < w ? l + t->arg : l; break;
        case OP_SHFL_XOR: src = l ^ t->arg; if (src >= base + w) src = l; break;
        default: break;
      }
      if (src >= 0) {
        r = (src < 32 && (group >> src & 1u)) ? lanes[src]->val : t->val;
      } else {
        uint64_t acc = 0;
        bool all = true, any = false;
        switch (op) {
          case OP_BALLOT: case OP_ANY: case OP_ALL:
            for (int j = 0; j < 32; ++j)
              if (t->mask >> j & 1u && group >> j & 1u) {
                bool p = lanes[j]->val != 0;
                if (p) acc |= 1ull << j;
                all = all && p;
                any = any || p;
              }
            r = op == OP_BALLOT ? acc : op == OP_ANY ? (uint64_t)any : (uint64_t)all;
            break;
          case OP_MATCH_ANY:
            for (int j = 0; j < 32; ++j)
              if (group >> j & 1u && lanes[j]->val == t->val) acc |= 1ull << j;
            r = acc;
            break;
          case OP_MATCH_ALL:
            for (int j = 0; j < 32; ++j)
              if (group >> j & 1u && lanes[j]->val != t->val) all = false;
            r = all ? group : 0;
            break;
          case OP_REDUCE_ADD: case OP_REDUCE_MIN: case OP_REDUCE_MAX: case OP_REDUCE_UMIN:
          case OP_REDUCE_UMAX: case OP_REDUCE_AND: case OP_REDUCE_OR: case OP_REDUCE_XOR: {
            bool started = false;
            uint32_t a = 0;
            for (int j = 0; j < 32; ++j) {
              if (!(group >> j & 1u)) continue;
              uint32_t v = (uint32_t)lanes[j]->val;
              if (!started) { a = v; started = true; continue; }
              switch (op) {
                case OP_REDUCE_ADD: a += v; break;
                case OP_REDUCE_MIN: a = (uint32_t)std::min((int32_t)a, (int32_t)v); break;
                case OP_REDUCE_MAX: a = (uint32_t)std::max((int32_t)a, (int32_t)v); break;
                case OP_REDUCE_UMIN: a = std::min(a, v); break;
                case OP_REDUCE_UMAX: a = std::max(a, v); break;
                case OP_REDUCE_AND: a &= v; break;
                case OP_REDUCE_OR: a |= v; break;
                default: a ^= v; break;
              }
            }
            r = a;
            break;
          }
          default: r = 0; break;
        }
      }
      t->result = r;
    }
  }
  for (int l = 0; l < 32; ++l)
    if (group >> l & 1u) lanes[l]->state = RUNNABLE;
}

// Resolves every warp collective whose lanes have all arrived; true when one was.
inline bool resolve_warps(Launch& l) {
  bool any = false;
  unsigned nwarps = (l.nthreads + 31) / 32;
  for (unsigned w = 0; w < nwarps; ++w) {
    Thread* lanes[32];
    unsigned exist = 0, done = 0;
    for (int i = 0; i < 32; ++i) {
      unsigned idx = w * 32 + i;
      lanes[i] = idx < l.nthreads ? &l.threads[idx] : nullptr;
      if (lanes[i]) {
        exist |= 1u << i;
        if (lanes[i]->state == DONE) done |= 1u << i;
      }
    }
    for (int i = 0; i < 32; ++i) {
      Thread* t = lanes[i];
      if (t == nullptr || t->state != AT_WARP || t->op == OP_WARPGROUP) continue;
      if (!(t->mask >> i & 1u))
        fail("thread %u (lane %d) calls %s with a mask (0x%08x) that leaves out its own lane", t->linear, i,
             OP_NAMES[t->op], t->mask);
      unsigned group = t->mask & exist & ~done;
      bool ready = true;
      for (int j = 0; j < 32 && ready; ++j) {
        if (!(group >> j & 1u)) continue;
        Thread* o = lanes[j];
        ready = o->state == AT_WARP && o->op == t->op && o->mask == t->mask && o->custom == t->custom;
      }
      if (ready) {
        resolve_group(lanes, group);
        any = true;
      }
    }
  }
  return any;
}

// Warpgroup collectives (wgmma): the 128 threads of a warpgroup (threads 128g .. 128g+127)
// that have not exited meet; `custom` gets them in order (lanes[i] is thread 128g + i).
inline bool resolve_warpgroups(Launch& l) {
  bool any = false;
  for (unsigned g = 0; g * 128 < l.nthreads; ++g) {
    Thread* lanes[128];
    bool waiting = false, ready = true;
    CustomFn fn = nullptr;
    for (unsigned i = 0; i < 128; ++i) {
      unsigned idx = g * 128 + i;
      lanes[i] = idx < l.nthreads ? &l.threads[idx] : nullptr;
      Thread* t = lanes[i];
      if (t == nullptr || t->state == DONE) continue;
      if (t->state == AT_WARP && t->op == OP_WARPGROUP) {
        if (fn != nullptr && t->custom != fn) fail("divergent warpgroup instructions in warpgroup %u", g);
        fn = t->custom;
        waiting = true;
      } else {
        ready = false;
      }
    }
    if (!waiting || !ready) continue;
    fn(lanes, 0);
    for (unsigned i = 0; i < 128; ++i)
      if (lanes[i] != nullptr && lanes[i]->state == AT_WARP) lanes[i]->state = RUNNABLE;
    any = true;
  }
  return any;
}

inline void describe_deadlock(Launch& l) {
  for (unsigned i = 0; i < l.nthreads; ++i) {
    Thread& t = l.threads[i];
    if (t.state != AT_WARP) continue;
    unsigned base = t.warp * 32;
    for (int j = 0; j < 32; ++j) {
      unsigned idx = base + j;
      if (!(t.mask >> j & 1u) || idx >= l.nthreads) continue;
      Thread& o = l.threads[idx];
      if (o.state == AT_BARRIER)
        fail("deadlock in block (%u,%u,%u): thread %u waits in %s for lane %d, which waits at __syncthreads",
             l.block_idx.x, l.block_idx.y, l.block_idx.z, t.linear, OP_NAMES[t.op], j);
      if (o.state == AT_WARP && (o.op != t.op || o.mask != t.mask || o.custom != t.custom))
        fail("divergent warp collectives in block (%u,%u,%u): thread %u waits in %s (mask 0x%08x), lane %d in "
             "%s (mask 0x%08x)", l.block_idx.x, l.block_idx.y, l.block_idx.z, t.linear, OP_NAMES[t.op], t.mask,
             j, OP_NAMES[o.op], o.mask);
    }
  }
  for (unsigned i = 0; i < l.nthreads; ++i)
    if (l.threads[i].state == AT_NAMED)
      fail("deadlock in block (%u,%u,%u): thread %u waits at named barrier %u for %u threads, which never arrive",
           l.block_idx.x, l.block_idx.y, l.block_idx.z, i, l.threads[i].bar_id, l.threads[i].bar_count);
  fail("deadlock in block (%u,%u,%u): no thread can proceed", l.block_idx.x, l.block_idx.y, l.block_idx.z);
}

inline void thread_entry() {
  Launch* l = L;
  l->invoke(l->args);
  Thread* t = cur;
  cp_commit();
  cp_wait(0);  // copies never waited for still land (their data is not read by this thread)
  t->state = DONE;
  ++progress;
  context_jump(l->sched);
}

struct Stacks {
  std::vector<char*> stacks;
  size_t size = 0;
  char* get(unsigned i, size_t want) {
    if (want != size) {
      for (char* s : stacks) munmap(s, size);
      stacks.clear();
      size = want;
    }
    while (stacks.size() <= i) {
      void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) return nullptr;
      mprotect(p, 4096, PROT_NONE);  // guard page: an overflow faults instead of corrupting
      stacks.push_back((char*)p);
    }
    return stacks[i];
  }
  // a launch's stacks go back when it ends: every loaded module keeps its own pool, and a
  // process that loads many modules would otherwise run out of memory mappings
  // (vm.max_map_count: each stack is two mappings, the guard page and the rest)
  void release() {
    for (char* s : stacks) munmap(s, size);
    stacks.clear();
    size = 0;
  }
  bool in_guard(const void* a) const {
    for (char* s : stacks)
      if ((const char*)a >= s && (const char*)a < s + 4096) return true;
    return false;
  }
};
inline Stacks stacks;

inline void on_fault(int sig, siginfo_t* info, void*) {
  Launch* l = L;
  if (l == nullptr) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  if (!l->failed) {
    if (stacks.in_guard(info->si_addr))
      snprintf(l->error, sizeof(l->error), "a thread's stack overflowed (raise CUDACPU_STACK_KB) in %s", l->kernel);
    else if (is_shared(info->si_addr))
      snprintf(l->error, sizeof(l->error),
               "shared memory access at byte %zu of dynamic shared memory, past the %zu bytes the launch of %s "
               "asked for, block (%u,%u,%u)",
               (size_t)((const unsigned char*)info->si_addr - shared_window) - dynamic_base(), l->dynamic_bytes,
               l->kernel, l->block_idx.x, l->block_idx.y, l->block_idx.z);
    else
      snprintf(l->error, sizeof(l->error), "illegal memory access (%s at address %p) in %s, block (%u,%u,%u)",
               sig == SIGSEGV ? "SIGSEGV" : "SIGBUS", info->si_addr, l->kernel, l->block_idx.x, l->block_idx.y,
               l->block_idx.z);
    l->failed = true;
  }
  siglongjmp(l->fault, 1);
}

inline int run_launch(Launch& l, size_t stack_bytes) {
  l.nthreads = l.block.x * l.block.y * l.block.z;
  if (l.nthreads == 0 || l.nthreads > 1024 || l.block.z > 64) {
    snprintf(l.error, sizeof(l.error), "invalid block size (%u,%u,%u)", l.block.x, l.block.y, l.block.z);
    return 1;
  }
  if (l.grid.x == 0 || l.grid.y == 0 || l.grid.z == 0 || l.grid.y > 65535 || l.grid.z > 65535) {
    snprintf(l.error, sizeof(l.error), "invalid grid size (%u,%u,%u)", l.grid.x, l.grid.y, l.grid.z);
    return 1;
  }
  if (l.dynamic_bytes > DYNAMIC_SHARED_CAP || dynamic_base() + l.dynamic_bytes > SHARED_WINDOW) {
    snprintf(l.error, sizeof(l.error), "dynamic shared memory of %zu bytes exceeds the emulator's %zu", l.dynamic_bytes,
             DYNAMIC_SHARED_CAP);
    return 1;
  }
  // Past the dynamic bytes the launch asked for (rounded up to a page), the window is not
  // mapped for the launch: a kernel that uses more than its launch gives faults, as on the GPU.
  // The guard maps it again however the launch returns.
  struct WindowGuard {
    size_t from;
    explicit WindowGuard(size_t at) : from(at) { set(PROT_NONE); }
    ~WindowGuard() { set(PROT_READ | PROT_WRITE); }
    void set(int prot) const {
      if (from < SHARED_WINDOW) mprotect(shared_window + from, SHARED_WINDOW - from, prot);
    }
  } window_guard((dynamic_base() + l.dynamic_bytes + 4095) & ~size_t(4095));
  std::vector<Thread> threads(l.nthreads);
  l.threads = threads.data();
  for (unsigned i = 0; i < l.nthreads; ++i) {
    if ((threads[i].stack = stacks.get(i, stack_bytes)) == nullptr) {
      snprintf(l.error, sizeof(l.error), "cannot map %u thread stacks", l.nthreads);
      return 1;
    }
  }
  static char altstack[64 * 1024];
  stack_t ss{}, old_ss{};
  ss.ss_sp = altstack;
  ss.ss_size = sizeof(altstack);
  sigaltstack(&ss, &old_ss);
  struct sigaction sa{}, old_segv{}, old_bus{};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &old_segv);
  sigaction(SIGBUS, &sa, &old_bus);
  L = &l;
  unsigned long seq = launch_seq++;
  if (sigsetjmp(l.fault, 1) == 0) {
    for (unsigned bz = 0; bz < l.grid.z && !l.failed; ++bz)
      for (unsigned by = 0; by < l.grid.y && !l.failed; ++by)
        for (unsigned bx = 0; bx < l.grid.x && !l.failed; ++bx) {
          l.block_idx = uint3{bx, by, bz};
          ++block_seq;
          std::memset(l.named_arrived, 0, sizeof(l.named_arrived));
          std::memset(shared_window, 0xff, static_shared_used);
          std::memset(shared_window + dynamic_base(), 0xff, l.dynamic_bytes);
          for (unsigned i = 0; i < l.nthreads; ++i) {
            Thread& t = threads[i];
            t.linear = i;
            t.tid = uint3{i % l.block.x, (i / l.block.x) % l.block.y, i / (l.block.x * l.block.y)};
            t.lane = i % 32;
            t.warp = i / 32;
            t.state = RUNNABLE;
            t.cp_open.clear();
            t.cp_groups.clear();
            context_make(t.ctx, t.stack + 4096, stack_bytes - 4096, thread_entry);
          }
          bool forward = ((bx + by + bz + seq) & 1u) == 0;
          unsigned idle_rounds = 0;
          unsigned long progress_seen = progress;
          for (;;) {
            for (unsigned k = 0; k < l.nthreads && !l.failed; ++k) {
              Thread& t = threads[forward ? k : l.nthreads - 1 - k];
              if (t.state != RUNNABLE) continue;
              cur = &t;
              context_switch(l.sched, t.ctx);
              cur = nullptr;
            }
            if (l.failed) break;
            if (resolve_warps(l)) continue;
            if (l.failed) break;
            if (resolve_warpgroups(l)) continue;
            // a named barrier whose count is reached releases its threads even while others
            // poll (a warpgroup waiting at one while another spins on an mbarrier it will arrive at)
            if (release_named(l)) continue;
            // A round in which every thread that ran only polled changes nothing: the polls
            // wait for what no thread will do (an mbarrier phase that never completes).
            bool polls = false;
            for (unsigned i = 0; i < l.nthreads; ++i) polls = polls || (threads[i].state == AT_LOCKSTEP && threads[i].spin);
            idle_rounds = polls && progress == progress_seen ? idle_rounds + 1 : 0;
            progress_seen = progress;
            if (idle_rounds > 3)
              fail("deadlock in block (%u,%u,%u): threads poll a wait (an mbarrier phase) that no thread completes",
                   l.block_idx.x, l.block_idx.y, l.block_idx.z);
            if (release_lockstep(l)) continue;
            unsigned done = 0, waiting = 0;
            for (unsigned i = 0; i < l.nthreads; ++i) {
              done += threads[i].state == DONE;
              waiting += threads[i].state == AT_BARRIER;
            }
            if (done == l.nthreads) break;
            if (waiting > 0 && waiting + done == l.nthreads) {
              int count = 0;
              for (unsigned i = 0; i < l.nthreads; ++i) count += threads[i].state == AT_BARRIER && threads[i].bar_pred;
              for (unsigned i = 0; i < l.nthreads; ++i)
                if (threads[i].state == AT_BARRIER) {
                  threads[i].state = RUNNABLE;
                  threads[i].result = (uint64_t)count;
                  threads[i].val = (uint64_t)waiting;
                }
              continue;
            }
            cur = nullptr;
            describe_deadlock(l);  // reports through fail(), which jumps back through `fault`
          }
        }
  }
  L = nullptr;
  cur = nullptr;
  sigaction(SIGSEGV, &old_segv, nullptr);
  sigaction(SIGBUS, &old_bus, nullptr);
  sigaltstack(&old_ss, nullptr);
  fflush(stdout);
  return l.failed ? 1 : 0;
}

// The exported launcher calls `invoke`, which unpacks `args` into the kernel's parameters.
template <class... P, size_t... I>
inline void call_kernel(void (*k)(P...), void** args, std::index_sequence<I...>) {
  k(*static_cast<std::remove_cv_t<std::remove_reference_t<P>>*>(args[I])...);
}
struct KernelEntry { const char* name; void (*invoke)(void**); };
inline std::vector<KernelEntry>& registry() { static std::vector<KernelEntry> r; return r; }
template <class... P>
struct Register {
  Register(const char* name, void (*invoke)(void**)) { registry().push_back(KernelEntry{name, invoke}); }
};
// File-scope `__device__` / `__constant__` variables, by name: what cuModuleGetGlobal finds.
struct GlobalEntry { const char* name; void* address; size_t bytes; };
inline std::vector<GlobalEntry>& globals() { static std::vector<GlobalEntry> g; return g; }
struct RegisterGlobal {
  RegisterGlobal(const char* name, void* address, size_t bytes) { globals().push_back(GlobalEntry{name, address, bytes}); }
};
}  // namespace cudacpu
#define CUDACPU_GLOBAL(name) \
  static ::cudacpu::RegisterGlobal cudacpu_global_##name(#name, (void*)&(name), sizeof(name));

#define CUDACPU_KERNEL(name)                                                                    \
  static void cudacpu_invoke_##name(void** args) {                                              \
    ::cudacpu::call_kernel(&name, args, std::make_index_sequence<::cudacpu::arity(&name)>{});   \
  }                                                                                             \
  static ::cudacpu::Register<> cudacpu_register_##name(#name, cudacpu_invoke_##name);
namespace cudacpu {
template <class... P>
constexpr size_t arity(void (*)(P...)) { return sizeof...(P); }
}

// ---------------------------------------------------------------------------------------------
// Built-in variables
#define threadIdx (static_cast<const uint3&>(::cudacpu::cur->tid))
#define blockIdx (static_cast<const uint3&>(::cudacpu::L->block_idx))
#define blockDim (static_cast<const dim3&>(::cudacpu::L->block))
#define gridDim (static_cast<const dim3&>(::cudacpu::L->grid))
#define warpSize 32

// ---------------------------------------------------------------------------------------------
// Synchronization
inline void __syncthreads() { cudacpu::block_barrier(); }
inline int __syncthreads_count(int p) { cudacpu::block_barrier(p != 0); return (int)cudacpu::cur->result; }
inline int __syncthreads_and(int p) {
  cudacpu::block_barrier(p != 0);
  return cudacpu::cur->result == cudacpu::cur->val;
}
inline int __syncthreads_or(int p) { cudacpu::block_barrier(p != 0); return cudacpu::cur->result != 0; }
inline void __syncwarp(unsigned mask = 0xffffffffu) { cudacpu::warp_collective(cudacpu::OP_SYNCWARP, mask, 0); }
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}
inline unsigned __activemask() {
  unsigned m = 0, base = cudacpu::cur->warp * 32;
  for (int i = 0; i < 32; ++i)
    if (base + i < cudacpu::L->nthreads && cudacpu::L->threads[base + i].state != cudacpu::DONE) m |= 1u << i;
  return m;
}
namespace cudacpu {
[[noreturn]] inline void unsupported(const char* why) { fail("%s", why); }
}
[[noreturn]] inline void __trap() { cudacpu::fail("the kernel executed __trap()"); }
inline void __brkpt() {}
inline void __nanosleep(unsigned) {}
inline long long clock64() { static long long c = 0; return c += 1000; }
inline void __prof_trigger(int) {}

// Device assert: a failed assert ends the launch with its message instead of the process.
extern "C" __attribute__((noreturn)) void __assert_fail(const char* expr, const char* file, unsigned int line,
                                                       const char*) noexcept {
  cudacpu::fail("device assert failed: %s (%s:%u)", expr, file, line);
}

// ---------------------------------------------------------------------------------------------
// Warp shuffles, votes, matches and reductions (any type of at most 8 bytes)
namespace cudacpu {
template <class T>
inline uint64_t bits_of(const T& v) {
  static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
inline T of_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}
}  // namespace cudacpu
template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return cudacpu::of_bits<T>(cudacpu::warp_collective(cudacpu::OP_SHFL_IDX, mask, cudacpu::bits_of(v), src, width));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return cudacpu::of_bits<T>(cudacpu::warp_collective(cudacpu::OP_SHFL_UP, mask, cudacpu::bits_of(v), (int)delta, width));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return cudacpu::of_bits<T>(cudacpu::warp_collective(cudacpu::OP_SHFL_DOWN, mask, cudacpu::bits_of(v), (int)delta, width));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return cudacpu::of_bits<T>(cudacpu::warp_collective(cudacpu::OP_SHFL_XOR, mask, cudacpu::bits_of(v), lane_mask, width));
}
inline unsigned __ballot_sync(unsigned mask, int p) {
  return (unsigned)cudacpu::warp_collective(cudacpu::OP_BALLOT, mask, p != 0);
}
inline int __any_sync(unsigned mask, int p) { return (int)cudacpu::warp_collective(cudacpu::OP_ANY, mask, p != 0); }
inline int __all_sync(unsigned mask, int p) { return (int)cudacpu::warp_collective(cudacpu::OP_ALL, mask, p != 0); }
inline int __uni_sync(unsigned mask, int p) {
  unsigned b = __ballot_sync(mask, p);
  return b == 0 || b == (mask & __activemask());
}
template <class T>
inline unsigned __match_any_sync(unsigned mask, T v) {
  return (unsigned)cudacpu::warp_collective(cudacpu::OP_MATCH_ANY, mask, cudacpu::bits_of(v));
}
template <class T>
inline unsigned __match_all_sync(unsigned mask, T v, int* pred) {
  unsigned r = (unsigned)cudacpu::warp_collective(cudacpu::OP_MATCH_ALL, mask, cudacpu::bits_of(v));
  *pred = r != 0;
  return r;
}
inline unsigned __reduce_add_sync(unsigned mask, unsigned v) { return (unsigned)cudacpu::warp_collective(cudacpu::OP_REDUCE_ADD, mask, v); }
inline int __reduce_add_sync(unsigned mask, int v) { return (int)cudacpu::warp_collective(cudacpu::OP_REDUCE_ADD, mask, (uint32_t)v); }
inline unsigned __reduce_min_sync(unsigned mask, unsigned v) { return (unsigned)cudacpu::warp_collective(cudacpu::OP_REDUCE_UMIN, mask, v); }
inline int __reduce_min_sync(unsigned mask, int v) { return (int)(uint32_t)cudacpu::warp_collective(cudacpu::OP_REDUCE_MIN, mask, (uint32_t)v); }
inline unsigned __reduce_max_sync(unsigned mask, unsigned v) { return (unsigned)cudacpu::warp_collective(cudacpu::OP_REDUCE_UMAX, mask, v); }
inline int __reduce_max_sync(unsigned mask, int v) { return (int)(uint32_t)cudacpu::warp_collective(cudacpu::OP_REDUCE_MAX, mask, (uint32_t)v); }
inline unsigned __reduce_and_sync(unsigned mask, unsigned v) { return (unsigned)cudacpu::warp_collective(cudacpu::OP_REDUCE_AND, mask, v); }
inline unsigned __reduce_or_sync(unsigned mask, unsigned v) { return (unsigned)cudacpu::warp_collective(cudacpu::OP_REDUCE_OR, mask, v); }
inline unsigned __reduce_xor_sync(unsigned mask, unsigned v) { return (unsigned)cudacpu::warp_collective(cudacpu::OP_REDUCE_XOR, mask, v); }

// ---------------------------------------------------------------------------------------------
// cooperative_groups: the block, and tiles of up to a warp (tiled_partition<N>) with their
// shuffles, votes and cg::reduce. Grid-wide groups (this_grid().sync()) are not emulated.
namespace cooperative_groups {
struct thread_block {
  void sync() const { __syncthreads(); }
  unsigned thread_rank() const { return cudacpu::cur->linear; }
  unsigned size() const { return cudacpu::L->nthreads; }
  unsigned num_threads() const { return size(); }
  dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
  dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
  dim3 group_dim() const { return blockDim; }
  dim3 dim_threads() const { return blockDim; }
};
inline thread_block this_thread_block() { return thread_block(); }
template <unsigned N>
struct thread_block_tile {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "tiles of 1 to 32 threads, a power of two");
  unsigned mask() const {
    unsigned lane = cudacpu::cur->lane;
    return N == 32 ? 0xffffffffu : (((1u << N) - 1u) << (lane & ~(N - 1)));
  }
  void sync() const { __syncwarp(mask()); }
  unsigned thread_rank() const { return cudacpu::cur->lane & (N - 1); }
  unsigned size() const { return N; }
  unsigned num_threads() const { return N; }
  unsigned meta_group_rank() const { return cudacpu::cur->linear / N; }
  unsigned meta_group_size() const { return (cudacpu::L->nthreads + N - 1) / N; }
  template <class T> T shfl(T v, int src) const { return __shfl_sync(mask(), v, src, N); }
  template <class T> T shfl_down(T v, unsigned d) const { return __shfl_down_sync(mask(), v, d, N); }
  template <class T> T shfl_up(T v, unsigned d) const { return __shfl_up_sync(mask(), v, d, N); }
  template <class T> T shfl_xor(T v, int m) const { return __shfl_xor_sync(mask(), v, m, N); }
  unsigned ballot(int p) const { return __ballot_sync(mask(), p) >> (cudacpu::cur->lane & ~(N - 1) & 31); }
  int any(int p) const { return __any_sync(mask(), p); }
  int all(int p) const { return __all_sync(mask(), p); }
};
template <unsigned N, class Parent>
inline thread_block_tile<N> tiled_partition(const Parent&) { return thread_block_tile<N>(); }
inline void sync(const thread_block& g) { g.sync(); }
template <unsigned N> inline void sync(const thread_block_tile<N>& g) { g.sync(); }
template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct less { T operator()(T a, T b) const { return a < b ? a : b; } };
template <class T> struct greater { T operator()(T a, T b) const { return a > b ? a : b; } };
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };
template <unsigned N, class T, class Op>
inline T reduce(const thread_block_tile<N>& g, T v, Op op) {
  for (unsigned o = N / 2; o > 0; o >>= 1) v = op(v, g.shfl_xor(v, (int)o));
  return v;
}
}  // namespace cooperative_groups

// ---------------------------------------------------------------------------------------------
// Atomics: threads of a block never interleave inside one call, so read-modify-write is atomic.
namespace cudacpu {
template <class T> struct same { typedef T type; };
}
#define CUDACPU_ATOMIC(name, expr)                                                              \
  template <class T> inline T name(T* a, typename cudacpu::same<T>::type v) { T o = *a; *a = (expr); return o; } \
  template <class T> inline T name##_block(T* a, typename cudacpu::same<T>::type v) { return name(a, v); } \
  template <class T> inline T name##_system(T* a, typename cudacpu::same<T>::type v) { return name(a, v); }
CUDACPU_ATOMIC(atomicAdd, o + v)
CUDACPU_ATOMIC(atomicSub, o - v)
CUDACPU_ATOMIC(atomicExch, v)
CUDACPU_ATOMIC(atomicMin, v < o ? v : o)
CUDACPU_ATOMIC(atomicMax, v > o ? v : o)
CUDACPU_ATOMIC(atomicAnd, o & v)
CUDACPU_ATOMIC(atomicOr, o | v)
CUDACPU_ATOMIC(atomicXor, o ^ v)
#undef CUDACPU_ATOMIC
inline unsigned atomicInc(unsigned* a, unsigned v) { unsigned o = *a; *a = o >= v ? 0 : o + 1; return o; }
inline unsigned atomicDec(unsigned* a, unsigned v) { unsigned o = *a; *a = (o == 0 || o > v) ? v : o - 1; return o; }
template <class T>
inline T atomicCAS(T* a, typename cudacpu::same<T>::type cmp, typename cudacpu::same<T>::type v) {
  T o = *a;
  if (o == cmp) *a = v;
  return o;
}
template <class T>
inline T atomicCAS_block(T* a, typename cudacpu::same<T>::type cmp, typename cudacpu::same<T>::type v) { return atomicCAS(a, cmp, v); }
template <class T>
inline T atomicCAS_system(T* a, typename cudacpu::same<T>::type cmp, typename cudacpu::same<T>::type v) { return atomicCAS(a, cmp, v); }

// ---------------------------------------------------------------------------------------------
// Math, bit and conversion intrinsics
template <class A, class B>
inline typename std::common_type<A, B>::type min(A a, B b) {
  typedef typename std::common_type<A, B>::type R;
  return (R)a < (R)b ? (R)a : (R)b;
}
template <class A, class B>
inline typename std::common_type<A, B>::type max(A a, B b) {
  typedef typename std::common_type<A, B>::type R;
  return (R)a > (R)b ? (R)a : (R)b;
}
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rz(float a, float b) { return a + b; }
inline float __fmul_rz(float a, float b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float __saturatef(float x) { return x != x ? 0.0f : x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline float exp10f_(float x) { return exp10f(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned long long __brevll(unsigned long long x) {
  return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  unsigned long long v = ((unsigned long long)y << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned sh) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo;
  return (unsigned)((v << (sh & 31u)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
  unsigned long long v = ((unsigned long long)hi << 32) | lo;
  return (unsigned)(v >> (sh & 31u));
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned sh) { return __funnelshift_l(lo, hi, sh > 32 ? 32 : sh); }
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned sh) { return __funnelshift_r(lo, hi, sh > 32 ? 32 : sh); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline int __mul24(int a, int b) { return ((a << 8) >> 8) * ((b << 8) >> 8); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
inline int __hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
inline int __rhadd(int a, int b) { return (int)(((long long)a + b + 1) >> 1); }
inline unsigned __uhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b) >> 1); }
inline unsigned __urhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b + 1) >> 1); }
inline unsigned __sad(int a, int b, unsigned c) { return c + (unsigned)(a > b ? a - b : b - a); }
inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return c + (a > b ? a - b : b - a); }
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
  return c;
}
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline float __uint_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
inline unsigned __float_as_uint(float x) { unsigned i; std::memcpy(&i, &x, 4); return i; }
inline double __longlong_as_double(long long x) { double f; std::memcpy(&f, &x, 8); return f; }
inline long long __double_as_longlong(double x) { long long i; std::memcpy(&i, &x, 8); return i; }
inline int __double2hiint(double x) { return (int)(__double_as_longlong(x) >> 32); }
inline int __double2loint(double x) { return (int)__double_as_longlong(x); }
inline double __hiloint2double(int hi, int lo) {
  return __longlong_as_double((long long)(((unsigned long long)(unsigned)hi << 32) | (unsigned)lo));
}
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)floorf(x); }
inline int __float2int_ru(float x) { return (int)ceilf(x); }
inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
inline unsigned __float2uint_rz(float x) { return (unsigned)x; }
inline unsigned __float2uint_rd(float x) { return (unsigned)floorf(x); }
inline unsigned __float2uint_ru(float x) { return (unsigned)ceilf(x); }
inline long long __float2ll_rn(float x) { return (long long)nearbyintf(x); }
inline long long __float2ll_rz(float x) { return (long long)x; }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline float __ll2float_rn(long long x) { return (float)x; }
inline float __double2float_rn(double x) { return (float)x; }
inline int __double2int_rn(double x) { return (int)nearbyint(x); }
inline int __double2int_rz(double x) { return (int)x; }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }
inline size_t __cvta_generic_to_shared(const void* p) {
  if (!cudacpu::is_shared(p)) cudacpu::fail("__cvta_generic_to_shared of an address outside shared memory");
  return (size_t)((const unsigned char*)p - cudacpu::shared_base());
}
inline void* __cvta_shared_to_generic(size_t a) { return cudacpu::shared_base() + a; }
inline size_t __cvta_generic_to_global(const void* p) { return (size_t)p; }
inline void* __cvta_global_to_generic(size_t a) { return (void*)a; }
inline unsigned __isShared(const void* p) { return cudacpu::is_shared(p); }
inline unsigned __isGlobal(const void* p) { return !cudacpu::is_shared(p); }

// cuda_pipeline.h primitives (the same queue as cp.async)
inline void __pipeline_memcpy_async(void* dst, const void* src, size_t bytes, size_t zfill = 0) {
  cudacpu::cp_async(dst, src, (unsigned)bytes, (unsigned)(bytes - zfill));
}
inline void __pipeline_commit() { cudacpu::cp_commit(); }
inline void __pipeline_wait_prior(size_t n) { cudacpu::cp_wait((unsigned)n); }

#include "cudacpu_ptx.h"

// ---------------------------------------------------------------------------------------------
// The library's C interface (the only symbols it exports: build with -fvisibility=hidden)
#define CUDACPU_EXPORT extern "C" __attribute__((visibility("default")))
CUDACPU_EXPORT int cudacpu_kernel_count() { return (int)cudacpu::registry().size(); }
// The address and size of the module's global variable `name`; 0 when it has none.
CUDACPU_EXPORT int cudacpu_global(const char* name, void** address, size_t* bytes) {
  for (const cudacpu::GlobalEntry& g : cudacpu::globals())
    if (std::strcmp(g.name, name) == 0) {
      *address = g.address;
      *bytes = g.bytes;
      return 1;
    }
  return 0;
}
CUDACPU_EXPORT const char* cudacpu_kernel_name(int i) { return cudacpu::registry()[(size_t)i].name; }
// Launches kernel `name` on grid dims[0..2] x block dims[3..5] with `shared` bytes of dynamic
// shared memory; args[i] points at the value of parameter i. 0 on success; else 1 and a
// one-line message in `err`.
CUDACPU_EXPORT int cudacpu_launch(const char* name, const unsigned* dims, size_t shared, void** args,
                                  size_t stack_bytes, char* err, size_t errlen) {
  const cudacpu::KernelEntry* entry = nullptr;
  for (const cudacpu::KernelEntry& e : cudacpu::registry())
    if (std::strcmp(e.name, name) == 0) entry = &e;
  if (entry == nullptr) {
    snprintf(err, errlen, "the module has no kernel named %s", name);
    return 1;
  }
  cudacpu::Launch l{};
  l.grid = dim3(dims[0], dims[1], dims[2]);
  l.block = dim3(dims[3], dims[4], dims[5]);
  l.dynamic_bytes = shared;
  l.invoke = entry->invoke;
  l.args = args;
  l.kernel = entry->name;
  int rc = cudacpu::run_launch(l, stack_bytes);
  cudacpu::stacks.release();
  if (rc != 0) snprintf(err, errlen, "%s", l.error);
  return rc;
}
