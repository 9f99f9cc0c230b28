// RMSNorm in bf16: one block per row, pairs of elements read as __nv_bfloat162, the sum of
// squares folded in shared memory (the stride shifted right until it is zero).
#include <cuda_bf16.h>

extern "C" __global__ void rmsnorm_bf16x2(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                          __nv_bfloat16* y, int hidden, float eps)
{
    __shared__ float sums[256];
    const int pairs = hidden >> 1;
    const __nv_bfloat162* xr = reinterpret_cast<const __nv_bfloat162*>(x + (long)blockIdx.x * hidden);
    const __nv_bfloat162* wr = reinterpret_cast<const __nv_bfloat162*>(w);
    __nv_bfloat162* yr = reinterpret_cast<__nv_bfloat162*>(y + (long)blockIdx.x * hidden);
    float part = 0.f;
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
        float2 f = __bfloat1622float2(xr[p]);
        part += f.x * f.x + f.y * f.y;
    }
    sums[threadIdx.x] = part;
    __syncthreads();
    for (int s = blockDim.x >> 1; s; s = s >> 1) {
        if (threadIdx.x < s) sums[threadIdx.x] = sums[threadIdx.x] + sums[threadIdx.x + s];
        __syncthreads();
    }
    const float r = rsqrtf(sums[0] / hidden + eps);
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
        float2 f = __bfloat1622float2(xr[p]);
        float2 g = __bfloat1622float2(wr[p]);
        yr[p] = __floats2bfloat162_rn(f.x * r * g.x, f.y * r * g.y);
    }
}
