// Warp-tiled GEMM in the style of the CUDA tutorials that tile per warp: each warp owns a
// WM x WN part of the block tile in WMITER x WNITER sub-tiles, each thread TM x TN outputs of
// each; A's tile is stored transposed. C = alpha * A @ B + beta * C with bf16 A, B and fp32 C;
// 128 threads per block (the launch bounds say so).
#include <cuda_bf16.h>
typedef unsigned int uint;
#define WARPSIZE 32
#define BM 128
#define BN 128
#define BK 16
#define WM 64
#define WN 64
#define WNITER 4
#define TM 8
#define TN 4
#define NUM_THREADS 128
extern "C" __global__ void __launch_bounds__(NUM_THREADS) sgemmWarptiling(int M, int N, int K, float alpha, __nv_bfloat16 *A, __nv_bfloat16 *B, float beta, float *C) {
  const uint cRow = blockIdx.y;
  const uint cCol = blockIdx.x;
  const uint warpIdx = threadIdx.x / WARPSIZE;
  const uint warpCol = warpIdx % (BN / WN);
  const uint warpRow = warpIdx / (BN / WN);
  constexpr uint WMITER = (WM * WN) / (WARPSIZE * TM * TN * WNITER);
  constexpr uint WSUBM = WM / WMITER;
  constexpr uint WSUBN = WN / WNITER;
  const uint threadIdxInWarp = threadIdx.x % WARPSIZE;
  const uint threadColInWarp = threadIdxInWarp % (WSUBN / TN);
  const uint threadRowInWarp = threadIdxInWarp / (WSUBN / TN);
  __shared__ __nv_bfloat16 As[BM * BK];
  __shared__ __nv_bfloat16 Bs[BK * BN];
  A += cRow * BM * K;
  B += cCol * BN;
  C += (cRow * BM + warpRow * WM) * N + cCol * BN + warpCol * WN;
  const uint innerRowA = threadIdx.x / BK;
  const uint innerColA = threadIdx.x % BK;
  constexpr uint rowStrideA = NUM_THREADS / BK;
  const uint innerRowB = threadIdx.x / BN;
  const uint innerColB = threadIdx.x % BN;
  constexpr uint rowStrideB = NUM_THREADS / BN;
  float threadResults[WMITER * TM * WNITER * TN] = {0.0};
  float regM[WMITER * TM] = {0.0};
  float regN[WNITER * TN] = {0.0};
  for (uint bkIdx = 0; bkIdx < K; bkIdx += BK) {
    for (uint offset = 0; offset + rowStrideA <= BM; offset += rowStrideA)
      As[(innerColA) * BM + innerRowA + offset] = A[(innerRowA + offset) * K + innerColA];
    for (uint offset = 0; offset + rowStrideB <= BK; offset += rowStrideB)
      Bs[(innerRowB + offset) * BN + innerColB] = B[(innerRowB + offset) * N + innerColB];
    __syncthreads();
    for (uint dotIdx = 0; dotIdx < BK; ++dotIdx) {
      for (uint wSubRowIdx = 0; wSubRowIdx < WMITER; ++wSubRowIdx)
        for (uint i = 0; i < TM; ++i)
          regM[wSubRowIdx * TM + i] = __bfloat162float(As[(dotIdx * BM) + warpRow * WM + wSubRowIdx * WSUBM + threadRowInWarp * TM + i]);
      for (uint wSubColIdx = 0; wSubColIdx < WNITER; ++wSubColIdx)
        for (uint i = 0; i < TN; ++i)
          regN[wSubColIdx * TN + i] = __bfloat162float(Bs[(dotIdx * BN) + warpCol * WN + wSubColIdx * WSUBN + threadColInWarp * TN + i]);
      for (uint wSubRowIdx = 0; wSubRowIdx < WMITER; ++wSubRowIdx)
        for (uint wSubColIdx = 0; wSubColIdx < WNITER; ++wSubColIdx)
          for (uint resIdxM = 0; resIdxM < TM; ++resIdxM)
            for (uint resIdxN = 0; resIdxN < TN; ++resIdxN)
              threadResults[(wSubRowIdx * TM + resIdxM) * (WNITER * TN) + (wSubColIdx * TN) + resIdxN] +=
                  regM[wSubRowIdx * TM + resIdxM] * regN[wSubColIdx * TN + resIdxN];
    }
    A += BK;
    B += BK * N;
    __syncthreads();
  }
  for (uint wSubRowIdx = 0; wSubRowIdx < WMITER; ++wSubRowIdx)
    for (uint wSubColIdx = 0; wSubColIdx < WNITER; ++wSubColIdx) {
      float *C_interim = C + (wSubRowIdx * WSUBM) * N + wSubColIdx * WSUBN;
      for (uint resIdxM = 0; resIdxM < TM; resIdxM += 1)
        for (uint resIdxN = 0; resIdxN < TN; resIdxN += 1) {
          const int i = (wSubRowIdx * TM + resIdxM) * (WNITER * TN) + wSubColIdx * TN + resIdxN;
          C_interim[(threadRowInWarp * TM + resIdxM) * N + threadColInWarp * TN + resIdxN] =
              alpha * threadResults[i] + beta * C_interim[(threadRowInWarp * TM + resIdxM) * N + threadColInWarp * TN + resIdxN];
        }
    }
}
