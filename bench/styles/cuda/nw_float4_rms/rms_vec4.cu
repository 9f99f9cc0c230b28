// RMSNorm of fp32 rows whose length is a multiple of 4: each row is read and written as
// float4 through reinterpret_cast, and the block's partial sums fold in a shared-memory tree
// written as a do-while loop.
#define BLOCK 256

extern "C" __global__ void rms_vec4(const float* x, const float* w, float* y, int n, float eps)
{
    __shared__ float red[BLOCK];
    const float4* xr = reinterpret_cast<const float4*>(x + (size_t)blockIdx.x * n);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    float4* yr = reinterpret_cast<float4*>(y + (size_t)blockIdx.x * n);
    const int n4 = n >> 2;

    float ss = 0.0f;
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        const float4 v = xr[i];
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    red[threadIdx.x] = ss;
    __syncthreads();
    int s = blockDim.x;
    do {
        s >>= 1;
        if (threadIdx.x < s)
            red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    } while (s > 1);

    const float r = rsqrtf(red[0] / n + eps);
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        float4 v = xr[i];
        const float4 g = w4[i];
        v.x *= r * g.x;
        v.y *= r * g.y;
        v.z *= r * g.z;
        v.w *= r * g.w;
        yr[i] = v;
    }
}
