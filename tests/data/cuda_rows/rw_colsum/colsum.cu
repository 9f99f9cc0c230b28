// Column sums of a (rows, cols) matrix: a block of (32, 8) threads owns 32 columns; thread
// (x, y) adds rows y, y + 8, ... of its column, and the 8 partial sums of a column are folded
// by a tree over threadIdx.y in shared memory.
extern "C" __global__ void column_sums(const float* a, float* out, int rows, int cols)
{
    __shared__ float part[8][32];
    const int col = blockIdx.x * 32 + threadIdx.x;
    float s = 0.f;
    if (col < cols)
        for (int r = threadIdx.y; r < rows; r += blockDim.y) s += a[(size_t)r * cols + col];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    for (int h = blockDim.y / 2; h > 0; h >>= 1) {
        if (threadIdx.y < h) part[threadIdx.y][threadIdx.x] += part[threadIdx.y + h][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && col < cols) out[col] = part[0][threadIdx.x];
}
