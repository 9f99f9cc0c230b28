// bf16 GEMM with two shared buffers: the next tile is stored while this one is read, one
// barrier a step; 32 x 32 output tile, 16 x 16 block, 2 x 2 outputs a thread
#include <cuda_bf16.h>
#define BT 32
#define KT 16
extern "C" __global__ void gemm_db(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C,
                                   int M, int N, int K) {
  __shared__ __nv_bfloat16 sa[2][BT][KT];
  __shared__ __nv_bfloat16 sb[2][KT][BT];
  const int tx = threadIdx.x, ty = threadIdx.y, t = ty * 16 + tx;
  const int m0 = blockIdx.y * BT, n0 = blockIdx.x * BT;
  float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
  const int steps = (K + KT - 1) / KT;
  // stage step 0
  for (int e = t; e < BT * KT; e += 256) {
    int r = e / KT, c = e % KT;
    sa[0][r][c] = (m0 + r < M && c < K) ? A[(m0 + r) * K + c] : __float2bfloat16(0.f);
    int kr = e / BT, nc = e % BT;
    sb[0][kr][nc] = (kr < K && n0 + nc < N) ? B[kr * N + n0 + nc] : __float2bfloat16(0.f);
  }
  __syncthreads();
  for (int s = 0; s < steps; ++s) {
    const int cur = s & 1, nxt = cur ^ 1;
    if (s + 1 < steps) {
      const int k0 = (s + 1) * KT;
      for (int e = t; e < BT * KT; e += 256) {
        int r = e / KT, c = e % KT;
        sa[nxt][r][c] = (m0 + r < M && k0 + c < K) ? A[(m0 + r) * K + k0 + c]
                                                    : __float2bfloat16(0.f);
        int kr = e / BT, nc = e % BT;
        sb[nxt][kr][nc] = (k0 + kr < K && n0 + nc < N) ? B[(k0 + kr) * N + n0 + nc]
                                                        : __float2bfloat16(0.f);
      }
    }
    for (int k = 0; k < KT; ++k)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
          acc[i][j] += __bfloat162float(sa[cur][ty + 16 * i][k]) *
                       __bfloat162float(sb[cur][k][tx + 16 * j]);
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      int r = m0 + ty + 16 * i, c = n0 + tx + 16 * j;
      if (r < M && c < N) C[r * N + c] = acc[i][j];
    }
}

void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K) {
  gemm_db<<<dim3((N + BT - 1) / BT, (M + BT - 1) / BT), dim3(16, 16)>>>(A, B, C, M, N, K);
}
