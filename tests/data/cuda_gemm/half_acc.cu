// fp16 GEMM accumulating in half: every product and partial sum is rounded to fp16
#include <cuda_fp16.h>
#define TILE 16
extern "C" __global__ void hgemm_half_acc(const __half* A, const __half* B, __half* C, int M,
                                          int N, int K) {
  __shared__ __half sA[TILE][TILE];
  __shared__ __half sB[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
  __half acc = __float2half(0.f);
  for (int t = 0; t < K; t += TILE) {
    sA[threadIdx.y][threadIdx.x] = (row < M && t + threadIdx.x < K)
        ? A[row * K + t + threadIdx.x] : __float2half(0.f);
    sB[threadIdx.y][threadIdx.x] = (t + threadIdx.y < K && col < N)
        ? B[(t + threadIdx.y) * N + col] : __float2half(0.f);
    __syncthreads();
    for (int k = 0; k < TILE; ++k) acc = __hfma(sA[threadIdx.y][k], sB[k][threadIdx.x], acc);
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}

void launch(const __half* A, const __half* B, __half* C, int M, int N, int K) {
  hgemm_half_acc<<<dim3((N + TILE - 1) / TILE, (M + TILE - 1) / TILE), dim3(TILE, TILE)>>>(
      A, B, C, M, N, K);
}
