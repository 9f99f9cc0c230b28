// fp16 GEMM templated on its tile: BM x BN outputs a block, BK deep, one output a thread
#include <cuda_fp16.h>
template <int BM, int BN, int BK>
__global__ void tiled_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                           __half* __restrict__ C, int M, int N, int K) {
  __shared__ __half As[BM][BK];
  __shared__ __half Bs[BK][BN];
  const int tid = threadIdx.x;
  const int r = tid / BN, c = tid % BN;
  const int row = blockIdx.y * BM + r, col = blockIdx.x * BN + c;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int i = tid; i < BM * BK; i += BM * BN) {
      const int ar = i / BK, ac = i % BK;
      const int gr = blockIdx.y * BM + ar, gc = k0 + ac;
      As[ar][ac] = (gr < M && gc < K) ? A[gr * K + gc] : __float2half(0.f);
    }
    for (int i = tid; i < BK * BN; i += BM * BN) {
      const int br = i / BN, bc = i % BN;
      const int gr = k0 + br, gc = blockIdx.x * BN + bc;
      Bs[br][bc] = (gr < K && gc < N) ? B[gr * N + gc] : __float2half(0.f);
    }
    __syncthreads();
    for (int k = 0; k < BK; ++k) acc += __half2float(As[r][k]) * __half2float(Bs[k][c]);
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = __float2half(acc);
}

void launch(const __half* A, const __half* B, __half* C, int M, int N, int K) {
  constexpr int BM = 16, BN = 16, BK = 32;
  dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
  tiled_gemm<BM, BN, BK><<<grid, BM * BN>>>(A, B, C, M, N, K);
}
