// RMSNorm of fp16 rows written with cooperative groups: the block's rank and size walk the
// row, and block.sync() is the barrier of the shared-memory tree that sums the squares.
#include <cooperative_groups.h>
#include <cuda_fp16.h>
namespace cg = cooperative_groups;

extern "C" __global__ void rmsnorm_cg(const __half* x, const __half* w, __half* y, int n)
{
    __shared__ float squares[512];
    cg::thread_block block = cg::this_thread_block();
    const unsigned rank = block.thread_rank();
    const __half* xr = x + (size_t)blockIdx.x * n;
    float acc = 0.f;
    for (int i = rank; i < n; i += block.size()) {
        const float v = __half2float(xr[i]);
        acc += v * v;
    }
    squares[rank] = acc;
    block.sync();
    for (unsigned half = block.size() / 2; half > 0; half /= 2) {
        if (rank < half) squares[rank] += squares[rank + half];
        block.sync();
    }
    const float scale = rsqrtf(squares[0] / n + 1e-5f);
    for (int i = rank; i < n; i += block.size())
        y[(size_t)blockIdx.x * n + i] = __float2half(__half2float(xr[i]) * scale * __half2float(w[i]));
}
