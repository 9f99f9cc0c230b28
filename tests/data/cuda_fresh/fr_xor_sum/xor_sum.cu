// Row sums: each thread accumulates a strided slice, the warp folds it with butterflies
// (__shfl_xor_sync), one shared slot per warp, and the first warp folds the slots.
__device__ __forceinline__ float butterfly_sum(float v)
{
#pragma unroll
    for (int m = 16; m >= 1; m /= 2)
        v += __shfl_xor_sync(0xffffffff, v, m);
    return v;
}

extern "C" __global__ void sum_rows_xor(const float* __restrict__ x, float* __restrict__ y, int ncol)
{
    __shared__ float per_warp[32];
    const int t = threadIdx.x;
    const float* r = x + blockIdx.x * (size_t)ncol;
    float acc = 0.0f;
    for (int c = t; c < ncol; c += blockDim.x)
        acc += r[c];
    acc = butterfly_sum(acc);
    if ((t & 31) == 0)
        per_warp[t >> 5] = acc;
    __syncthreads();
    if (t < 32) {
        acc = t < (blockDim.x >> 5) ? per_warp[t] : 0.0f;
        acc = butterfly_sum(acc);
        if (t == 0)
            y[blockIdx.x] = acc;
    }
}
