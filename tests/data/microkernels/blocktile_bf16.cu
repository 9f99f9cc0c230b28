// 2-D block tiling GEMM, C = alpha * A @ B + beta * C, all row-major bf16, fp32 accumulation.
// Each of the 256 threads computes an 8x8 sub-tile of the 128x128 block tile from shared tiles.
#include <cuda_bf16.h>

#define BM 128
#define BN 128
#define BK 16
#define TM 8
#define TN 8

extern "C" __global__ void sgemm_blocktile(int M, int N, int K, float alpha, const __nv_bfloat16* A,
                                           const __nv_bfloat16* B, float beta, __nv_bfloat16* C) {
  const int cRow = blockIdx.y;
  const int cCol = blockIdx.x;
  const int threadCol = threadIdx.x % (BN / TN);
  const int threadRow = threadIdx.x / (BN / TN);

  __shared__ __nv_bfloat16 As[BM * BK];
  __shared__ __nv_bfloat16 Bs[BK * BN];

  A += cRow * BM * K;
  B += cCol * BN;
  C += cRow * BM * N + cCol * BN;

  const int innerRowA = threadIdx.x / BK;
  const int innerColA = threadIdx.x % BK;
  const int strideA = (BM * BN / (TM * TN)) / BK;
  const int innerRowB = threadIdx.x / BN;
  const int innerColB = threadIdx.x % BN;
  const int strideB = (BM * BN / (TM * TN)) / BN;

  float threadResults[TM * TN] = {0.0f};
  float regM[TM] = {0.0f};
  float regN[TN] = {0.0f};

  for (int bkIdx = 0; bkIdx < K; bkIdx += BK) {
    for (int loadOffset = 0; loadOffset < BM; loadOffset += strideA) {
      const int r = cRow * BM + innerRowA + loadOffset, c = bkIdx + innerColA;
      __nv_bfloat16 v = __float2bfloat16(0.0f);
      if (r < M && c < K) v = A[(innerRowA + loadOffset) * K + innerColA];
      As[(innerRowA + loadOffset) * BK + innerColA] = v;
    }
    for (int loadOffset = 0; loadOffset < BK; loadOffset += strideB) {
      const int r = bkIdx + innerRowB + loadOffset, c = cCol * BN + innerColB;
      Bs[(innerRowB + loadOffset) * BN + innerColB] =
          (r < K && c < N) ? B[(innerRowB + loadOffset) * N + innerColB] : __float2bfloat16(0.0f);
    }
    __syncthreads();
    A += BK;
    B += BK * N;

    for (int dotIdx = 0; dotIdx < BK; ++dotIdx) {
      for (int i = 0; i < TM; ++i) {
        regM[i] = __bfloat162float(As[(threadRow * TM + i) * BK + dotIdx]);
      }
      for (int i = 0; i < TN; ++i) {
        regN[i] = __bfloat162float(Bs[dotIdx * BN + threadCol * TN + i]);
      }
      for (int resIdxM = 0; resIdxM < TM; ++resIdxM) {
        for (int resIdxN = 0; resIdxN < TN; ++resIdxN) {
          threadResults[resIdxM * TN + resIdxN] += regM[resIdxM] * regN[resIdxN];
        }
      }
    }
    __syncthreads();
  }

  for (int resIdxM = 0; resIdxM < TM; ++resIdxM) {
    for (int resIdxN = 0; resIdxN < TN; ++resIdxN) {
      const int r = cRow * BM + threadRow * TM + resIdxM, c = cCol * BN + threadCol * TN + resIdxN;
      if (r < M && c < N) {
        const int at = (threadRow * TM + resIdxM) * N + threadCol * TN + resIdxN;
        C[at] = __float2bfloat16(alpha * threadResults[resIdxM * TN + resIdxN] + beta * __bfloat162float(C[at]));
      }
    }
  }
}
