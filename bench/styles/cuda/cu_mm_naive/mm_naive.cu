// C = A @ B for row-major bf16 matrices: one thread per output element, fp32 accumulation.
#include <cuda_bf16.h>

extern "C" __global__ void matmul_naive(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                        __nv_bfloat16* C, int M, int N, int K)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)k * N + col]);
        }
        C[(size_t)row * N + col] = __float2bfloat16(acc);
    }
}
