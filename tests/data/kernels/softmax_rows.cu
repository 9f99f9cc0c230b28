// Row softmax: one warp per row, shuffles for the reductions, __ldg for read-only input.
#include <cuda_runtime.h>
#include <cfloat>

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffff, v, offset);
  return v;
}

extern "C" __global__ void __launch_bounds__(256) softmax_rows(const float* __restrict__ x,
                                                             float* __restrict__ y, int rows,
                                                             int cols) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= rows) return;
  const float* row = x + (size_t)warp * cols;
  float m = -FLT_MAX;
  for (int c = lane; c < cols; c += 32) m = fmaxf(m, __ldg(row + c));
  m = warp_max(m);
  float s = 0.f;
  for (int c = lane; c < cols; c += 32) s += __expf(__ldg(row + c) - m);
  s = warp_sum(s);
  const float inv = 1.f / s;
  for (int c = lane; c < cols; c += 32) {
    y[(size_t)warp * cols + c] = __expf(__ldg(row + c) - m) * inv;
  }
}

void softmax_forward(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  const int threads = 256;
  const int blocks = (rows * 32 + threads - 1) / threads;
  softmax_rows<<<blocks, threads, 0, stream>>>(x, y, rows, cols);
}
