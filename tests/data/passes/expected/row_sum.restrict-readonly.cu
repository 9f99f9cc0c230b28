// Row sums of a float matrix, one block of THREADS threads per row (test data for the passes).
#define THREADS 256

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

extern "C" __global__ void __launch_bounds__(THREADS)
row_sum(const float* x, float* out, int cols) {
  __shared__ float partial[THREADS / 32];
  const float* row = x + (size_t)blockIdx.x * cols;
  float acc = 0.0f;
  for (int c = threadIdx.x; c < cols / 4; c += THREADS) {
    float4 v = reinterpret_cast<const float4*>(row)[c];
    acc += v.x + v.y + v.z + v.w;
  }
  acc = warp_sum(acc);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < THREADS / 32 ? partial[threadIdx.x] : 0.0f;
    s = warp_sum(s);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
  }
}
