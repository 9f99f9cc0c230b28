// LayerNorm of fp16 rows, the way a tutorial caches a row: the block copies its row into a
// static shared buffer element by element, waits, and every later pass reads the buffer.
// Sums meet through warp shuffles (xor butterfly) and one shared slot per warp.
#include <cuda_fp16.h>

#define MAX_COLS 2048
#define WARPS 4

__device__ __forceinline__ float warp_allsum(float v)
{
    for (int m = 16; m >= 1; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    return v;
}

__device__ float block_allsum(float v, float* slots)
{
    v = warp_allsum(v);
    if ((threadIdx.x & 31) == 0) slots[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = 0.f;
    for (int w = 0; w < WARPS; ++w) t += slots[w];
    __syncthreads();
    return t;
}

extern "C" __global__ void ln_half_rows(const __half* __restrict__ in, const __half* __restrict__ w,
                                        const __half* __restrict__ b, __half* __restrict__ out,
                                        int cols, float eps)
{
    __shared__ __half cache[MAX_COLS];
    __shared__ float slots[WARPS];
    const __half* src = in + (size_t)blockIdx.x * cols;
    __half* dst = out + (size_t)blockIdx.x * cols;

    for (int c = threadIdx.x; c < cols; c += blockDim.x) cache[c] = src[c];
    __syncthreads();

    float acc = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += __half2float(cache[c]);
    const float mu = block_allsum(acc, slots) / cols;

    float sq = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) sq += (__half2float(cache[c]) - mu) * (__half2float(cache[c]) - mu);
    const float inv = rsqrtf(block_allsum(sq, slots) / cols + eps);

    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float z = (__half2float(cache[c]) - mu) * inv;
        dst[c] = __float2half(z * __half2float(w[c]) + __half2float(b[c]));
    }
}
