// Sum of each row of an (M, N) fp32 matrix: one block per row, each thread adds a strided
// slice of the row, then the block's partial sums are folded in a shared-memory tree.
#define THREADS 512

extern "C" __global__ void row_sum(const float* in, float* out, int cols)
{
    __shared__ float partial[THREADS];
    const float* row = in + (size_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x)
        s += row[j];
    partial[threadIdx.x] = s;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride)
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = partial[0];
}
