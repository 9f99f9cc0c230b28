// Rows of an fp16 (M, N) matrix divided by their L2 norm: y = x / max(||x||, eps). One block per
// row, launched with 128 threads where the host launches 256 (the host-launch line at the end): a
// row of at most 64 elements per thread (8192) whose start is 16-byte aligned is read from global
// memory once, into registers (each thread's eight 16-byte vectors loaded before it uses the
// first); the sum of squares and the scaled write run on them, the write 16 bytes at a time where
// the output is aligned; other rows are read twice. The sum of squares is reduced with warp
// shuffles, one shared slot per warp.
#include <cuda_fp16.h>

extern "C" __global__ void l2norm_rows_narrow(const __half* __restrict__ x, __half* __restrict__ y, int n, float eps)
{
    __shared__ float red[256];
    const __half* xr = x + (size_t)blockIdx.x * n;
    __half* yr = y + (size_t)blockIdx.x * n;
    float ss = 0.f;
    uint4 kl_reg0[8];  // the row in registers: 8 vectors of 16 bytes per thread
    const bool kl_reg0_fits = (n) <= 64 * (blockDim.x) && (reinterpret_cast<unsigned long long>(&xr[(0)]) & 15ull) == 0;
    if (kl_reg0_fits) {  // every vector of the row this thread holds is loaded before any is used
    #pragma unroll
      for (int kl_k = 0; kl_k < 8; ++kl_k) {
        const long long kl_c = (long long)(threadIdx.x) + (long long)kl_k * (blockDim.x);
        if ((kl_c + 1) * 8 <= (n)) {
          kl_reg0[kl_k] = *reinterpret_cast<const uint4*>(&xr[(kl_c * 8)]);
        } else {
          kl_reg0[kl_k] = make_uint4(0u, 0u, 0u, 0u);
    #pragma unroll
          for (int kl_l = 0; kl_l < 8; ++kl_l)
            if (kl_c * 8 + kl_l < (n)) reinterpret_cast<__half*>(&kl_reg0[kl_k])[kl_l] = xr[(kl_c * 8 + kl_l)];
        }
      }
    }
    if (kl_reg0_fits) {
    #pragma unroll
      for (int kl_k = 0; kl_k < 8; ++kl_k) {
        const long long kl_c = (long long)(threadIdx.x) + (long long)kl_k * (blockDim.x);
      #pragma unroll
        for (int kl_l = 0; kl_l < 8; ++kl_l) {
          const int i = kl_c * 8 + kl_l;
          if (i < (n)) {
              const float v = __half2float(reinterpret_cast<const __half*>(&kl_reg0[kl_k])[kl_l]);
              ss += v * v;
          }
        }
      }
    } else {
      for (int i = threadIdx.x; i < n; i += blockDim.x) {
          const float v = __half2float(xr[i]);
          ss += v * v;
      }
    }
    red[threadIdx.x] = ss;
    __syncthreads();
    {
      // the tree as warp shuffles: each warp reduces its threads' values, one shared slot per warp, then the first warp reduces the slots
      __shared__ float kl_warp0[32];
      float kl_v1 = red[threadIdx.x];
      #pragma unroll
      for (int kl_o0 = 16; kl_o0 > 0; kl_o0 >>= 1) { { const float kl_w0 = __shfl_down_sync(0xffffffffu, kl_v1, kl_o0); kl_v1 += kl_w0; } }
      if ((threadIdx.x & 31) == 0) { kl_warp0[threadIdx.x >> 5] = kl_v1; }
      __syncthreads();
      if (threadIdx.x < 32) {
        kl_v1 = kl_warp0[threadIdx.x < ((blockDim.x) >> 5) ? threadIdx.x : 0];
        for (int kl_o0 = (blockDim.x) >> 6; kl_o0 > 0; kl_o0 >>= 1) { { const float kl_w0 = __shfl_down_sync(0xffffffffu, kl_v1, kl_o0); kl_v1 += kl_w0; } }
        if (threadIdx.x == 0) { red[0] = kl_v1; }
      }
      __syncthreads();
    }
    const float inv = 1.0f / fmaxf(sqrtf(red[0]), eps);
    if (kl_reg0_fits) {
    #pragma unroll
      for (int kl_k = 0; kl_k < 8; ++kl_k) {
        const long long kl_c = (long long)(threadIdx.x) + (long long)kl_k * (blockDim.x);
        if ((kl_c + 1) * 8 <= (n) && ((reinterpret_cast<unsigned long long>(&yr[(0)])) & 15ull) == 0) {  // its other pointers 16 bytes at a time
          uint4 kl_v0;
        #pragma unroll
          for (int kl_l = 0; kl_l < 8; ++kl_l) {
            const int i = kl_c * 8 + kl_l;
            reinterpret_cast<__half*>(&kl_v0)[kl_l] = __float2half(__half2float(reinterpret_cast<const __half*>(&kl_reg0[kl_k])[kl_l]) * inv);
          }
          *reinterpret_cast<uint4*>(&yr[(kl_c * 8)]) = kl_v0;
        } else {
        #pragma unroll
          for (int kl_l = 0; kl_l < 8; ++kl_l) {
            const int i = kl_c * 8 + kl_l;
            if (i < (n)) yr[i] = __float2half(__half2float(reinterpret_cast<const __half*>(&kl_reg0[kl_k])[kl_l]) * inv);
          }
        }
      }
    } else {
      for (int i = threadIdx.x; i < n; i += blockDim.x)
          yr[i] = __float2half(__half2float(xr[i]) * inv);
    }
}
// host launch: {"block": [128, 1, 1], "block_from": [256, 1, 1], "kernel": "l2norm_rows_narrow", "shared_bytes": 0}
