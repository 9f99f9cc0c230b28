// Small CUDA kernels for the CPU emulation tests (tests/test_cudacpu.py): each is checked
// against torch, and each `*_racy` / `*_nowait` variant drops one synchronization that the
// emulator must expose.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define NEG_INF __int_as_float(0xff800000)

// Block tree reduction over shared memory, one atomicAdd per block.
extern "C" __global__ void tree_sum(const float* x, float* out, int n) {
    __shared__ float buf[256];
    int t = threadIdx.x;
    float v = 0.f;
    for (int i = blockIdx.x * blockDim.x + t; i < n; i += blockDim.x * gridDim.x) v += x[i];
    buf[t] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) buf[t] += buf[t + s];
        __syncthreads();
    }
    if (t == 0) atomicAdd(out, buf[0]);
}

// The same tree without the barrier between its steps.
extern "C" __global__ void tree_sum_racy(const float* x, float* out, int n) {
    __shared__ float buf[256];
    int t = threadIdx.x;
    float v = 0.f;
    for (int i = blockIdx.x * blockDim.x + t; i < n; i += blockDim.x * gridDim.x) v += x[i];
    buf[t] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) buf[t] += buf[t + s];
    }
    if (t == 0) atomicAdd(out, buf[0]);
}

// Row softmax, one warp per row: max and sum reduced with warp shuffles.
extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x & 31;
    if (warp >= rows) return;
    const float* r = x + (size_t)warp * cols;
    float m = NEG_INF;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, r[c]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.f;
    for (int c = lane; c < cols; c += 32) s += __expf(r[c] - m);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    s = __shfl_sync(0xffffffffu, s, 0);
    for (int c = lane; c < cols; c += 32) y[(size_t)warp * cols + c] = __fdividef(__expf(r[c] - m), s);
}

// Votes: per warp, how many elements are positive, and whether any / all are.
extern "C" __global__ void votes(const float* x, int* count, int* any, int* all) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, w = i / 32;
    unsigned b = __ballot_sync(0xffffffffu, x[i] > 0.f);
    int a = __any_sync(0xffffffffu, x[i] > 0.f), l = __all_sync(0xffffffffu, x[i] > 0.f);
    if ((threadIdx.x & 31) == 0) { count[w] = __popc(b); any[w] = a; all[w] = l; }
}

__device__ float atomic_max_float(float* a, float v) {
    int* p = (int*)a;
    int old = *p, assumed;
    do {
        assumed = old;
        old = atomicCAS(p, assumed, __float_as_int(fmaxf(v, __int_as_float(assumed))));
    } while (assumed != old);
    return __int_as_float(old);
}

// Atomics: a 16-bin histogram, the integer maximum, a float maximum through atomicCAS.
extern "C" __global__ void histogram(const int* x, const float* f, int n, unsigned* bins, int* maxv, float* fmax) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        atomicAdd(&bins[x[i] & 15], 1u);
        atomicMax(maxv, x[i]);
        atomic_max_float(fmax, f[i]);
    }
}

