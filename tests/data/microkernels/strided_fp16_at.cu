// Tiled half-precision GEMM, C = A @ B (row-major). 16x16 threads per block; thread (tx, ty)
// owns the outputs (ty + 16 i, tx + 16 j) of the 64x64 block tile. The A tile is kept
// transposed (k-major) so the inner loop reads it along the output rows.
#include <cuda_fp16.h>

constexpr int TILE_M = 64;
constexpr int TILE_N = 64;
constexpr int TILE_K = 32;
constexpr int REG = 4;

extern "C" __global__ void hgemm_strided(const __half* __restrict__ a, const __half* __restrict__ b,
                                         __half* __restrict__ c, int m, int n, int k) {
  __shared__ __half a_t[TILE_K][TILE_M];
  __shared__ __half b_s[TILE_K][TILE_N];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row0 = blockIdx.y * TILE_M, col0 = blockIdx.x * TILE_N;
  const int tid = ty * 16 + tx;
  float sum[REG][REG];
  for (int i = 0; i < REG; ++i)
    for (int j = 0; j < REG; ++j) sum[i][j] = 0.0f;

  for (int k0 = 0; k0 < k; k0 += TILE_K) {
    for (int e = tid; e < TILE_M * TILE_K; e += 256) {
      const int r = e / TILE_K, kk = e % TILE_K;
      a_t[kk][r] = (row0 + r < m && k0 + kk < k) ? a[(row0 + r) * k + k0 + kk] : __float2half(0.0f);
    }
    for (int e = tid; e < TILE_K * TILE_N; e += 256) {
      const int kk = e / TILE_N, col = e % TILE_N;
      b_s[kk][col] = (k0 + kk < k && col0 + col < n) ? b[(k0 + kk) * n + col0 + col] : __float2half(0.0f);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < TILE_K; ++kk) {
      float x[REG], y[REG];
      for (int i = 0; i < REG; ++i) x[i] = __half2float(a_t[kk][ty + 16 * i]);
      for (int j = 0; j < REG; ++j) y[j] = __half2float(b_s[kk][tx + 16 * j]);
      for (int i = 0; i < REG; ++i)
        for (int j = 0; j < REG; ++j) sum[i][j] = fmaf(x[i], y[j], sum[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < REG; ++i)
    for (int j = 0; j < REG; ++j) {
      const int r = row0 + ty + 16 * i, col = col0 + tx + 16 * j;
      if (r < m && col < n) c[r * n + col] = __float2half(sum[i][j]);
    }
}
