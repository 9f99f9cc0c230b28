// Softmax with one warp per row: the warps of a fixed grid step over the rows; each lane
// keeps a running max and a sum rescaled to it, the warp merges the pairs with xor
// shuffles, then the lanes write their columns.
#define WARP 32

__device__ __forceinline__ void merge_pair(float& m, float& s, float om, float os)
{
    const float top = fmaxf(m, om);
    s = s * __expf(m - top) + os * __expf(om - top);
    m = top;
}

extern "C" __global__ void softmax_warp_rows(const float* __restrict__ in, float* __restrict__ out,
                                             int rows, int cols)
{
    const int lane = threadIdx.x % WARP;
    const int warps_per_block = blockDim.x / WARP;
    const int first = blockIdx.x * warps_per_block + threadIdx.x / WARP;
    const int step = gridDim.x * warps_per_block;
    for (int r = first; r < rows; r += step) {
        const float* src = in + (size_t)r * cols;
        float m = -1.0e30f, s = 0.f;
        for (int c = lane; c < cols; c += WARP) {
            const float v = src[c];
            if (v > m) { s = s * __expf(m - v) + 1.f; m = v; }
            else s += __expf(v - m);
        }
        for (int k = WARP / 2; k > 0; k >>= 1) {
            const float om = __shfl_xor_sync(0xffffffffu, m, k);
            const float os = __shfl_xor_sync(0xffffffffu, s, k);
            merge_pair(m, s, om, os);
        }
        const float inv = 1.f / s;
        for (int c = lane; c < cols; c += WARP)
            out[(size_t)r * cols + c] = __expf(src[c] - m) * inv;
    }
}
