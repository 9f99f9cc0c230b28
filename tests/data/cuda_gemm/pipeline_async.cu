// bf16 GEMM double-buffered with the CUDA pipeline primitives: the next step's tiles are copied
// 16 bytes at a time by __pipeline_memcpy_async into the other buffer while this one is read, a
// chunk past M, N or K zero-filled by the copy itself (K a multiple of 8); 64 x 64 tiles, 256
// threads of 4 x 4 outputs
#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#define BM 64
#define BN 64
#define BK 32

extern "C" __global__ void __launch_bounds__(256)
gemm_pipelined(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
               __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  __shared__ __align__(16) __nv_bfloat16 as[2][BM][BK];
  __shared__ __align__(16) __nv_bfloat16 bs[2][BK][BN];
  const int t = threadIdx.x, tm = t / 16, tn = t % 16;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int steps = (K + BK - 1) / BK;
  float acc[4][4] = {};
  // A: 64 x 32 = 256 chunks of 8 elements; B: 32 x 64 = 256 chunks of 8
  const int ar = t / 4, ac = t % 4 * 8, br = t / 8, bc = t % 8 * 8;
  bool in_a = m0 + ar < M && ac < K, in_b = br < K && n0 + bc < N;
  __pipeline_memcpy_async(&as[0][ar][ac], &A[in_a ? (size_t)(m0 + ar) * K + ac : 0], 16,
                          in_a ? 0 : 16);
  __pipeline_memcpy_async(&bs[0][br][bc], &B[in_b ? (size_t)br * N + n0 + bc : 0], 16,
                          in_b ? 0 : 16);
  __pipeline_commit();
  for (int s = 0; s < steps; ++s) {
    const int cur = s % 2;
    if (s + 1 < steps) {
      const int k1 = (s + 1) * BK;
      in_a = m0 + ar < M && k1 + ac < K;
      in_b = k1 + br < K && n0 + bc < N;
      __pipeline_memcpy_async(&as[cur ^ 1][ar][ac],
                              &A[in_a ? (size_t)(m0 + ar) * K + k1 + ac : 0], 16, in_a ? 0 : 16);
      __pipeline_memcpy_async(&bs[cur ^ 1][br][bc],
                              &B[in_b ? (size_t)(k1 + br) * N + n0 + bc : 0], 16, in_b ? 0 : 16);
    }
    __pipeline_commit();
    __pipeline_wait_prior(1);
    __syncthreads();
    for (int k = 0; k < BK; ++k)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
          acc[i][j] += __bfloat162float(as[cur][tm * 4 + i][k]) *
                       __bfloat162float(bs[cur][k][tn * 4 + j]);
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int r = m0 + tm * 4 + i, c = n0 + tn * 4 + j;
      if (r < M && c < N) C[(size_t)r * N + c] = __float2bfloat16(acc[i][j]);
    }
}

void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N,
            int K) {
  gemm_pipelined<<<dim3((N + BN - 1) / BN, (M + BM - 1) / BM), 256>>>(A, B, C, M, N, K);
}
