// C = A @ B for row-major fp16 matrices, fp32 accumulation. The tiles are square and as wide
// as the (square, 2-D) block: the kernel reads their size from blockDim.x, and the two tiles
// are carved out of one dynamic shared-memory buffer the launch sizes.
#include <cuda_fp16.h>

#define IDX(r, c, ld) ((r) * (ld) + (c))

extern "C" __global__ void hgemm_dyn(const __half* __restrict__ A, const __half* __restrict__ B,
                                     __half* __restrict__ C, int M, int N, int K)
{
    extern __shared__ float smem[];
    const int TS = blockDim.x;
    float* As = smem;
    float* Bs = smem + TS * TS;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TS + ty;
    const int col = blockIdx.x * TS + tx;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TS) {
        As[IDX(ty, tx, TS)] = (row < M && t + tx < K) ? __half2float(A[IDX(row, t + tx, K)]) : 0.0f;
        Bs[IDX(ty, tx, TS)] = (t + ty < K && col < N) ? __half2float(B[IDX(t + ty, col, N)]) : 0.0f;
        __syncthreads();
        for (int k = 0; k < TS; ++k)
            acc += As[IDX(ty, k, TS)] * Bs[IDX(k, tx, TS)];
        __syncthreads();
    }
    if (row < M && col < N)
        C[IDX(row, col, N)] = __float2half(acc);
}
