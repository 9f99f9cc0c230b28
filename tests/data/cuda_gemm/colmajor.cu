// cuBLAS-like column-major fp16 GEMM: C (m x n, ldc) = A (m x k, lda) * B (k x n, ldb), all
// column-major; one output a thread, threadIdx.x along the rows
#include <cuda_fp16.h>
extern "C" __global__ void gemm_colmajor(int m, int n, int k, const __half* A, int lda,
                                         const __half* B, int ldb, __half* C, int ldc) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < m && j < n) {
    float s = 0.0f;
    for (int p = 0; p < k; ++p) s += __half2float(A[i + p * lda]) * __half2float(B[p + j * ldb]);
    C[i + j * ldc] = __float2half(s);
  }
}

void launch(int m, int n, int k, const __half* A, int lda, const __half* B, int ldb, __half* C,
            int ldc) {
  gemm_colmajor<<<dim3((m + 31) / 32, (n + 7) / 8), dim3(32, 8)>>>(m, n, k, A, lda, B, ldb, C, ldc);
}
