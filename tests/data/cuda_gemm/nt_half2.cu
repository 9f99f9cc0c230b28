// fp16 C = A @ B^T + ReLU (B is N x K, k contiguous): tiles staged two halves at a time through
// __half2, 32 x 32 output tile, 16 x 16 block, 2 x 2 outputs a thread; K even for
// aligned pairs (an odd K's last column is read alone)
#include <cuda_fp16.h>
#define TS 32
#define TK 16
extern "C" __global__ void gemm_nt_relu(const __half* __restrict__ A, const __half* __restrict__ B,
                                        __half* __restrict__ C, int M, int N, int K) {
  __shared__ __half a_s[TS][TK];
  __shared__ __half b_s[TS][TK];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int bm = blockIdx.y * TS, bn = blockIdx.x * TS;
  float c00 = 0.f, c01 = 0.f, c10 = 0.f, c11 = 0.f;
  for (int k0 = 0; k0 < K; k0 += TK) {
    // 256 threads, 32 rows x 8 pairs per tile
    const int lr = (ty * 16 + tx) / 8, lp = (ty * 16 + tx) % 8;
    const int kc = k0 + 2 * lp;
    __half2 va = __float2half2_rn(0.f), vb = __float2half2_rn(0.f);
    if (bm + lr < M && kc + 1 < K)
      va = *reinterpret_cast<const __half2*>(&A[(bm + lr) * K + kc]);
    else if (bm + lr < M && kc < K)
      va = __halves2half2(A[(bm + lr) * K + kc], __float2half(0.f));
    if (bn + lr < N && kc + 1 < K)
      vb = *reinterpret_cast<const __half2*>(&B[(bn + lr) * K + kc]);
    else if (bn + lr < N && kc < K)
      vb = __halves2half2(B[(bn + lr) * K + kc], __float2half(0.f));
    *reinterpret_cast<__half2*>(&a_s[lr][2 * lp]) = va;
    *reinterpret_cast<__half2*>(&b_s[lr][2 * lp]) = vb;
    __syncthreads();
    for (int k = 0; k < TK; ++k) {
      float a0 = __half2float(a_s[ty][k]), a1 = __half2float(a_s[ty + 16][k]);
      float b0 = __half2float(b_s[tx][k]), b1 = __half2float(b_s[tx + 16][k]);
      c00 += a0 * b0; c01 += a0 * b1; c10 += a1 * b0; c11 += a1 * b1;
    }
    __syncthreads();
  }
  const int r0 = bm + ty, r1 = bm + ty + 16, q0 = bn + tx, q1 = bn + tx + 16;
  if (r0 < M && q0 < N) C[r0 * N + q0] = __float2half(fmaxf(c00, 0.f));
  if (r0 < M && q1 < N) C[r0 * N + q1] = __float2half(fmaxf(c01, 0.f));
  if (r1 < M && q0 < N) C[r1 * N + q0] = __float2half(fmaxf(c10, 0.f));
  if (r1 < M && q1 < N) C[r1 * N + q1] = __float2half(fmaxf(c11, 0.f));
}

void launch(const __half* A, const __half* B, __half* C, int M, int N, int K) {
  gemm_nt_relu<<<dim3((N + TS - 1) / TS, (M + TS - 1) / TS), dim3(16, 16)>>>(A, B, C, M, N, K);
}
