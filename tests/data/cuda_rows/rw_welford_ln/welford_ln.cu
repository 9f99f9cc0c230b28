// LayerNorm over bf16 rows with Welford statistics: each thread folds its elements into
// (count, mean, M2), the warps merge them with shuffles, the warp leaders through shared
// memory. The block size is a compile-time constant the loops step by.
#include <cuda_bf16.h>

constexpr int kThreads = 256;

struct Stat { float n, mean, m2; };

__device__ __forceinline__ Stat merge(Stat a, Stat b)
{
    float n = a.n + b.n;
    if (n == 0.f) return a;
    float delta = b.mean - a.mean;
    float wb = b.n / n;
    Stat r;
    r.n = n;
    r.mean = a.mean + delta * wb;
    r.m2 = a.m2 + b.m2 + delta * delta * a.n * wb;
    return r;
}

extern "C" __global__ void __launch_bounds__(kThreads)
layernorm_welford(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ gamma,
                  const __nv_bfloat16* __restrict__ beta, __nv_bfloat16* __restrict__ y,
                  int cols, float eps)
{
    __shared__ Stat leaders[kThreads / 32];
    const __nv_bfloat16* xr = x + (long long)blockIdx.x * cols;
    __nv_bfloat16* yr = y + (long long)blockIdx.x * cols;
    Stat st = {0.f, 0.f, 0.f};
    for (int c = threadIdx.x; c < cols; c += kThreads) {
        float v = __bfloat162float(xr[c]);
        st.n += 1.f;
        float delta = v - st.mean;
        st.mean += delta / st.n;
        st.m2 += delta * (v - st.mean);
    }
    for (int off = 16; off > 0; off >>= 1) {
        Stat o;
        o.n = __shfl_down_sync(0xffffffffu, st.n, off);
        o.mean = __shfl_down_sync(0xffffffffu, st.mean, off);
        o.m2 = __shfl_down_sync(0xffffffffu, st.m2, off);
        st = merge(st, o);
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) leaders[wid] = st;
    __syncthreads();
    if (wid == 0) {
        st = lane < kThreads / 32 ? leaders[lane] : Stat{0.f, 0.f, 0.f};
        for (int off = 16; off > 0; off >>= 1) {
            Stat o;
            o.n = __shfl_down_sync(0xffffffffu, st.n, off);
            o.mean = __shfl_down_sync(0xffffffffu, st.mean, off);
            o.m2 = __shfl_down_sync(0xffffffffu, st.m2, off);
            st = merge(st, o);
        }
        if (lane == 0) leaders[0] = st;
    }
    __syncthreads();
    const float mean = leaders[0].mean;
    const float rstd = rsqrtf(leaders[0].m2 / cols + eps);
    for (int c = threadIdx.x; c < cols; c += kThreads) {
        float v = (__bfloat162float(xr[c]) - mean) * rstd;
        yr[c] = __float2bfloat16(v * __bfloat162float(gamma[c]) + __bfloat162float(beta[c]));
    }
}
