// L2-normalize each row with cooperative groups: the block walks the row by thread_rank and
// size, each 32-thread tile reduces with cg::reduce, the tiles' sums meet in shared memory.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

extern "C" __global__ void l2norm_rows(const float* x, float* y, int n)
{
    cg::thread_block blk = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(blk);
    __shared__ float parts[32];
    const float* xr = x + (size_t)blockIdx.x * n;
    float ss = 0.f;
    for (int i = blk.thread_rank(); i < n; i += blk.size()) ss += xr[i] * xr[i];
    ss = cg::reduce(tile, ss, cg::plus<float>());
    if (tile.thread_rank() == 0) parts[tile.meta_group_rank()] = ss;
    blk.sync();
    float total = 0.f;
    for (unsigned k = 0; k < tile.meta_group_size(); ++k) total += parts[k];
    const float inv = 1.f / fmaxf(sqrtf(total), 1e-12f);
    for (int i = blk.thread_rank(); i < n; i += blk.size()) y[(size_t)blockIdx.x * n + i] = xr[i] * inv;
}
