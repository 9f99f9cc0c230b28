// C = alpha * (A @ B) for half-precision A (M x K) and B (K x N), row-major. Tiles are widened
// to fp32 when staged (A's kept k-major); 256 threads, 8x8 outputs each in a 2-D register tile.
#include <cuda_fp16.h>

#define TBM 128
#define TBN 128
#define TBK 8
#define RM 8
#define RN 8
#define A_AT(k, m) ((k) * TBM + (m))
#define B_AT(k, n) ((k) * TBN + (n))

extern "C" __global__ void gemm_k8(const __half* A, const __half* B, __half* C, int M, int N, int K,
                                   float alpha) {
  __shared__ float sa[TBK * TBM];
  __shared__ float sb[TBK * TBN];
  const unsigned tid = threadIdx.x;
  const unsigned tr = tid / (TBN / RN), tc = tid % (TBN / RN);
  const int bm = blockIdx.y * TBM, bn = blockIdx.x * TBN;
  float r[RM][RN] = {};
  float fa[RM], fb[RN];
  for (int k0 = 0; k0 < K; k0 += TBK) {
    for (unsigned i = tid; i < TBM * TBK; i += 256) {
      const unsigned m = i / TBK, k = i % TBK;
      sa[A_AT(k, m)] = (bm + m < M && k0 + k < K) ? __half2float(A[(bm + m) * K + k0 + k]) : 0.0f;
    }
    for (unsigned i = tid; i < TBK * TBN; i += 256) {
      const unsigned k = i / TBN, n = i % TBN;
      float v = 0.0f;
      if (k0 + k < K && bn + n < N) v = __half2float(B[(k0 + k) * N + bn + n]);
      sb[B_AT(k, n)] = v;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TBK; ++k) {
#pragma unroll
      for (int i = 0; i < RM; ++i) fa[i] = sa[A_AT(k, tr * RM + i)];
#pragma unroll
      for (int j = 0; j < RN; ++j) fb[j] = sb[B_AT(k, tc * RN + j)];
#pragma unroll
      for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; ++j) r[i][j] += fa[i] * fb[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < RM; ++i) {
    const int row = bm + tr * RM + i;
    for (int j = 0; j < RN; ++j) {
      const int col = bn + tc * RN + j;
      if (row < M && col < N) C[row * N + col] = __float2half(alpha * r[i][j]);
    }
  }
}
