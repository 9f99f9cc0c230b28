// Softmax in one reading pass: each thread keeps a running max and a sum rescaled whenever
// the max grows; the (max, sum) pairs of the block are merged in shared memory, then a second
// pass writes the outputs.
extern "C" __global__ void online_softmax(const float* __restrict__ src, float* __restrict__ dst,
                                          int width)
{
    __shared__ float mx[128];
    __shared__ float sm[128];
    const float* row = src + (size_t)blockIdx.x * width;
    float m = -3.0e38f, d = 0.f;  // below any input
    for (int j = threadIdx.x; j < width; j += blockDim.x) {
        float v = row[j];
        float nm = fmaxf(m, v);
        d = d * __expf(m - nm) + __expf(v - nm);
        m = nm;
    }
    mx[threadIdx.x] = m;
    sm[threadIdx.x] = d;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float ma = mx[threadIdx.x], mb = mx[threadIdx.x + s];
            float mm = fmaxf(ma, mb);
            sm[threadIdx.x] = sm[threadIdx.x] * __expf(ma - mm) + sm[threadIdx.x + s] * __expf(mb - mm);
            mx[threadIdx.x] = mm;
        }
        __syncthreads();
    }
    const float gmax = mx[0];
    const float inv = 1.f / sm[0];
    for (int j = threadIdx.x; j < width; j += blockDim.x)
        dst[(size_t)blockIdx.x * width + j] = __expf(row[j] - gmax) * inv;
}
