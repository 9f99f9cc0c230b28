// Log-softmax with one warp per row and no shared memory: a 1-D block of 128 threads holds
// four rows; each lane walks its row by 32, the warp folds max and sum with xor shuffles.
extern "C" __global__ void log_softmax_warp(const float* x, float* y, int rows, int cols)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    const float* xr = x + (size_t)row * cols;
    float m = -3.0e38f;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, xr[c]);
    for (int k = 16; k; k >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, k));
    float s = 0.f;
    for (int c = lane; c < cols; c += 32) s += expf(xr[c] - m);
    for (int k = 16; k; k >>= 1) s += __shfl_xor_sync(0xffffffffu, s, k);
    const float lse = m + logf(s);
    for (int c = lane; c < cols; c += 32) y[(size_t)row * cols + c] = xr[c] - lse;
}
