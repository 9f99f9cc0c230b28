// C = alpha * A @ B + beta * C, fp16, flat 16 x 16 shared tiles read through pointers set once
// per thread (its row of A, its column of B)
#include <cuda_fp16.h>
#define TILE 16
extern "C" __global__ void hgemm_rowptr(int M, int N, int K, float alpha, const half* A,
                                        const half* B, float beta, half* C) {
  __shared__ half sA[TILE * TILE];
  __shared__ half sB[TILE * TILE];
  int ty = threadIdx.y, tx = threadIdx.x;
  int row = blockIdx.y * TILE + ty;
  int col = blockIdx.x * TILE + tx;
  const half* arow = sA + ty * TILE;
  const half* bcol = &sB[tx];
  float sum = 0.0f;
  for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
    int ka = t * TILE + tx, kb = t * TILE + ty;
    sA[ty * TILE + tx] = (row < M && ka < K) ? A[row * K + ka] : __float2half(0.0f);
    sB[ty * TILE + tx] = (kb < K && col < N) ? B[kb * N + col] : __float2half(0.0f);
    __syncthreads();
    for (int k = 0; k < TILE; ++k)
      sum += __half2float(arow[k]) * __half2float(bcol[k * TILE]);
    __syncthreads();
  }
  if (row < M && col < N)
    C[row * N + col] = __float2half(alpha * sum + beta * __half2float(C[row * N + col]));
}

void launch(int M, int N, int K, float alpha, const half* A, const half* B, float beta, half* C) {
  dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
  hgemm_rowptr<<<grid, block>>>(M, N, K, alpha, A, B, beta, C);
}
