// naive bf16 GEMM with size_t indices and its K loop unrolled by four by hand (and a remainder)
#include <cuda_bf16.h>
extern "C" __global__ void mm_unroll4(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                      __nv_bfloat16* C, size_t M, size_t N, size_t K) {
  const size_t row = (size_t)blockIdx.y * blockDim.y + threadIdx.y;
  const size_t col = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (row < M && col < N) {
    float acc = 0.f;
    size_t k = 0;
    for (; k + 4 <= K; k += 4) {
      acc += __bfloat162float(A[row * K + k]) * __bfloat162float(B[k * N + col]);
      acc += __bfloat162float(A[row * K + k + 1]) * __bfloat162float(B[(k + 1) * N + col]);
      acc += __bfloat162float(A[row * K + k + 2]) * __bfloat162float(B[(k + 2) * N + col]);
      acc += __bfloat162float(A[row * K + k + 3]) * __bfloat162float(B[(k + 3) * N + col]);
    }
    for (; k < K; ++k) acc += __bfloat162float(A[row * K + k]) * __bfloat162float(B[k * N + col]);
    C[row * N + col] = __float2bfloat16(acc);
  }
}

void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, size_t M, size_t N,
            size_t K) {
  mm_unroll4<<<dim3((N + 15) / 16, (M + 15) / 16), dim3(16, 16)>>>(A, B, C, M, N, K);
}
