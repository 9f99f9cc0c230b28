// Sum of a vector: each thread adds a grid-stride share, each warp folds its 32 values with
// __shfl_down_sync, and lane 0 of every warp adds the warp's total to the result atomically.
__inline__ __device__ float warp_fold(float v)
{
    for (int off = warpSize / 2; off > 0; off /= 2)
        v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

extern "C" __global__ void sum_shfl(const float* __restrict__ x, float* __restrict__ total, int n)
{
    float s = 0.0f;
    const int stride = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        s += x[i];
    s = warp_fold(s);
    if ((threadIdx.x & (warpSize - 1)) == 0)
        atomicAdd(total, s);
}
