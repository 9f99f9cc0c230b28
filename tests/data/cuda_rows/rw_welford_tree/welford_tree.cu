// LayerNorm with Welford statistics: each thread folds its columns into (count, mean, M2),
// then the block merges the triples pairwise in a shared tree (Chan's formula), a thread
// with no columns skipped by the guard on the partner's count.
extern "C" __global__ void layernorm_welford_tree(const float* x, const float* w, const float* b,
                                                  float* y, int n)
{
    __shared__ float cnt[256];
    __shared__ float avg[256];
    __shared__ float m2s[256];
    const int t = threadIdx.x;
    const float* xr = x + (size_t)blockIdx.x * n;
    float c = 0.f, mean = 0.f, m2 = 0.f;
    for (int i = t; i < n; i += blockDim.x) {
        const float v = xr[i];
        c += 1.f;
        const float d = v - mean;
        mean += d / c;
        m2 += d * (v - mean);
    }
    cnt[t] = c;
    avg[t] = mean;
    m2s[t] = m2;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s && cnt[t + s] > 0.f) {
            const float na = cnt[t], nb = cnt[t + s];
            const float nn = na + nb;
            const float delta = avg[t + s] - avg[t];
            avg[t] += delta * nb / nn;
            m2s[t] += m2s[t + s] + delta * delta * na * nb / nn;
            cnt[t] = nn;
        }
        __syncthreads();
    }
    const float mu = avg[0];
    const float rstd = rsqrtf(m2s[0] / n + 1e-5f);
    for (int i = t; i < n; i += blockDim.x)
        y[(size_t)blockIdx.x * n + i] = (xr[i] - mu) * rstd * w[i] + b[i];
}
