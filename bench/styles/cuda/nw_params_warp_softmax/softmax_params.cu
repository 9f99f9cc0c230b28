// Softmax of each row of a row-major fp32 matrix. The arguments travel as one struct passed
// by value; a block of (32, 4) threads holds four warps, warp threadIdx.y taking one row, its
// lanes striding over the columns and meeting through butterfly (xor) shuffles.
struct SoftmaxParams {
    const float* in;
    float* out;
    int rows;
    int cols;
};

__device__ __forceinline__ float warp_max(float v)
{
    for (int mask = 16; mask > 0; mask >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, mask));
    return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int mask = 16; mask > 0; mask >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, mask);
    return v;
}

extern "C" __global__ void softmax_warp_rows(SoftmaxParams p)
{
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= p.rows)
        return;
    const float* x = p.in + (size_t)row * p.cols;
    float* y = p.out + (size_t)row * p.cols;
    const int lane = threadIdx.x;

    float m = -3.402823466e38f;
    for (int c = lane; c < p.cols; c += 32)
        m = fmaxf(m, x[c]);
    m = warp_max(m);

    float s = 0.0f;
    for (int c = lane; c < p.cols; c += 32)
        s += expf(x[c] - m);
    s = warp_sum(s);

    const float inv = 1.0f / s;
    for (int c = lane; c < p.cols; c += 32)
        y[c] = expf(x[c] - m) * inv;
}
