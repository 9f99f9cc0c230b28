// naive batched fp16 GEMM: blockIdx.z is the batch, the operands indexed with its offset inline
#include <cuda_fp16.h>
extern "C" __global__ void bmm_naive(const __half* A, const __half* B, __half* C, int M, int N,
                                     int K) {
  const int b = blockIdx.z;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row < M && col < N) {
    float acc = 0.f;
    for (int k = 0; k < K; ++k)
      acc += __half2float(A[(size_t)b * M * K + row * K + k]) *
             __half2float(B[(size_t)b * K * N + k * N + col]);
    C[(size_t)b * M * N + row * N + col] = __float2half(acc);
  }
}

void launch(const __half* A, const __half* B, __half* C, int batch, int M, int N, int K) {
  bmm_naive<<<dim3((N + 15) / 16, (M + 15) / 16, batch), dim3(16, 16)>>>(A, B, C, M, N, K);
}
