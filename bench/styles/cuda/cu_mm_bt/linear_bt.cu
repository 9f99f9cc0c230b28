// y = x @ w^T with w stored (N, K) as a linear layer keeps it. 16x16 tiles; the w tile is read
// along its rows (K contiguous) and stored so that the inner loop walks shared memory by k.
#include <cuda_bf16.h>

#define BS 16

extern "C" __global__ void linear_nt(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                     __nv_bfloat16* y, int M, int N, int K)
{
    __shared__ float xs[BS][BS + 1];
    __shared__ float ws[BS][BS + 1];
    const int r = blockIdx.y * BS + threadIdx.y;   // row of x / y
    const int c = blockIdx.x * BS + threadIdx.x;   // row of w = column of y
    const int wrow = blockIdx.x * BS + threadIdx.y;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += BS) {
        const int k = k0 + threadIdx.x;
        xs[threadIdx.y][threadIdx.x] = (r < M && k < K) ? __bfloat162float(x[(size_t)r * K + k]) : 0.f;
        ws[threadIdx.x][threadIdx.y] = (wrow < N && k < K) ? __bfloat162float(w[(size_t)wrow * K + k]) : 0.f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BS; ++kk)
            acc += xs[threadIdx.y][kk] * ws[kk][threadIdx.x];
        __syncthreads();
    }
    if (r < M && c < N) y[(size_t)r * N + c] = __float2bfloat16(acc);
}
