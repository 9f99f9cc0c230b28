// Rows of an fp16 (M, N) matrix divided by their L2 norm: y = x / max(||x||, eps). One block of
// THREADS threads per row. A row of at most ROW_CACHE elements is read from global memory once,
// into shared memory, and both passes read it there (longer rows are read twice). Where a row
// starts on a 16-byte boundary the passes move 8 elements per access. The sum of squares is
// reduced with warp shuffles, one shared slot per warp.
#include <cuda_fp16.h>

#define THREADS 256
#define ROW_CACHE 8192

extern "C" __global__ void __launch_bounds__(THREADS)
l2norm_rows(const __half* __restrict__ x, __half* __restrict__ y, int n, float eps)
{
    __shared__ __align__(16) __half row[ROW_CACHE];
    __shared__ float warp_sums[32];
    __shared__ float total[1];
    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const __half* xr = x + (size_t)blockIdx.x * n;
    __half* yr = y + (size_t)blockIdx.x * n;

    const bool cached = n <= ROW_CACHE;
    if (cached) {
        for (int i = tid; i < n; i += THREADS) row[i] = xr[i];
        __syncthreads();
    }

    float ss = 0.f;
    if (cached) {
        { // 16-byte reads where the row is aligned, else one element at a time
            if ((reinterpret_cast<unsigned long long>(&row[0]) & 15ull) == 0) {
                const int whole = n / 8;
                for (int j = tid; j < whole; j += THREADS) {
                    const uint4 packed = *reinterpret_cast<const uint4*>(&row[j * 8]);
                    const __half* h = reinterpret_cast<const __half*>(&packed);
#pragma unroll
                    for (int k = 0; k < 8; ++k) { float v = __half2float(h[k]); ss += v * v; }
                }
                for (int i = whole * 8 + tid; i < n; i += THREADS) { float v = __half2float(row[i]); ss += v * v; }
            } else {
                for (int i = tid; i < n; i += THREADS) { float v = __half2float(row[i]); ss += v * v; }
            }
        }
    } else {
        for (int i = tid; i < n; i += THREADS) { float v = __half2float(xr[i]); ss += v * v; }
    }

    for (int off = 16; off > 0; off >>= 1) ss += __shfl_down_sync(0xffffffff, ss, off);
    if (lane == 0) warp_sums[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        ss = lane < (blockDim.x >> 5) ? warp_sums[lane] : 0.f;
        for (int off = 16; off > 0; off >>= 1) ss += __shfl_down_sync(0xffffffff, ss, off);
        if (lane == 0) total[0] = ss;
    }
    __syncthreads();
    const float inv = 1.0f / fmaxf(sqrtf(total[0]), eps);

    if (cached) {
        { // 16-byte reads and writes where both rows are aligned, else one element at a time
            if (((reinterpret_cast<unsigned long long>(&row[0]) | reinterpret_cast<unsigned long long>(&yr[0])) & 15ull) == 0) {
                const int whole = n / 8;
                for (int j = tid; j < whole; j += THREADS) {
                    const uint4 packed = *reinterpret_cast<const uint4*>(&row[j * 8]);
                    const __half* h = reinterpret_cast<const __half*>(&packed);
                    uint4 result;
                    __half* o = reinterpret_cast<__half*>(&result);
#pragma unroll
                    for (int k = 0; k < 8; ++k) o[k] = __float2half(__half2float(h[k]) * inv);
                    *reinterpret_cast<uint4*>(&yr[j * 8]) = result;
                }
                for (int i = whole * 8 + tid; i < n; i += THREADS) yr[i] = __float2half(__half2float(row[i]) * inv);
            } else {
                for (int i = tid; i < n; i += THREADS) yr[i] = __float2half(__half2float(row[i]) * inv);
            }
        }
    } else {
        for (int i = tid; i < n; i += THREADS) yr[i] = __float2half(__half2float(xr[i]) * inv);
    }
}
