// Softmax over rows with the row kept in dynamic shared memory: the row is read once, the
// max and the sum are folded in a scratch area after it, the output written from the copy.
extern "C" __global__ void softmax_cached(const float* __restrict__ input, float* __restrict__ output, int cols)
{
    extern __shared__ float smem[];
    float* row = smem;
    float* red = smem + cols;
    const int tid = threadIdx.x;
    const float* src = input + (size_t)blockIdx.x * cols;
    float local_max = -1e30f;
    for (int j = tid; j < cols; j += blockDim.x) {
        float v = src[j];
        row[j] = v;
        local_max = fmaxf(local_max, v);
    }
    red[tid] = local_max;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
        __syncthreads();
    }
    const float row_max = red[0];
    __syncthreads();
    float local_sum = 0.f;
    for (int j = tid; j < cols; j += blockDim.x) {
        float e = __expf(row[j] - row_max);
        row[j] = e;
        local_sum += e;
    }
    red[tid] = local_sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    const float inv = 1.f / red[0];
    for (int j = tid; j < cols; j += blockDim.x)
        output[(size_t)blockIdx.x * cols + j] = row[j] * inv;
}
