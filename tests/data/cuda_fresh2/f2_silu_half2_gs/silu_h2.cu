// y = x * sigmoid(x) over an fp16 vector: a grid-stride loop over __half2 pairs (the pair math
// in half2 intrinsics, the sigmoid in fp32), the odd last element by one thread.
#include <cuda_fp16.h>

extern "C" __global__ void silu_h2(const __half* __restrict__ x, __half* __restrict__ y, int n)
{
    const __half2* x2 = reinterpret_cast<const __half2*>(x);
    __half2* y2 = reinterpret_cast<__half2*>(y);
    const int pairs = n / 2;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < pairs; i += blockDim.x * gridDim.x) {
        const __half2 v = x2[i];
        const float2 f = __half22float2(v);
        const __half2 sig = __floats2half2_rn(1.f / (1.f + __expf(-f.x)), 1.f / (1.f + __expf(-f.y)));
        y2[i] = __hmul2(v, sig);
    }
    if ((n & 1) && blockIdx.x == 0 && threadIdx.x == 0) {
        const float f = __half2float(x[n - 1]);
        y[n - 1] = __float2half(f / (1.f + __expf(-f)));
    }
}
