// Out-of-place transpose of an fp16 (rows, cols) matrix. The tile is one flat shared array of
// 64 rows of 65 halves (the pad keeps the column reads off one bank); blocks of 64x4 threads,
// each thread moving 16 elements; the strides are passed as arguments.
#include <cuda_fp16.h>

constexpr int TD = 64;
constexpr int TR = 4;

extern "C" __global__ void tr_half(const __half* __restrict__ src, __half* __restrict__ dst,
                                   int rows, int cols, int ld_src, int ld_dst)
{
    __shared__ __half tile[TD * (TD + 1)];
    int c = blockIdx.x * TD + threadIdx.x;
    int r = blockIdx.y * TD + threadIdx.y;
#pragma unroll 4
    for (int j = 0; j < TD; j += TR) {
        if (r + j < rows && c < cols)
            tile[(threadIdx.y + j) * (TD + 1) + threadIdx.x] = src[(r + j) * ld_src + c];
    }
    __syncthreads();
    c = blockIdx.y * TD + threadIdx.x;
    r = blockIdx.x * TD + threadIdx.y;
#pragma unroll 4
    for (int j = 0; j < TD; j += TR) {
        if (r + j < cols && c < rows)
            dst[(r + j) * ld_dst + c] = tile[threadIdx.x * (TD + 1) + threadIdx.y + j];
    }
}
