// RMSNorm in fp16, pairs read as half2. The sum of squares is folded in shared memory until
// 64 partial sums are left, then the first warp finishes with shuffles.
#include <cuda_fp16.h>

extern "C" __global__ void rms_half2(const __half* in, const __half* w, __half* out, int h)
{
    __shared__ float acc[256];
    const int t = threadIdx.x;
    const half2* in2 = reinterpret_cast<const half2*>(in + (size_t)blockIdx.x * h);
    const half2* w2 = reinterpret_cast<const half2*>(w);
    half2* out2 = reinterpret_cast<half2*>(out + (size_t)blockIdx.x * h);
    float ss = 0.f;
    for (int i = t; i < h / 2; i += blockDim.x) {
        float2 v = __half22float2(in2[i]);
        ss += v.x * v.x + v.y * v.y;
    }
    acc[t] = ss;
    __syncthreads();
    for (int s = blockDim.x / 2; s >= 64; s >>= 1) {
        if (t < s) acc[t] += acc[t + s];
        __syncthreads();
    }
    if (t < 32) {
        float v = acc[t] + acc[t + 32];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (t == 0) acc[0] = v;
    }
    __syncthreads();
    const float scale = rsqrtf(acc[0] / h + 1e-6f);
    for (int i = t; i < h / 2; i += blockDim.x) {
        float2 v = __half22float2(in2[i]);
        float2 g = __half22float2(w2[i]);
        out2[i] = __floats2half2_rn(v.x * scale * g.x, v.y * scale * g.y);
    }
}
