// Double-buffered global->shared staging with cp.async (test data for the passes).
#include <cuda_pipeline.h>
#define CHUNK 256

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

extern "C" __global__ void scale_copy(const float4* __restrict__ in, float4* __restrict__ out, int chunks, float alpha) {
  __shared__ float4 buf[2][CHUNK];
  const int t = threadIdx.x;
  { const unsigned char* kl_src = reinterpret_cast<const unsigned char*>(in + t); for (int kl_i = 0; kl_i < (16); ++kl_i) { unsigned int kl_b = kl_i < (int)(16) ? kl_src[kl_i] : 0u; asm volatile("st.shared.u8 [%0], %1;" :: "r"((unsigned)(smem_u32(&buf[0][t])) + kl_i), "r"(kl_b) : "memory"); } }
  asm volatile("" ::: "memory");
  for (int c = 0; c < chunks; ++c) {
    if (c + 1 < chunks) {
      { const unsigned char* kl_src = reinterpret_cast<const unsigned char*>(in + (c + 1) * CHUNK + t); for (int kl_i = 0; kl_i < (sizeof(float4)); ++kl_i) { unsigned int kl_b = kl_i < (int)(sizeof(float4)) ? kl_src[kl_i] : 0u; reinterpret_cast<unsigned char*>(&buf[(c + 1) & 1][t])[kl_i] = (unsigned char)kl_b; } }
      asm volatile("" ::: "memory");
      asm volatile("" ::: "memory");
    } else {
      asm volatile("" ::: "memory");
    }
    __syncthreads();
    float4 v = buf[c & 1][t];
    out[c * CHUNK + t] = make_float4(alpha * v.x, alpha * v.y, alpha * v.z, alpha * v.w);
    __syncthreads();
  }
}
