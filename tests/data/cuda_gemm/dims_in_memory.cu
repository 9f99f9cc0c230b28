// fp16 GEMM whose sizes the host leaves in device memory (dims = {M, N, K}, written by an
// earlier kernel); 32 x 32 tiles of 16-deep slices, 256 threads of 2 x 2 outputs, fmaf
#include <cuda_fp16.h>
enum { TILE = 32, DEPTH = 16, IM = 0, IN = 1, IK = 2 };

extern "C" __global__ void gemm_sizes_on_device(const int* __restrict__ dims,
                                                const __half* __restrict__ a,
                                                const __half* __restrict__ b,
                                                __half* __restrict__ c) {
  const int M = dims[IM], N = dims[IN], K = dims[IK];
  __shared__ __half sa[TILE][DEPTH + 2];
  __shared__ __half sb[DEPTH][TILE + 2];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
  float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
  for (int k0 = 0; k0 < K; k0 += DEPTH) {
    for (int e = threadIdx.x; e < TILE * DEPTH; e += blockDim.x) {
      const int r = e / DEPTH, q = e % DEPTH;
      __half v = __float2half(0.f);
      if (row0 + r < M && k0 + q < K) v = a[(row0 + r) * K + k0 + q];
      sa[r][q] = v;
      const int kr = e / TILE, cc = e % TILE;
      __half w = __float2half(0.f);
      if (k0 + kr < K && col0 + cc < N) w = b[(k0 + kr) * N + col0 + cc];
      sb[kr][cc] = w;
    }
    __syncthreads();
    for (int q = 0; q < DEPTH; ++q)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
          acc[i][j] = fmaf(__half2float(sa[ty * 2 + i][q]), __half2float(sb[q][tx * 2 + j]),
                           acc[i][j]);
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      const int r = row0 + ty * 2 + i, cc = col0 + tx * 2 + j;
      if (r < M && cc < N) c[r * N + cc] = __float2half(acc[i][j]);
    }
}

void launch(const int* dims, const __half* a, const __half* b, __half* c, int M, int N) {
  gemm_sizes_on_device<<<dim3((N + TILE - 1) / TILE, (M + TILE - 1) / TILE), 256>>>(dims, a, b,
                                                                                     c);
}
