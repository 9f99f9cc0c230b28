// Row softmax, one block per row. Both block reductions are while loops over the same stride
// variable, set again before the second one; the block's size is whatever the host picks.
extern "C" __global__ void softmax_rows(const float* in, float* out, int ncols)
{
    extern __shared__ float buf[];
    const unsigned int t = threadIdx.x;
    const float* src = in + (size_t)blockIdx.x * ncols;
    float* dst = out + (size_t)blockIdx.x * ncols;

    float best = __int_as_float(0xff800000);  // -inf
    for (int j = t; j < ncols; j += blockDim.x)
        best = fmaxf(best, src[j]);
    buf[t] = best;
    __syncthreads();
    unsigned int step = blockDim.x / 2;
    while (step > 0) {
        if (t < step)
            buf[t] = fmaxf(buf[t], buf[t + step]);
        __syncthreads();
        step >>= 1;
    }
    const float rowmax = buf[0];
    __syncthreads();

    float total = 0.0f;
    for (int j = t; j < ncols; j += blockDim.x)
        total += expf(src[j] - rowmax);
    buf[t] = total;
    __syncthreads();
    step = blockDim.x / 2;
    while (step != 0) {
        if (t < step) {
            buf[t] += buf[t + step];
        }
        __syncthreads();
        step /= 2;
    }
    const float scale = 1.0f / buf[0];

    for (int j = t; j < ncols; j += blockDim.x)
        dst[j] = expf(src[j] - rowmax) * scale;
}
