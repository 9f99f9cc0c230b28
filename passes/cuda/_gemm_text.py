"""The names, comment marks and device helpers the `gemm-schedule` rule writes into a kernel
and its de-optimization (`passes.cuda.gemm_scalar`) reads back: both import them from here.

No GPU library is imported here.
"""
from __future__ import annotations

import re

PREFIX = "kl_gs_"
"""The prefix of every name the rule declares."""
MARK = "// gemm-schedule: "
"""The comment that opens each region the rule writes."""

HELPERS = r"""// ---- 16-byte asynchronous staging of 128-wide, 32-deep GEMM slices (cp.async, zero fill) ----
__device__ __forceinline__ void kl_gs_cp16(void* dst, const void* src, int bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void kl_gs_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void kl_gs_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N)); }
// one operand's slice into a shared tile: KC (k contiguous in memory) keeps it as rows of k per
// mn from g[mn * ld + k], else as rows of mn per k from g[k * ld + mn]; elements past mn_end /
// k_end are zero; VEC: 16-byte copies (ld a multiple of 8, g 16-byte aligned). SW 0: rows of
// PITCH elements; SW 1: K-major rows of BK = 32 elements, 64-byte swizzle; SW 2: MN-major atoms of
// 64 elements x BK rows, 128-byte swizzle (the wgmma canonical layouts)
template <bool KC, int MN, int BK, int PITCH, int NT, int SW>
__device__ __forceinline__ void kl_gs_load(unsigned short* tile, const unsigned short* g, long ld,
                                           int mn0, int k0, int mn_end, int k_end, bool vec, int tid) {
  constexpr int CH = KC ? BK / 8 : MN / 8;
  constexpr int ROWS = KC ? MN : BK;
  for (int c = tid; c < ROWS * CH; c += NT) {
    const int r = c / CH, e = (c % CH) * 8;
    const int mn = KC ? mn0 + r : mn0 + e, k = KC ? k0 + e : k0 + r;
    int valid;
    long at;
    if (KC) {
      valid = mn < mn_end ? min(max(k_end - k, 0), 8) : 0;
      at = (long)mn * ld + k;
    } else {
      valid = k < k_end ? min(max(mn_end - mn, 0), 8) : 0;
      at = (long)k * ld + mn;
    }
    int off = r * PITCH + e;
    if (SW == 1) {
      const int b = r * BK * 2 + e * 2;
      off = (b ^ (((b >> 7) & 3) << 4)) / 2;
    } else if (SW == 2) {
      const int b = (e / 64) * BK * 128 + r * 128 + (e % 64) * 2;
      off = (b ^ (((b >> 7) & 7) << 4)) / 2;
    }
    unsigned short* dst = tile + off;
    if (vec) {
      kl_gs_cp16(dst, valid > 0 ? g + at : g, valid * 2);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) dst[i] = i < valid ? g[at + i] : (unsigned short)0;
    }
  }
}
// a wgmma shared-memory descriptor: start, leading / stride byte offsets, swizzle mode
// (1: 128-byte, 2: 64-byte)
__device__ __forceinline__ unsigned long long kl_gs_desc(const void* p, unsigned lbo, unsigned sbo,
                                                         unsigned mode) {
  const unsigned long long a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  return ((a & 0x3FFFFull) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
         ((unsigned long long)(sbo >> 4) << 32) | ((unsigned long long)mode << 62);
}
"""

