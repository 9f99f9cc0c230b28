// bf16 GEMM, one output an iteration of a grid-stride loop over the flattened M x N output,
// the accumulator starting from beta * C
#include <cuda_bf16.h>
extern "C" __global__ void gemm_gridstride(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                           float* C, int M, int N, int K, float beta) {
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < M * N; idx += gridDim.x * blockDim.x) {
    const int r = idx / N, c = idx % N;
    float acc = beta * C[idx];
    for (int k = 0; k < K; ++k)
      acc += __bfloat162float(A[r * K + k]) * __bfloat162float(B[k * N + c]);
    C[idx] = acc;
  }
}

void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K,
            float beta) {
  gemm_gridstride<<<64, 256>>>(A, B, C, M, N, K, beta);
}
