// LayerNorm over the last dim of a bf16 (M, N) matrix with bf16 weight and bias. One block of
// 256 threads per row; the mean, then the variance around it, each folded in a shared tree.
#include <cuda_bf16.h>

#define NT 256

__device__ float block_sum(float v, float* buf)
{
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int s = NT / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    float total = buf[0];
    __syncthreads();
    return total;
}

extern "C" __global__ void layernorm_fwd(const __nv_bfloat16* x, const __nv_bfloat16* gamma,
                                         const __nv_bfloat16* beta, __nv_bfloat16* y,
                                         int N, float eps)
{
    __shared__ float buf[NT];
    const __nv_bfloat16* xr = x + (size_t)blockIdx.x * N;
    __nv_bfloat16* yr = y + (size_t)blockIdx.x * N;

    float s = 0.f;
    for (int i = threadIdx.x; i < N; i += NT) s += __bfloat162float(xr[i]);
    const float mean = block_sum(s, buf) / N;

    float v = 0.f;
    for (int i = threadIdx.x; i < N; i += NT) {
        float d = __bfloat162float(xr[i]) - mean;
        v += d * d;
    }
    const float rstd = rsqrtf(block_sum(v, buf) / N + eps);

    for (int i = threadIdx.x; i < N; i += NT) {
        float h = (__bfloat162float(xr[i]) - mean) * rstd;
        yr[i] = __float2bfloat16(h * __bfloat162float(gamma[i]) + __bfloat162float(beta[i]));
    }
}
