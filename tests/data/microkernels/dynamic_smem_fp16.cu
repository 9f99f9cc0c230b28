// Half-precision GEMM whose tiles are cut from one dynamic shared buffer (the host passes
// (BM * BK + BK * BN) * 2 bytes); 256 threads, 4x8 outputs each.
#include <cuda_fp16.h>
#define BM 128
#define BN 64
#define BK 32
extern "C" __global__ void __launch_bounds__(256) hgemm_dyn(const half* A, const half* B, half* C, int M, int N, int K) {
  extern __shared__ half smem[];
  half* As = smem;                 // BM x BK, row-major
  half* Bs = smem + BM * BK;       // BK x BN, row-major
  const int t = threadIdx.x, wr = t / 8, wc = t % 8;
  float acc[4][8];
  for (int i = 0; i < 4; ++i) for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int e = t; e < BM * BK; e += 256) { int r = e / BK, c = e % BK;
      As[r * BK + c] = (blockIdx.y * BM + r < M && k0 + c < K) ? A[(blockIdx.y * BM + r) * K + k0 + c] : __float2half(0.f); }
    for (int e = t; e < BK * BN; e += 256) { int r = e / BN, c = e % BN;
      Bs[r * BN + c] = (k0 + r < K && blockIdx.x * BN + c < N) ? B[(k0 + r) * N + blockIdx.x * BN + c] : __float2half(0.f); }
    __syncthreads();
    for (int kk = 0; kk < BK; ++kk)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 8; ++j)
          acc[i][j] += __half2float(As[(wr * 4 + i) * BK + kk]) * __half2float(Bs[kk * BN + wc * 8 + j]);
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) for (int j = 0; j < 8; ++j) {
    int r = blockIdx.y * BM + wr * 4 + i, c = blockIdx.x * BN + wc * 8 + j;
    if (r < M && c < N) C[r * N + c] = __float2half(acc[i][j]);
  }
}
