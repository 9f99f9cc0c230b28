// Sum of a vector with cooperative groups: a grid-stride loop per thread, cg::reduce over each
// 32-thread tile, and one atomicAdd per tile into the result.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

extern "C" __global__ void total(const float* data, float* result, int n)
{
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    float local = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        local += data[i];
    const float w = cg::reduce(warp, local, cg::plus<float>());
    if (warp.thread_rank() == 0)
        atomicAdd(result, w);
}