#define TILE 16
// C = A @ B (fp32) with 16x16 shared tiles; a 16x16 block of threads per output tile.
extern "C" __global__ void gemm_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE], Bs[TILE][TILE + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.f;
        Bs[ty][tx] = (col < N && k0 + ty < K) ? B[(k0 + ty) * N + col] : 0.f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

// The same without the barrier that keeps the next tile's loads behind this tile's reads.
extern "C" __global__ void gemm_tiled_racy(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE], Bs[TILE][TILE + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.f;
        Bs[ty][tx] = (col < N && k0 + ty < K) ? B[(k0 + ty) * N + col] : 0.f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

// One warp: C (16x8, fp32) = A (16x16) @ B (16x8), both row-major 16-bit, through ldmatrix
// (A as four 8x8 matrices, B transposed from its row-major K x N tile) and mma.sync m16n8k16.
#define MMA_TILE(name, T, TY)                                                                   \
extern "C" __global__ void name(const T* A, const T* B, float* C) {                             \
    __shared__ __align__(16) T As[16][16];                                                      \
    __shared__ __align__(16) T Bs[16][8];                                                       \
    int lane = threadIdx.x;                                                                     \
    for (int i = lane; i < 256; i += 32) As[i / 16][i % 16] = A[i];                             \
    for (int i = lane; i < 128; i += 32) Bs[i / 8][i % 8] = B[i];                               \
    __syncwarp();                                                                               \
    unsigned a[4], b[2];                                                                        \
    unsigned aaddr = (unsigned)__cvta_generic_to_shared(&As[lane % 16][(lane / 16) * 8]);       \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"             \
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(aaddr));                \
    unsigned baddr = (unsigned)__cvta_generic_to_shared(&Bs[lane % 16][0]);                     \
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"               \
                 : "=r"(b[0]), "=r"(b[1]) : "r"(baddr));                                        \
    float c[4] = {0.f, 0.f, 0.f, 0.f};                                                          \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY ".f32 "                     \
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"              \
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                               \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));           \
    int g = lane >> 2, t = lane & 3;                                                            \
    C[g * 8 + t * 2] = c[0];                                                                    \
    C[g * 8 + t * 2 + 1] = c[1];                                                                \
    C[(g + 8) * 8 + t * 2] = c[2];                                                              \
    C[(g + 8) * 8 + t * 2 + 1] = c[3];                                                          \
}
MMA_TILE(mma_tile_f16, __half, "f16")
MMA_TILE(mma_tile_bf16, __nv_bfloat16, "bf16")

// cp.async staging of two 128-element float4 stages per block (zero-filled past n), then each
// thread writes another thread's element. With `wait` 0 the copies are never waited for.
extern "C" __global__ void stage_copy(const float4* src, float4* dst, int n, int wait) {
    __shared__ __align__(16) float4 buf[2][128];
    int t = threadIdx.x;
    int base = blockIdx.x * 256;
    for (int s = 0; s < 2; ++s) {
        int i = base + s * 128 + t;
        unsigned d = (unsigned)__cvta_generic_to_shared(&buf[s][t]);
        int bytes = i < n ? 16 : 0;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src + (i < n ? i : 0)), "r"(bytes));
        asm volatile("cp.async.commit_group;\n" ::);
    }
    if (wait) asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();
    for (int s = 0; s < 2; ++s) {
        int i = base + s * 128 + t;
        if (i < n) {
            float4 v = buf[s][127 - t];
            dst[i] = make_float4(v.w, v.z, v.y, v.x);
        }
    }
}

// Conversions to fp16 / bf16 and back (round to nearest even), their bits, half2 arithmetic,
// and the packed cvt of inline PTX.
extern "C" __global__ void convert(const float* x, float* h, float* b, unsigned short* hbits,
                                   unsigned short* bbits, float* h2sum, unsigned* packed, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half hv = __float2half(x[i]);
    __nv_bfloat16 bv = __float2bfloat16(x[i]);
    h[i] = __half2float(hv);
    b[i] = __bfloat162float(bv);
    hbits[i] = __half_as_ushort(hv);
    bbits[i] = __bfloat16_as_ushort(bv);
    __half2 p = __hadd2(__floats2half2_rn(x[i], 1.0f), __halves2half2(hv, __float2half(2.0f)));
    float2 q = __half22float2(p);
    h2sum[i] = q.x + q.y;
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(x[i]), "f"(-x[i]));
    packed[i] = r;
}

// Half the warp shuffles while the other half waits at the block barrier: a deadlock.
extern "C" __global__ void divergent(float* out) {
    float v = (float)threadIdx.x;
    if (threadIdx.x < 16) v = __shfl_sync(0xffffffffu, v, 0);
    else __syncthreads();
    out[threadIdx.x] = v;
}

extern "C" __global__ void bad_address(float* out) {
    const float* p = (const float*)(size_t)64;
    out[threadIdx.x] = p[threadIdx.x];
}

extern "C" __global__ void traps(float* out) {
    if (threadIdx.x == 5) __trap();
    out[threadIdx.x] = 1.f;
}

// cooperative_groups: a block reduction through 32-thread tiles and 8-thread sub-tiles.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
extern "C" __global__ void cg_sum(const float* x, float* out, float* groups8, int n) {
    __shared__ float warp_sums[32];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    cg::thread_block_tile<8> eight = cg::tiled_partition<8>(block);
    int i = blockIdx.x * blockDim.x + block.thread_rank();
    float v = i < n ? x[i] : 0.f;
    float g8 = cg::reduce(eight, v, cg::plus<float>());
    if (eight.thread_rank() == 0 && i < n) groups8[i / 8] = g8;
    float w = cg::reduce(warp, v, cg::plus<float>());
    if (warp.thread_rank() == 0) warp_sums[warp.meta_group_rank()] = w;
    block.sync();
    if (block.thread_rank() == 0) {
        float s = 0.f;
        for (unsigned k = 0; k < warp.meta_group_size(); ++k) s += warp_sums[k];
        atomicAdd(out, s);
    }
}

