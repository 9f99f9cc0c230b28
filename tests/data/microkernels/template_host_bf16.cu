// A templated tiled GEMM as a C++ extension writes it: the tile sizes and the element type are
// template arguments, the host function below launches the one instantiation.
#include <cuda_bf16.h>
template <int BM, int BN, int BK, int TM, int TN, typename scalar_t>
__global__ void mm_templ(const scalar_t* __restrict__ A, const scalar_t* __restrict__ B, scalar_t* __restrict__ C,
                         int M, int N, int K) {
  __shared__ scalar_t As[BM][BK];
  __shared__ scalar_t Bs[BK][BN];
  const int tid = threadIdx.x;
  const int tr = tid / (BN / TN), tc = tid % (BN / TN);
  float acc[TM][TN] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int i = tid; i < BM * BK; i += (BM / TM) * (BN / TN)) {
      int r = i / BK, c = i % BK;
      As[r][c] = (blockIdx.y * BM + r < M && k0 + c < K) ? A[(blockIdx.y * BM + r) * K + k0 + c] : scalar_t(0.0f);
    }
    for (int i = tid; i < BK * BN; i += (BM / TM) * (BN / TN)) {
      int r = i / BN, c = i % BN;
      Bs[r][c] = (k0 + r < K && blockIdx.x * BN + c < N) ? B[(k0 + r) * N + blockIdx.x * BN + c] : scalar_t(0.0f);
    }
    __syncthreads();
    for (int k = 0; k < BK; ++k)
      for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j)
          acc[i][j] += float(As[tr * TM + i][k]) * float(Bs[k][tc * TN + j]);
    __syncthreads();
  }
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j) {
      int r = blockIdx.y * BM + tr * TM + i, c = blockIdx.x * BN + tc * TN + j;
      if (r < M && c < N) C[r * N + c] = scalar_t(acc[i][j]);
    }
}
void launch_mm(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int M, int N, int K) {
  dim3 grid((N + 127) / 128, (M + 63) / 64);
  mm_templ<64, 128, 32, 4, 8, __nv_bfloat16><<<grid, 256>>>(a, b, c, M, N, K);
}
