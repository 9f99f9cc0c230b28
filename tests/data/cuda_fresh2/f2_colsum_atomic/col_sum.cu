// Column sums of an fp32 (rows, cols) matrix: thread x of a block owns one column, block y a
// chunk of 64 rows; each thread adds its chunk down the column and adds that to the output.
#define CHUNK 64

extern "C" __global__ void col_sum(const float* __restrict__ a, float* __restrict__ out,
                                   int rows, int cols)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int r0 = blockIdx.y * CHUNK;
    if (col >= cols) return;
    float s = 0.f;
    const int r1 = min(r0 + CHUNK, rows);
    for (int r = r0; r < r1; ++r)
        s += a[(size_t)r * cols + col];
    atomicAdd(&out[col], s);
}
