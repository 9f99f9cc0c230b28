// Softmax with one warp per row: blockDim = (32, 4), four rows per block, xor-shuffle
// reductions for the max and the sum.
__inline__ __device__ float warpReduceMax(float val)
{
    for (int offset = warpSize / 2; offset > 0; offset /= 2)
        val = max(val, __shfl_xor_sync(0xffffffff, val, offset));
    return val;
}

__inline__ __device__ float warpReduceSum(float val)
{
    for (int offset = warpSize / 2; offset > 0; offset /= 2)
        val += __shfl_xor_sync(0xffffffff, val, offset);
    return val;
}

extern "C" __global__ void softmax_warp_per_row(float* out, const float* in, int M, int N)
{
    int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= M) return;
    int lane = threadIdx.x;
    const float* x = in + row * N;
    float mx = -3.402823466e+38f;
    for (int j = lane; j < N; j += 32) mx = max(mx, x[j]);
    mx = warpReduceMax(mx);
    float sum = 0.0f;
    for (int j = lane; j < N; j += 32) sum += __expf(x[j] - mx);
    sum = warpReduceSum(sum);
    float* o = out + row * N;
    for (int j = lane; j < N; j += 32) o[j] = __expf(x[j] - mx) / sum;
}
