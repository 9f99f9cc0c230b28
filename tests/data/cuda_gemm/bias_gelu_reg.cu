// bf16 y = gelu(x @ w + b): 64 x 64 block tile, BK = 8, 256 threads, a 4 x 4 register block each
#include <cuda_bf16.h>
#define BM 64
#define BN 64
#define BK 8
#define TM 4
#define TN 4
__device__ __forceinline__ float gelu_tanh(float v) {
  return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
}
extern "C" __global__ void __launch_bounds__(256)
matmul_bias_gelu(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                 const float* __restrict__ b, __nv_bfloat16* __restrict__ y, int M, int N, int K) {
  __shared__ float xs[BK][BM];
  __shared__ float ws[BK][BN];
  const int tid = threadIdx.x;
  const int trow = tid / (BN / TN), tcol = tid % (BN / TN);
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float acc[TM][TN] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int i = tid; i < BM * BK; i += 256) {
      int r = i / BK, c = i % BK;
      float v = 0.f;
      if (m0 + r < M && k0 + c < K) v = __bfloat162float(x[(m0 + r) * K + k0 + c]);
      xs[c][r] = v;
    }
    for (int i = tid; i < BK * BN; i += 256) {
      int r = i / BN, c = i % BN;
      float v = 0.f;
      if (k0 + r < K && n0 + c < N) v = __bfloat162float(w[(k0 + r) * N + n0 + c]);
      ws[r][c] = v;
    }
    __syncthreads();
    for (int kk = 0; kk < BK; ++kk) {
      float ra[TM], rb[TN];
      for (int i = 0; i < TM; ++i) ra[i] = xs[kk][trow * TM + i];
      for (int j = 0; j < TN; ++j) rb[j] = ws[kk][tcol * TN + j];
      for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j) {
      int r = m0 + trow * TM + i, c = n0 + tcol * TN + j;
      if (r < M && c < N) y[r * N + c] = __float2bfloat16(gelu_tanh(acc[i][j] + b[c]));
    }
}

void launch(const __nv_bfloat16* x, const __nv_bfloat16* w, const float* b, __nv_bfloat16* y,
            int M, int N, int K) {
  matmul_bias_gelu<<<dim3((N + BN - 1) / BN, (M + BM - 1) / BM), 256>>>(x, w, b, y, M, N, K);
}
