// Row sums of an fp32 (rows, cols) matrix, one block of 256 threads a row: a strided pass, a
// warp fold with __shfl_down_sync, the 8 warp totals in shared memory, and the first warp
// folds those.
#define THREADS 256
#define WARPS (THREADS / 32)

extern "C" __global__ void row_sum2(const float* __restrict__ in, float* __restrict__ out, int cols)
{
    __shared__ float warp_tot[WARPS];
    const float* row = in + (size_t)blockIdx.x * cols;
    const int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    float acc = 0.f;
    for (int c = threadIdx.x; c < cols; c += THREADS)
        acc += row[c];
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1)
        acc += __shfl_down_sync(0xffffffff, acc, d);
    if (lane == 0) warp_tot[wid] = acc;
    __syncthreads();
    if (wid == 0) {
        acc = lane < WARPS ? warp_tot[lane] : 0.f;
#pragma unroll
        for (int d = 16; d >= 1; d >>= 1)
            acc += __shfl_down_sync(0xffffffff, acc, d);
        if (lane == 0) out[blockIdx.x] = acc;
    }
}
