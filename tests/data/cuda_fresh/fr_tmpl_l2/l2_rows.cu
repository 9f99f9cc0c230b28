// Row L2 normalization. The block size is a template parameter: the tree's trip count is a
// compile-time constant and the loop is unrolled; the scratch is dynamic shared memory.
template <int BLOCK>
__device__ void l2_normalize_row(const float* __restrict__ src, float* __restrict__ dst, int n)
{
    extern __shared__ float scratch[];
    float ss = 0.f;
    for (int i = threadIdx.x; i < n; i += BLOCK) {
        const float v = src[i];
        ss += v * v;
    }
    scratch[threadIdx.x] = ss;
    __syncthreads();
#pragma unroll
    for (int s = BLOCK / 2; s > 0; s /= 2) {
        if (threadIdx.x < s)
            scratch[threadIdx.x] += scratch[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = 1.0f / fmaxf(sqrtf(scratch[0]), 1e-12f);
    for (int i = threadIdx.x; i < n; i += BLOCK)
        dst[i] = src[i] * inv;
}

extern "C" __global__ void l2norm_rows_256(const float* __restrict__ x, float* __restrict__ y, int n)
{
    l2_normalize_row<256>(x + (size_t)blockIdx.x * n, y + (size_t)blockIdx.x * n, n);
}
