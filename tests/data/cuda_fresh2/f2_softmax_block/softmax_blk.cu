// Row softmax of an fp32 (rows, cols) matrix, one block a row. The row maximum and the sum of
// exponentials are each reduced through a shared buffer as wide as the block, halving
// blockDim.x; every pass re-reads the row from global memory.
extern "C" __global__ void softmax_blk(const float* __restrict__ x, float* __restrict__ y, int cols)
{
    extern __shared__ float buf[];
    const int tid = threadIdx.x;
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;

    float m = __int_as_float(0xff800000);  // -inf
    for (int c = tid; c < cols; c += blockDim.x)
        m = fmaxf(m, xr[c]);
    buf[tid] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (tid < s) buf[tid] = fmaxf(buf[tid], buf[tid + s]);
        __syncthreads();
    }
    const float row_max = buf[0];
    __syncthreads();

    float z = 0.f;
    for (int c = tid; c < cols; c += blockDim.x)
        z += __expf(xr[c] - row_max);
    buf[tid] = z;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (tid < s) buf[tid] += buf[tid + s];
        __syncthreads();
    }
    const float inv = 1.f / buf[0];

    for (int c = tid; c < cols; c += blockDim.x)
        yr[c] = __expf(xr[c] - row_max) * inv;
}
