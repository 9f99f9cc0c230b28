// Shared-memory tiled GEMM (the textbook version): each 32x32 block stages a tile of A and a
// tile of B in shared memory, then every thread accumulates its element from the tiles.
#include <cuda_bf16.h>

#define TILE 32

extern "C" __global__ void matmul_tiled(const __nv_bfloat16* __restrict__ A,
                                        const __nv_bfloat16* __restrict__ B,
                                        __nv_bfloat16* __restrict__ C, int M, int N, int K)
{
    __shared__ __nv_bfloat16 sA[TILE][TILE];
    __shared__ __nv_bfloat16 sB[TILE][TILE];

    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;
    int col = blockIdx.x * TILE + tx;
    float sum = 0.0f;

    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ka = t * TILE + tx;
        int kb = t * TILE + ty;
        __nv_bfloat16 a = __float2bfloat16(0.0f);
        __nv_bfloat16 b = __float2bfloat16(0.0f);
        if (row < M && ka < K) a = A[(size_t)row * K + ka];
        if (kb < K && col < N) b = B[(size_t)kb * N + col];
        sA[ty][tx] = a;
        sB[ty][tx] = b;
        __syncthreads();
        for (int k = 0; k < TILE; ++k)
            sum += __bfloat162float(sA[ty][k]) * __bfloat162float(sB[k][tx]);
        __syncthreads();
    }
    if (row < M && col < N)
        C[(size_t)row * N + col] = __float2bfloat16(sum);
}
