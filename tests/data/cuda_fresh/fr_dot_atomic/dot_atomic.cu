// Dot product: each block reduces its grid-stride share in a shared tree whose trip count is
// the template's block size (unrolled), then adds its total to the result with atomicAdd.
template <unsigned int BS>
__device__ __forceinline__ void block_dot(const float* a, const float* b, float* result, int n)
{
    __shared__ float sdata[BS];
    const unsigned int tid = threadIdx.x;
    float v = 0.0f;
    for (int i = blockIdx.x * BS + tid; i < n; i += BS * gridDim.x)
        v += a[i] * b[i];
    sdata[tid] = v;
    __syncthreads();
#pragma unroll
    for (unsigned int s = BS >> 1; s >= 1; s >>= 1) {
        if (tid < s)
            sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0)
        atomicAdd(result, sdata[0]);
}

extern "C" __global__ void dot_kernel(const float* a, const float* b, float* result, int n)
{
    block_dot<128>(a, b, result, n);
}
