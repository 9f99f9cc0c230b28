// LayerNorm over the last axis of an fp32 (rows, cols) matrix with weight and bias, eps 1e-5:
// one block of 128 threads a row; each thread runs Welford's update over its strided share,
// the (count, mean, M2) triples are merged pairwise in shared memory (Chan's formula).
struct Stat { float n, mean, m2; };

__device__ __forceinline__ Stat merge(Stat a, Stat b)
{
    const float n = a.n + b.n;
    if (n == 0.f) return a;
    const float d = b.mean - a.mean;
    const float wb = b.n / n;
    Stat r;
    r.n = n;
    r.mean = a.mean + d * wb;
    r.m2 = a.m2 + b.m2 + d * d * a.n * wb;
    return r;
}

extern "C" __global__ void ln_welford(const float* __restrict__ x, const float* __restrict__ w,
                                      const float* __restrict__ b, float* __restrict__ y, int cols)
{
    __shared__ Stat part[128];
    const int t = threadIdx.x;
    const float* xr = x + (size_t)blockIdx.x * cols;
    Stat s = {0.f, 0.f, 0.f};
    for (int c = t; c < cols; c += 128) {
        const float v = xr[c];
        s.n += 1.f;
        const float d = v - s.mean;
        s.mean += d / s.n;
        s.m2 += d * (v - s.mean);
    }
    part[t] = s;
    __syncthreads();
    for (int h = 64; h > 0; h >>= 1) {
        if (t < h) part[t] = merge(part[t], part[t + h]);
        __syncthreads();
    }
    const float mean = part[0].mean;
    const float rstd = rsqrtf(part[0].m2 / part[0].n + 1e-5f);
    for (int c = t; c < cols; c += 128)
        y[(size_t)blockIdx.x * cols + c] = (xr[c] - mean) * rstd * w[c] + b[c];
}
