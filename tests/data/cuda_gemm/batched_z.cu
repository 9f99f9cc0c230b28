// batched bf16 GEMM: blockIdx.z picks the batch, operands a batch stride apart
#include <cuda_bf16.h>
#define T 16
extern "C" __global__ void bmm_tiled(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                     __nv_bfloat16* C, int M, int N, int K, long long strideA,
                                     long long strideB, long long strideC) {
  __shared__ __nv_bfloat16 As[T][T + 1];
  __shared__ __nv_bfloat16 Bs[T][T + 1];
  const __nv_bfloat16* a = A + blockIdx.z * strideA;
  const __nv_bfloat16* b = B + blockIdx.z * strideB;
  __nv_bfloat16* c = C + blockIdx.z * strideC;
  int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += T) {
    As[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K)
        ? a[row * K + k0 + threadIdx.x] : __float2bfloat16(0.f);
    Bs[threadIdx.y][threadIdx.x] = (k0 + threadIdx.y < K && col < N)
        ? b[(k0 + threadIdx.y) * N + col] : __float2bfloat16(0.f);
    __syncthreads();
    for (int k = 0; k < T; ++k)
      acc += __bfloat162float(As[threadIdx.y][k]) * __bfloat162float(Bs[k][threadIdx.x]);
    __syncthreads();
  }
  if (row < M && col < N) c[row * N + col] = __float2bfloat16(acc);
}

void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int batch, int M,
            int N, int K) {
  bmm_tiled<<<dim3((N + T - 1) / T, (M + T - 1) / T, batch), dim3(T, T)>>>(
      A, B, C, M, N, K, (long long)M * K, (long long)K * N, (long long)M * N);
}
