// fp16 GEMM whose sizes are template values (one instantiation per model shape); 16 x 16 shared
// tiles, one output a thread
#include <cuda_fp16.h>
template <int M, int N, int K>
__global__ void gemm_fixed(const half* __restrict__ A, const half* __restrict__ B,
                           half* __restrict__ C) {
  __shared__ half sA[16][16];
  __shared__ half sB[16][16];
  const int ty = threadIdx.y, tx = threadIdx.x;
  const int row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
  float sum = 0.f;
  for (int t = 0; t < K; t += 16) {
    sA[ty][tx] = (row < M && t + tx < K) ? A[row * K + t + tx] : __float2half(0.f);
    sB[ty][tx] = (t + ty < K && col < N) ? B[(t + ty) * N + col] : __float2half(0.f);
    __syncthreads();
    for (int k = 0; k < 16; ++k) sum += __half2float(sA[ty][k]) * __half2float(sB[k][tx]);
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = __float2half(sum);
}

constexpr int kM = 72, kN = 136, kK = 40;  // the layer's shape

void launch(const half* A, const half* B, half* C) {
  gemm_fixed<kM, kN, kK><<<dim3((kN + 15) / 16, (kM + 15) / 16), dim3(16, 16)>>>(A, B, C);
}
