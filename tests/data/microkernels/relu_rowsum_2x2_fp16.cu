// C = relu(A) @ B and R = relu(A), for half-precision A (M x K) and B (K x N), row-major. The
// operands are widened to fp32 when staged (relu applied on the way in); 32x32 output tiles,
// 16x16 threads with 2x2 outputs each; the staged A tile is also written back out (R), read
// from the tile outside the product.
#include <cuda_fp16.h>

#define TM 32
#define TN 32
#define TK 16

extern "C" __global__ void relu_mm_rowsum(const __half* __restrict__ A, const __half* __restrict__ B,
                                          __half* __restrict__ C, __half* __restrict__ R,
                                          int M, int N, int K) {
  __shared__ float tA[TM][TK + 8];
  __shared__ float tB[TK][TN];
  const int tx = threadIdx.x, ty = threadIdx.y, t = ty * 16 + tx;
  const int row0 = blockIdx.y * TM, col0 = blockIdx.x * TN;
  float c00 = 0.f, c01 = 0.f, c10 = 0.f, c11 = 0.f;
  __half* r_lo = R + (size_t)(row0 + ty) * K;
  __half* r_hi = r_lo + (size_t)16 * K;
  for (int kt = 0; kt < K; kt += TK) {
    for (int e = t; e < TM * TK; e += 256) {
      const int r = e / TK, k = e % TK;
      float a = 0.0f;
      if (row0 + r < M && kt + k < K) a = fmaxf(__half2float(A[(size_t)(row0 + r) * K + kt + k]), 0.0f);
      tA[r][k] = a;
    }
    for (int e = t; e < TK * TN; e += 256) {
      const int k = e / TN, n = e % TN;
      tB[k][n] = (kt + k < K && col0 + n < N) ? __half2float(B[(size_t)(kt + k) * N + col0 + n]) : 0.0f;
    }
    __syncthreads();
    for (int k = 0; k < TK; ++k) {
      const float a0 = tA[ty * 2][k], a1 = tA[ty * 2 + 1][k];
      const float b0 = tB[k][tx * 2], b1 = tB[k][tx * 2 + 1];
      c00 += a0 * b0;
      c01 += a0 * b1;
      c10 += a1 * b0;
      c11 += a1 * b1;
    }
    __syncthreads();
    // every column of blocks writes the same values
    if (row0 + ty < M && kt + tx < K) r_lo[kt + tx] = __float2half(tA[ty][tx]);
    if (row0 + ty + 16 < M && kt + tx < K) r_hi[kt + tx] = __float2half(tA[ty + 16][tx]);
    __syncthreads();
  }
  const int r = row0 + ty * 2, c = col0 + tx * 2;
  if (r < M && c < N) C[(size_t)r * N + c] = __float2half(c00);
  if (r < M && c + 1 < N) C[(size_t)r * N + c + 1] = __float2half(c01);
  if (r + 1 < M && c < N) C[(size_t)(r + 1) * N + c] = __float2half(c10);
  if (r + 1 < M && c + 1 < N) C[(size_t)(r + 1) * N + c + 1] = __float2half(c11);
}
