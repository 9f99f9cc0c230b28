// Rows of an fp16 (M, N) matrix divided by their L2 norm, y = x / max(||x||, eps), N <= ROW_MAX:
// one block per row (at most BLOCK threads, a power of two) copies the row into shared memory,
// folds the sum of squares in a shared-memory tree, and writes the row scaled from the copy.
#include <cuda_fp16.h>

#define BLOCK 128
#define ROW_MAX 16384

extern "C" __global__ void l2norm_rows_plain(const __half* x, __half* y, int n, float eps)
{
    __shared__ __half line[ROW_MAX];
    __shared__ float red[BLOCK];
    const __half* src = x + (size_t)blockIdx.x * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) line[i] = src[i];
    __syncthreads();

    float ss = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = __half2float(line[i]);
        ss += v * v;
    }
    red[threadIdx.x] = ss;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = 1.0f / fmaxf(sqrtf(red[0]), eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        y[(size_t)blockIdx.x * n + i] = __float2half(__half2float(line[i]) * inv);
}
