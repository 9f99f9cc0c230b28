// Double-buffered global->shared staging with cp.async (test data for the passes).
#include <cuda_pipeline.h>
#define CHUNK 256

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

extern "C" __global__ void scale_copy(const float4* in, float4* out, int chunks, float alpha) {
  __shared__ float4 buf[2][CHUNK];
  const int t = threadIdx.x;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(&buf[0][t])), "l"(in + t) : "memory");
  asm volatile("cp.async.commit_group;" ::: "memory");
  for (int c = 0; c < chunks; ++c) {
    if (c + 1 < chunks) {
      __pipeline_memcpy_async(&buf[(c + 1) & 1][t], in + (c + 1) * CHUNK + t, sizeof(float4));
      __pipeline_commit();
      __pipeline_wait_prior(1);
    } else {
      asm volatile("cp.async.wait_all;" ::: "memory");
    }
    __syncthreads();
    float4 v = buf[c & 1][t];
    out[c * CHUNK + t] = make_float4(alpha * v.x, alpha * v.y, alpha * v.z, alpha * v.w);
    __syncthreads();
  }
}