DEEP_HELPERS = r"""// ---- 64-deep slices with the 128-byte swizzle (wgmma's canonical layouts), copies unrolled by four ----
// one 16-byte chunk: `valid` elements from g + at, zeros after them (cp.async where VEC)
__device__ __forceinline__ void kl_gs_chunk(unsigned short* dst, const unsigned short* g, long at,
                                            int valid, bool vec) {
  if (vec) {
    kl_gs_cp16(dst, valid > 0 ? g + at : g, valid * 2);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) dst[i] = i < valid ? g[at + i] : (unsigned short)0;
  }
}
// K-major: rows of 64 k per mn from g[mn * ld + k] (128 bytes a row), chunk c of row r at chunk
// c ^ (r % 8); elements past mn_end / k_end are zero
template <int MN, int NT>
__device__ __forceinline__ void kl_gs_load_k128(unsigned short* tile, const unsigned short* g, long ld,
                                                int mn0, int k0, int mn_end, int k_end, bool vec, int tid) {
  static_assert(MN * 8 % NT == 0, "whole rounds of chunks");
#pragma unroll 4
  for (int i = 0; i < MN * 8 / NT; ++i) {
    const int c = tid + i * NT, r = c / 8, e = (c % 8) * 8;
    const int mn = mn0 + r, k = k0 + e;
    kl_gs_chunk(tile + r * 64 + ((c % 8) ^ (r % 8)) * 8, g, (long)mn * ld + k,
                mn < mn_end ? min(max(k_end - k, 0), 8) : 0, vec);
  }
}
// MN-major: atoms of 64 mn x 64 k rows from g[k * ld + mn] (8 KiB each, a row 128 bytes), chunk
// c of row r at chunk c ^ (r % 8) of its atom
template <int MN, int NT>
__device__ __forceinline__ void kl_gs_load_mn128(unsigned short* tile, const unsigned short* g, long ld,
                                                 int mn0, int k0, int mn_end, int k_end, bool vec, int tid) {
  static_assert(64 * MN / 8 % NT == 0, "whole rounds of chunks");
#pragma unroll 4
  for (int i = 0; i < 64 * MN / 8 / NT; ++i) {
    const int c = tid + i * NT, r = c / (MN / 8), e = (c % (MN / 8)) * 8;
    const int k = k0 + r, mn = mn0 + e;
    kl_gs_chunk(tile + (e / 64) * 4096 + r * 64 + (((e % 64) / 8) ^ (r % 8)) * 8, g,
                (long)k * ld + mn, k < k_end ? min(max(mn_end - mn, 0), 8) : 0, vec);
  }
}
"""

BARRIER_HELPERS = r"""// ---- mbarriers handing ring slots between the warps that fill them and those that multiply ----
__device__ __forceinline__ void kl_gs_bar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;"
               :: "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))), "r"(count) : "memory");
}
__device__ __forceinline__ void kl_gs_bar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];"
               :: "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))) : "memory");
}
// an arrive-on `bar` once the thread's earlier cp.async copies have landed, counted against the
// barrier's expected arrivals (the thread goes on at once)
__device__ __forceinline__ void kl_gs_cp_arrive(unsigned long long* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];"
               :: "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))) : "memory");
}
// until the phase of `parity` has completed
__device__ __forceinline__ void kl_gs_bar_wait(unsigned long long* bar, unsigned parity) {
  const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(bar));
  unsigned done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred q;\nmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 q, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, q;\n}\n" : "=r"(done) : "r"(b), "r"(parity) : "memory");
  }
}
"""


TMA_PARAMETER = f"const __grid_constant__ kl_gs_maps {PREFIX}tma"
"""The parameter the TMA form adds to its kernel: both operands' tensor maps, by value."""

