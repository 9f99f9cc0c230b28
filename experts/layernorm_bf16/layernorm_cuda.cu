// LayerNorm over the last dim of a bf16 (M, N) matrix with bf16 weight and bias. One block of
// THREADS threads per row; the mean, then the variance around it, each summed with warp
// shuffles and one shared slot per warp. The launch bounds ask for the blocks that fill an SM's
// threads (2048 / THREADS), so that registers never hold fewer rows on an SM than threads do.
#include <cuda_bf16.h>

#define THREADS 256

__device__ float row_sum(float v, float* slots)
{
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if ((threadIdx.x & 31) == 0) slots[threadIdx.x >> 5] = v;
    __syncthreads();
    float total = 0.f;
    for (int w = 0; w < THREADS / 32; ++w) total += slots[w];
    __syncthreads();
    return total;
}

extern "C" __global__ void __launch_bounds__(THREADS, 8)
layernorm_rows(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
               const __nv_bfloat16* __restrict__ b, __nv_bfloat16* __restrict__ y, int n, float eps)
{
    __shared__ float slots[THREADS / 32];
    const __nv_bfloat16* xr = x + (size_t)blockIdx.x * n;
    __nv_bfloat16* yr = y + (size_t)blockIdx.x * n;

    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += THREADS) s += __bfloat162float(xr[i]);
    const float mean = row_sum(s, slots) / n;

    float q = 0.f;
    for (int i = threadIdx.x; i < n; i += THREADS) {
        const float d = __bfloat162float(xr[i]) - mean;
        q += d * d;
    }
    const float rstd = rsqrtf(row_sum(q, slots) / n + eps);

    for (int i = threadIdx.x; i < n; i += THREADS) {
        const float h = (__bfloat162float(xr[i]) - mean) * rstd;
        yr[i] = __float2bfloat16(h * __bfloat162float(w[i]) + __bfloat162float(b[i]));
    }
}
