// Softmax of fp16 rows, four rows to a block of (64, 4) threads: ty picks the row, the 64
// threads along x stride over its columns and fold max, then sum, in red[ty][...].
#include <cuda_fp16.h>

#define ROWS_PER_BLOCK 4
#define COLS_PER_ROW 64

extern "C" __global__ void softmax_rows2d(const __half* X, __half* Y, int nrows, int ncols)
{
    __shared__ float red[ROWS_PER_BLOCK][COLS_PER_ROW];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int r = blockIdx.x * ROWS_PER_BLOCK + ty;
    const bool inside = r < nrows;
    const __half* xr = X + (size_t)r * ncols;

    float m = -1.0e30f;
    if (inside)
        for (int c = tx; c < ncols; c += blockDim.x) m = fmaxf(m, __half2float(xr[c]));
    red[ty][tx] = m;
    __syncthreads();
    for (int stride = blockDim.x >> 1; stride > 0; stride >>= 1) {
        if (tx < stride) red[ty][tx] = fmaxf(red[ty][tx], red[ty][tx + stride]);
        __syncthreads();
    }
    m = red[ty][0];
    __syncthreads();

    float z = 0.f;
    if (inside)
        for (int c = tx; c < ncols; c += blockDim.x) z += __expf(__half2float(xr[c]) - m);
    red[ty][tx] = z;
    __syncthreads();
    for (int stride = blockDim.x >> 1; stride > 0; stride >>= 1) {
        if (tx < stride) red[ty][tx] += red[ty][tx + stride];
        __syncthreads();
    }
    const float inv = 1.f / red[ty][0];

    if (inside)
        for (int c = tx; c < ncols; c += blockDim.x)
            Y[(size_t)r * ncols + c] = __float2half(__expf(__half2float(xr[c]) - m) * inv);
}
