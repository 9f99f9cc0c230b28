// Rows centred on their mean, four rows per block: a block of (32, 4) threads, threadIdx.y
// picks the row, the 32 threads of a row fold its sum in their own slice of shared memory.
extern "C" __global__ void center_rows(const float* x, float* y, int rows, int cols)
{
    __shared__ float part[4][32];
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    const bool live = row < rows;
    const float* xr = x + (size_t)(live ? row : 0) * cols;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += live ? xr[c] : 0.f;
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) part[threadIdx.y][threadIdx.x] += part[threadIdx.y][threadIdx.x + h];
        __syncthreads();
    }
    const float mean = part[threadIdx.y][0] / cols;
    if (live)
        for (int c = threadIdx.x; c < cols; c += blockDim.x) y[(size_t)row * cols + c] = xr[c] - mean;
}
