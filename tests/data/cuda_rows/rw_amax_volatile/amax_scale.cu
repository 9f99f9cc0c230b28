// Per-row absolute maximum (a quantization scale): a tree over a template block size, its
// steps unrolled, the last warp folded through a volatile pointer without barriers.
template <unsigned int BLOCK>
__device__ __forceinline__ void warp_tail(volatile float* r, unsigned int t)
{
    if (BLOCK >= 64) r[t] = fmaxf(r[t], r[t + 32]);
    if (BLOCK >= 32) r[t] = fmaxf(r[t], r[t + 16]);
    if (BLOCK >= 16) r[t] = fmaxf(r[t], r[t + 8]);
    if (BLOCK >= 8) r[t] = fmaxf(r[t], r[t + 4]);
    if (BLOCK >= 4) r[t] = fmaxf(r[t], r[t + 2]);
    if (BLOCK >= 2) r[t] = fmaxf(r[t], r[t + 1]);
}

template <unsigned int BLOCK>
__device__ void row_amax(const float* x, float* scale, int n)
{
    __shared__ float r[BLOCK];
    const unsigned int t = threadIdx.x;
    float a = 0.f;
    for (int i = t; i < n; i += BLOCK) a = fmaxf(a, fabsf(x[(size_t)blockIdx.x * n + i]));
    r[t] = a;
    __syncthreads();
#pragma unroll
    for (unsigned int s = BLOCK / 2; s > 32; s >>= 1) {
        if (t < s) r[t] = fmaxf(r[t], r[t + s]);
        __syncthreads();
    }
    if (t < 32) warp_tail<BLOCK>(r, t);
    if (t == 0) scale[blockIdx.x] = r[0] / 127.f;
}

extern "C" __global__ void amax_scale_256(const float* x, float* scale, int n)
{
    row_amax<256>(x, scale, n);
}