// The classic block reduction whose last six steps run warp-synchronously through a volatile
// pointer, without barriers (lanes of a converged warp in lockstep).
__device__ void warp_reduce(volatile float* s, int t) {
    s[t] += s[t + 32];
    s[t] += s[t + 16];
    s[t] += s[t + 8];
    s[t] += s[t + 4];
    s[t] += s[t + 2];
    s[t] += s[t + 1];
}
extern "C" __global__ void tree_sum_warp_sync(const float* x, float* out, int n) {
    __shared__ float buf[256];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x * 2 + t;
    float v = 0.f;
    if (i < n) v += x[i];
    if (i + (int)blockDim.x < n) v += x[i + blockDim.x];
    buf[t] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 32; s >>= 1) {
        if (t < s) buf[t] += buf[t + s];
        __syncthreads();
    }
    if (t < 32) warp_reduce(buf, t);
    if (t == 0) atomicAdd(out, buf[0]);
}

// A 1-D TMA bulk copy into shared memory, completing on an mbarrier that every thread waits on
// in a try_wait loop; each thread then reads another thread's float4.
extern "C" __global__ void bulk_stage(const float4* src, float* dst) {
    __shared__ __align__(16) float4 buf[256];
    __shared__ __align__(8) unsigned long long bar;
    unsigned bar_addr = (unsigned)__cvta_generic_to_shared(&bar);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar_addr), "r"(1));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned bytes = 256 * 16;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_addr), "r"(bytes) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"((unsigned)__cvta_generic_to_shared(buf)), "l"(src + blockIdx.x * 256), "r"(bytes),
                     "r"(bar_addr) : "memory");
    }
    asm volatile("{\n .reg .pred P1;\n WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
                 " @P1 bra DONE;\n bra WAIT;\n DONE:\n }" ::"r"(bar_addr), "r"(0) : "memory");
    float4 v = buf[255 - threadIdx.x];
    dst[blockIdx.x * 256 + threadIdx.x] = v.x + v.y + v.z + v.w;
}

// Warp specialization with named barriers: warp 0 produces a tile into shared memory, warps
// 1-3 consume it; barrier 1 hands the tile over (the producer arrives, the consumers wait),
// barrier 2 hands the buffer back. With `guard` 0 the producer does not wait for it.
extern "C" __global__ void named_handoff(const float* x, float* y, int guard) {
    __shared__ float buf[32];
    int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    for (int round = 0; round < 2; ++round) {
        if (warp == 0) {
            if (round > 0 && guard) asm volatile("bar.sync 2, 128;" ::: "memory");
            buf[lane] = x[round * 32 + lane] * 2.f;
            asm volatile("bar.arrive 1, 128;" ::: "memory");
        } else {
            asm volatile("bar.sync 1, 128;" ::: "memory");
            y[round * 96 + (warp - 1) * 32 + lane] = buf[31 - lane] + warp;
            if (round == 0 && guard) asm volatile("bar.arrive 2, 128;" ::: "memory");
        }
    }
}

__device__ void wait_parity(unsigned bar_addr, unsigned parity) {
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar_addr), "r"(parity) : "memory");
    }
}

// A one-slot ring between a producer warp, whose cp.async copies arrive on the slot's full
// mbarrier when they land, and two consumer warps, which meet at a named barrier of their own
// (while the producer polls the empty mbarrier) before they release the slot. With `noinc` 0
// the copies' arrival is balanced by its own increment: the full barrier never completes.
extern "C" __global__ void cp_arrive_ring(const float* x, float* y, int rounds, int noinc) {
    __shared__ __align__(16) float buf[32];
    __shared__ __align__(8) unsigned long long bar[2];
    unsigned full = (unsigned)__cvta_generic_to_shared(&bar[0]);
    unsigned empty = (unsigned)__cvta_generic_to_shared(&bar[1]);
    int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(full), "r"(32));
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(empty), "r"(64));
    }
    __syncthreads();
    for (int r = 0; r < rounds; ++r) {
        if (warp == 0) {
            if (r > 0) wait_parity(empty, (r - 1) & 1);
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4;"
                         ::"r"((unsigned)__cvta_generic_to_shared(buf + lane)), "l"(x + r * 32 + lane) : "memory");
            if (noinc) asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(full) : "memory");
            else asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];" ::"r"(full) : "memory");
        } else {
            wait_parity(full, r & 1);
            float v = buf[31 - lane] + warp;
            asm volatile("bar.sync 1, 64;" ::: "memory");
            y[r * 64 + (warp - 1) * 32 + lane] = v;
            asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(empty) : "memory");
        }
    }
}

// Waits on an mbarrier phase that never completes (its expected arrival never comes).
extern "C" __global__ void stuck_wait(float* out) {
    __shared__ __align__(8) unsigned long long bar;
    unsigned bar_addr = (unsigned)__cvta_generic_to_shared(&bar);
    if (threadIdx.x == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar_addr), "r"(2));
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar_addr) : "memory");
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar_addr), "r"(0) : "memory");
    }
    out[threadIdx.x] = 1.f;
}
