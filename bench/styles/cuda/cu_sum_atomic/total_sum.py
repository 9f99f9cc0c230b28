"""Sum of every element of a fp32 vector: blocks walk the vector grid-stride, fold their
threads' partial sums in shared memory, and thread 0 of each block adds the block's sum into
the result with atomicAdd. Compiled and launched with CuPy."""
import cupy
import torch

source = r'''
extern "C" __global__ void total_sum(const float* __restrict__ x, float* result, long long n)
{
    __shared__ float cache[256];
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        acc += x[i];
    cache[threadIdx.x] = acc;
    __syncthreads();
    for (int half = blockDim.x >> 1; half > 0; half >>= 1) {
        if (threadIdx.x < half) cache[threadIdx.x] += cache[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(result, cache[0]);
}
'''

module = cupy.RawModule(code=source)
total_sum = module.get_function("total_sum")


def run(x):
    n = x.numel()
    result = torch.zeros((), device=x.device, dtype=torch.float32)
    blocks = min((n + 255) // 256, 1024)
    total_sum((max(blocks, 1),), (256,), (cupy.asarray(x), cupy.asarray(result), cupy.int64(n)))
    return result