TMA_HELPERS = r"""// ---- TMA: whole slices copied by tensor maps, landing on the slots' mbarriers (sm_90a) ----
#include <cuda.h>
// a 2-D tensor map (the driver's CUtensorMap, 128 bytes) and the pair the kernel takes by value;
// `ok`: both were encoded (else the kernel stages with cp.async)
struct __align__(64) kl_gs_tmap { unsigned long long w[16]; };
struct __align__(64) kl_gs_maps { kl_gs_tmap a, b; int ok; };
// the box of `map` at (c0 inner, c1 outer) into `dst`, its bytes counted on `bar`; zeros where
// the box leaves the tensor
__device__ __forceinline__ void kl_gs_tma_load(void* dst, const kl_gs_tmap* map, unsigned long long* bar,
                                               int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];"
               :: "r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))), "l"(map), "r"(c0), "r"(c1),
                  "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))) : "memory");
}
// one arrival on `bar` that also expects `bytes` of copies to land on it
__device__ __forceinline__ void kl_gs_bar_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;"
               :: "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))), "r"(bytes) : "memory");
}
// host: the driver's cuTensorMapEncodeTiled, through the runtime (no link to the driver library)
static void* kl_gs_tma_entry() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                         cudaEnableDefault, &found);
#else
  const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found);
#endif
  return e == cudaSuccess && found == cudaDriverEntryPointSuccess ? fn : nullptr;
}
// host: the map of a row-major (outer x inner) operand with leading dimension `ld` elements, boxes of
// 64 inner x `box` outer elements, 128-byte swizzle (the wgmma layout of a 64-deep slice), zero fill;
// false where the driver cannot describe it (a base or row pitch not 16-byte aligned, an empty extent)
static bool kl_gs_tma_encode(kl_gs_tmap* map, bool half, const void* base, long long ld, long long inner,
                             long long outer, unsigned box) {
  typedef CUresult (*encode_t)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                               const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                               CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const encode_t encode = reinterpret_cast<encode_t>(kl_gs_tma_entry());
  if (encode == nullptr || inner <= 0 || outer <= 0 || ld < inner || (ld * 2) % 16 != 0 ||
      reinterpret_cast<unsigned long long>(base) % 16 != 0)
    return false;
  const cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer};
  const cuuint64_t pitch[1] = {(cuuint64_t)(ld * 2)};
  const cuuint32_t boxes[2] = {64u, box}, steps[2] = {1u, 1u};
  CUtensorMap m;
  if (encode(&m, half ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
             const_cast<void*>(base), dims, pitch, boxes, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
    return false;
  static_assert(sizeof(CUtensorMap) == sizeof(kl_gs_tmap), "a tensor map is 128 bytes");
  const unsigned long long* w = reinterpret_cast<const unsigned long long*>(&m);
  for (int i = 0; i < 16; ++i) map->w[i] = w[i];
  return true;
}
// host: both operands' maps, as the kernel's launch passes them
static kl_gs_maps kl_gs_tma_maps(bool half, const void* a, long long lda, long long a_inner, long long a_outer,
                                 unsigned a_box, const void* b, long long ldb, long long b_inner,
                                 long long b_outer, unsigned b_box) {
  kl_gs_maps maps = {};
  maps.ok = kl_gs_tma_encode(&maps.a, half, a, lda, a_inner, a_outer, a_box) &&
            kl_gs_tma_encode(&maps.b, half, b, ldb, b_inner, b_outer, b_box);
  return maps;
}
"""

PERSIST_HOST = r"""// ---- host: a persistent grid (the kernel loops over its own tiles, so as many blocks as the
// device holds at once do all of them: each block's ring runs on into its next tile) ----
#ifndef __CUDACC_RTC__
// `grid` as launched, or one row of as many blocks as the device holds at once where `grid` has
// more (asked once per kernel and process: the device's SMs times the kernel's occupancy at
// `threads` threads and `bytes` of dynamic shared memory; where either cannot be read, `grid`)
static dim3 kl_gs_grid(const void* kernel, dim3 grid, int threads, size_t bytes) {
  static const void* seen[8] = {};
  static unsigned most[8] = {};
  int slot = 0;
  while (slot < 7 && seen[slot] != nullptr && seen[slot] != kernel) ++slot;
  if (seen[slot] != kernel) {
    int device = 0, sms = 0, per = 0;
    const bool read = cudaGetDevice(&device) == cudaSuccess &&
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, threads, bytes) == cudaSuccess;
    if (!read) (void)cudaGetLastError();  // this query's own failure, not the caller's
    most[slot] = read && sms > 0 && per > 0 ? (unsigned)(sms * per) : 0u;
    seen[slot] = kernel;
  }
  const unsigned long long blocks = (unsigned long long)grid.x * grid.y * grid.z;
  // (a grid's planes stay: a kernel may read blockIdx.z as a batch)
  const unsigned row = most[slot] > grid.z ? most[slot] / grid.z : 1u;
  return most[slot] > 0 && blocks > most[slot] ? dim3(row, 1, grid.z) : grid;
}
#endif
"""
"""The host helper the deep forms' edited `<<<...>>>` launches call for their grid."""

_INCLUDE = "#include <cuda.h>\n"
TMA_DEVICE_HELPERS = (TMA_HELPERS[:TMA_HELPERS.index(_INCLUDE)] +
                      TMA_HELPERS[TMA_HELPERS.index(_INCLUDE) + len(_INCLUDE):
                                  TMA_HELPERS.index("// host: the driver's")])
"""The device half of `TMA_HELPERS` (the maps' types, the copy, the expecting arrival): what a
kernel launched by a Python host gets (the host encodes the maps, `kir.hostlaunch`)."""


def written(code: str, names: set[str]) -> list[str]:
    """The names of `names` that `code` assigns or steps."""
    out = []
    for n in sorted(names):
        e = re.escape(n)
        if re.search(rf"(?<![\w.>]){e}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)|(?:\+\+|--)\s*{e}\b|"
                     rf"(?<![\w.>]){e}\s*(?:\+\+|--)", code):
            out.append(n)
    return out
