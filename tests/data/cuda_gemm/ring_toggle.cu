// fp16 GEMM with register prefetch: the next K tile is read into registers before this one is
// multiplied and written to the other buffer after it; `buf` flips every step. 64 x 64 tile,
// 256 threads of 4 x 4 outputs, A kept transposed in shared memory
#include <cuda_fp16.h>
#define TM 64
#define TN 64
#define TK 16

extern "C" __global__ void __launch_bounds__(256)
hgemm_pingpong(int M, int N, int K, const half* __restrict__ A, const half* __restrict__ B,
               half* __restrict__ C) {
  __shared__ half As[2][TK][TM];
  __shared__ half Bs[2][TK][TN];
  const int tid = threadIdx.x;
  const int tr = tid / 16, tc = tid % 16;
  const int bm = blockIdx.y * TM, bn = blockIdx.x * TN;
  float c[4][4] = {};
  half ra[4], rb[4];
  int buf = 0;
  for (int i = 0; i < 4; ++i) {
    int e = tid + 256 * i;
    int ar = e / TK, ak = e % TK, bk = e / TN, bc = e % TN;
    As[0][ak][ar] = (bm + ar < M && ak < K) ? A[(size_t)(bm + ar) * K + ak] : __float2half(0.f);
    Bs[0][bk][bc] = (bk < K && bn + bc < N) ? B[(size_t)bk * N + bn + bc] : __float2half(0.f);
  }
  __syncthreads();
  for (int k0 = 0; k0 < K; k0 += TK) {
    const int kn = k0 + TK;
    for (int i = 0; i < 4; ++i) {
      int e = tid + 256 * i;
      int ar = e / TK, ak = e % TK, bk = e / TN, bc = e % TN;
      ra[i] = (bm + ar < M && kn + ak < K) ? A[(size_t)(bm + ar) * K + kn + ak]
                                          : __float2half(0.f);
      rb[i] = (kn + bk < K && bn + bc < N) ? B[(size_t)(kn + bk) * N + bn + bc]
                                          : __float2half(0.f);
    }
#pragma unroll
    for (int kk = 0; kk < TK; ++kk) {
      float a[4], b[4];
      for (int i = 0; i < 4; ++i) a[i] = __half2float(As[buf][kk][tr * 4 + i]);
      for (int j = 0; j < 4; ++j) b[j] = __half2float(Bs[buf][kk][tc * 4 + j]);
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) c[i][j] += a[i] * b[j];
    }
    if (kn < K) {
      for (int i = 0; i < 4; ++i) {
        int e = tid + 256 * i;
        As[buf ^ 1][e % TK][e / TK] = ra[i];
        Bs[buf ^ 1][e / TN][e % TN] = rb[i];
      }
    }
    buf ^= 1;
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      int r = bm + tr * 4 + i, col = bn + tc * 4 + j;
      if (r < M && col < N) C[(size_t)r * N + col] = __float2half(c[i][j]);
    }
}

void launch(int M, int N, int K, const half* A, const half* B, half* C) {
  hgemm_pingpong<<<dim3((N + TN - 1) / TN, (M + TM - 1) / TM), 256>>>(M, N, K, A, B, C);
}
