// out = relu(x @ w^T + bias): x is (M, K), w is (N, K), both row-major bf16; out is bf16.
// 128 threads per block, a 64x128 output tile; each thread keeps 8 rows x 8 strided columns.
// The weight tile is stored as it is read from global memory (N x K, padded rows).
#include <cuda_bf16.h>

#define TILE_ROWS 64
#define TILE_COLS 128
#define DEPTH 16
#define PAD 8

typedef __nv_bfloat16 elem_t;

__global__ void __launch_bounds__(128) linear_relu(const elem_t* x, const elem_t* w, const float* bias,
                                                   elem_t* out, int M, int N, int K) {
  __shared__ elem_t xs[TILE_ROWS][DEPTH + PAD];
  __shared__ elem_t ws[TILE_COLS][DEPTH + PAD];
  const int t = threadIdx.x;
  const int lane_col = t % 16, lane_row = t / 16;
  const int m0 = blockIdx.y * TILE_ROWS, n0 = blockIdx.x * TILE_COLS;
  float acc[64];
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;

  for (int kt = 0; kt < K; kt += DEPTH) {
    for (int e = t; e < TILE_ROWS * DEPTH; e += 128) {
      const int r = e / DEPTH, kk = e % DEPTH;
      elem_t v = __float2bfloat16(0.0f);
      if (m0 + r < M && kt + kk < K) v = x[(size_t)(m0 + r) * K + kt + kk];
      xs[r][kk] = v;
    }
    for (int e = t; e < TILE_COLS * DEPTH; e += 128) {
      const int r = e / DEPTH, kk = e % DEPTH;
      elem_t v = __float2bfloat16(0.0f);
      if (n0 + r < N && kt + kk < K) v = w[(size_t)(n0 + r) * K + kt + kk];
      ws[r][kk] = v;
    }
    __syncthreads();
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 8; ++j) {
        float dot = 0.0f;
        for (int kk = 0; kk < DEPTH; ++kk)
          dot += __bfloat162float(xs[lane_row * 8 + i][kk]) * __bfloat162float(ws[lane_col + 16 * j][kk]);
        acc[i * 8 + j] += dot;
      }
    }
    __syncthreads();
  }

  for (int i = 0; i < 8; ++i) {
    const int r = m0 + lane_row * 8 + i;
    if (r >= M) continue;
    for (int j = 0; j < 8; ++j) {
      const int col = n0 + lane_col + 16 * j;
      if (col < N) {
        const float v = acc[i * 8 + j] + bias[col];
        out[(size_t)r * N + col] = __float2bfloat16(v > 0.0f ? v : 0.0f);
      }
    }
  }
}
