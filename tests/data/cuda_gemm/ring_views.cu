// bf16 GEMM double-buffered through pointers: flat shared arrays hold two 32 x 16 / 16 x 32
// buffers, the step's buffer is (k0 / KT) % 2 and the K loop multiplies through pointers into
// it while the next step is stored into the other; 16 x 16 threads of 2 x 2 outputs, fp32 C
#include <cuda_bf16.h>
#define BT 32
#define KT 16
extern "C" __global__ void gemm_ring_views(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                           float* C, int M, int N, int K) {
  __shared__ __nv_bfloat16 sa[2 * BT * KT];
  __shared__ __nv_bfloat16 sb[2 * KT * BT];
  const int tx = threadIdx.x, ty = threadIdx.y, t = ty * 16 + tx;
  const int m0 = blockIdx.y * BT, n0 = blockIdx.x * BT;
  float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
  for (int e = t; e < BT * KT; e += 256) {
    int r = e / KT, c = e % KT;
    sa[r * KT + c] = (m0 + r < M && c < K) ? A[(m0 + r) * K + c] : __float2bfloat16(0.f);
    int kr = e / BT, nc = e % BT;
    sb[kr * BT + nc] = (kr < K && n0 + nc < N) ? B[kr * N + n0 + nc] : __float2bfloat16(0.f);
  }
  __syncthreads();
  for (int k0 = 0; k0 < K; k0 += KT) {
    const int cur = (k0 / KT) % 2;
    const __nv_bfloat16* pa = sa + cur * BT * KT;
    const __nv_bfloat16* pb = sb + cur * KT * BT;
    if (k0 + KT < K) {
      const int nx = 1 - cur;
      for (int e = t; e < BT * KT; e += 256) {
        int r = e / KT, c = e % KT;
        sa[nx * BT * KT + r * KT + c] = (m0 + r < M && k0 + KT + c < K)
            ? A[(m0 + r) * K + k0 + KT + c] : __float2bfloat16(0.f);
        int kr = e / BT, nc = e % BT;
        sb[nx * KT * BT + kr * BT + nc] = (k0 + KT + kr < K && n0 + nc < N)
            ? B[(k0 + KT + kr) * N + n0 + nc] : __float2bfloat16(0.f);
      }
    }
    for (int k = 0; k < KT; ++k)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
          acc[i][j] += __bfloat162float(pa[(ty + 16 * i) * KT + k]) *
                       __bfloat162float(pb[k * BT + tx + 16 * j]);
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      int r = m0 + ty + 16 * i, c = n0 + tx + 16 * j;
      if (r < M && c < N) C[r * N + c] = acc[i][j];
    }
}

void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K) {
  gemm_ring_views<<<dim3((N + BT - 1) / BT, (M + BT - 1) / BT), dim3(16, 16)>>>(A, B, C, M, N, K);
}
