// RMSNorm of fp16 rows with a weight. Cooperative groups: each 32-thread tile folds its sums of
// squares with tile.shfl_down in a halving loop, the tiles' results meet in shared memory, and
// the first tile folds those the same way. Reads go through the read-only cache (__ldg).
#include <cuda_fp16.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

extern "C" __global__ void rmsnorm_tiles(const __half* __restrict__ x, const __half* __restrict__ w,
                                         __half* __restrict__ y, int n, float eps)
{
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
    __shared__ float partial[32];
    const __half* xr = x + (size_t)blockIdx.x * n;
    __half* yr = y + (size_t)blockIdx.x * n;

    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = __half2float(__ldg(&xr[i]));
        ss += v * v;
    }
    for (int off = tile.size() / 2; off > 0; off /= 2)
        ss += tile.shfl_down(ss, off);
    if (tile.thread_rank() == 0)
        partial[tile.meta_group_rank()] = ss;
    block.sync();
    if (tile.meta_group_rank() == 0) {
        ss = tile.thread_rank() < tile.meta_group_size() ? partial[tile.thread_rank()] : 0.0f;
        for (int off = tile.size() / 2; off > 0; off /= 2)
            ss += tile.shfl_down(ss, off);
        if (tile.thread_rank() == 0)
            partial[0] = ss;
    }
    block.sync();
    const float scale = rsqrtf(partial[0] / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = __float2half(__half2float(__ldg(&xr[i])) * scale * __half2float(__ldg(&w[i])));
}
