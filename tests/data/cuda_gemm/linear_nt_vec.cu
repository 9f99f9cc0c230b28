// Y = alpha * X @ W^T with W given as N x K rows (a Linear layer's weight), bf16. 64 x 64 tiles,
// 32-deep slices staged with one 16-byte __ldg per thread and operand (K a multiple of 8);
// 256 threads of 4 x 4 outputs, K tile loop unrolled by pragma
#include <cuda_bf16.h>
#define BM 64
#define BN 64
#define BK 32

extern "C" __global__ void linear_nt(const __nv_bfloat16* __restrict__ X,
                                     const __nv_bfloat16* __restrict__ W,
                                     __nv_bfloat16* __restrict__ Y, int M, int N, int K,
                                     float alpha) {
  __shared__ __align__(16) __nv_bfloat16 xs[BM][BK + 8];
  __shared__ __align__(16) __nv_bfloat16 ws[BN][BK + 8];
  const int t = threadIdx.x;
  const int tm = t / 16, tn = t % 16;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
  const int r = t / 4, c = (t % 4) * 8;
  for (int k0 = 0; k0 < K; k0 += BK) {
    float4 xv = make_float4(0.f, 0.f, 0.f, 0.f), wv = make_float4(0.f, 0.f, 0.f, 0.f);
    if (m0 + r < M && k0 + c < K)
      xv = __ldg(reinterpret_cast<const float4*>(X + (size_t)(m0 + r) * K + k0 + c));
    if (n0 + r < N && k0 + c < K)
      wv = __ldg(reinterpret_cast<const float4*>(W + (size_t)(n0 + r) * K + k0 + c));
    *reinterpret_cast<float4*>(&xs[r][c]) = xv;
    *reinterpret_cast<float4*>(&ws[r][c]) = wv;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float xr[4], wr[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) xr[i] = __bfloat162float(xs[tm + 16 * i][kk]);
#pragma unroll
      for (int j = 0; j < 4; ++j) wr[j] = __bfloat162float(ws[tn + 16 * j][kk]);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += xr[i] * wr[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = m0 + tm + 16 * i, col = n0 + tn + 16 * j;
      if (row < M && col < N) Y[(size_t)row * N + col] = __float2bfloat16(alpha * acc[i][j]);
    }
}

void launch(const __nv_bfloat16* X, const __nv_bfloat16* W, __nv_bfloat16* Y, int M, int N, int K,
            float alpha) {
  linear_nt<<<dim3((N + BN - 1) / BN, (M + BM - 1) / BM), 256>>>(X, W, Y, M, N, K, alpha);
}
