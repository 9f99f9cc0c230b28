// C = A @ B for row-major fp16 matrices. The kernel takes one structure by value and reads the
// operands through its fields. A block of 256 threads computes a 64x64 tile of C, each thread
// a 4x4 patch; K is walked 16 at a time, A's tile stored transposed (k-major) with padding.
#include <cuda_fp16.h>

struct GemmArgs {
    const __half* a;
    const __half* b;
    __half* c;
    int m, n, k;
};

#define TILE 64
#define KSTEP 16
#define PATCH 4

extern "C" __global__ void gemm_params(GemmArgs g)
{
    __shared__ float a_t[KSTEP][TILE + 4];
    __shared__ float b_s[KSTEP][TILE];
    const int tid = threadIdx.x;
    const int pr = tid / (TILE / PATCH), pc = tid % (TILE / PATCH);
    const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    float acc[PATCH][PATCH] = {};

    for (int k0 = 0; k0 < g.k; k0 += KSTEP) {
        for (int e = tid; e < TILE * KSTEP; e += 256) {
            const int r = e / KSTEP, kk = e % KSTEP;
            const bool inside = row0 + r < g.m && k0 + kk < g.k;
            a_t[kk][r] = inside ? __half2float(g.a[(size_t)(row0 + r) * g.k + k0 + kk]) : 0.0f;
        }
        for (int e = tid; e < KSTEP * TILE; e += 256) {
            const int kk = e / TILE, c = e % TILE;
            const bool inside = k0 + kk < g.k && col0 + c < g.n;
            b_s[kk][c] = inside ? __half2float(g.b[(size_t)(k0 + kk) * g.n + col0 + c]) : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < KSTEP; ++kk)
            for (int i = 0; i < PATCH; ++i)
                for (int j = 0; j < PATCH; ++j)
                    acc[i][j] += a_t[kk][pr * PATCH + i] * b_s[kk][pc * PATCH + j];
        __syncthreads();
    }
    for (int i = 0; i < PATCH; ++i)
        for (int j = 0; j < PATCH; ++j) {
            const int r = row0 + pr * PATCH + i, c = col0 + pc * PATCH + j;
            if (r < g.m && c < g.n)
                g.c[(size_t)r * g.n + c] = __float2half(acc[i][j]);
        }
}
