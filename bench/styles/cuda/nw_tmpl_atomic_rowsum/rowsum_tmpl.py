"""KernelBench-style solution: row sums of an fp16 or fp32 matrix into fp32. The kernel is a
template over its block size and element type, instantiated explicitly for both types and
launched through a templated host wrapper; each warp folds with shuffles and its lane 0 adds
into one shared float."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

rowsum_cuda = r"""
#include <torch/extension.h>
#include <cuda_fp16.h>

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <int BLOCK, typename T>
__global__ void row_sum_kernel(const T* __restrict__ x, float* __restrict__ out, int n)
{
    __shared__ float total;
    if (threadIdx.x == 0) total = 0.0f;
    __syncthreads();
    const T* row = x + (size_t)blockIdx.x * n;
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += BLOCK)
        acc += to_float(row[i]);
    for (int off = 16; off > 0; off >>= 1)
        acc += __shfl_down_sync(0xffffffffu, acc, off);
    if ((threadIdx.x & 31) == 0)
        atomicAdd(&total, acc);
    __syncthreads();
    if (threadIdx.x == 0)
        out[blockIdx.x] = total;
}

template __global__ void row_sum_kernel<128, __half>(const __half* __restrict__, float* __restrict__, int);
template __global__ void row_sum_kernel<128, float>(const float* __restrict__, float* __restrict__, int);

template <typename T>
void launch_row_sum(const T* x, float* out, int rows, int n)
{
    constexpr int kBlock = 128;
    row_sum_kernel<kBlock, T><<<rows, kBlock>>>(x, out, n);
}

torch::Tensor row_sum(torch::Tensor x)
{
    TORCH_CHECK(x.is_cuda() && x.dim() == 2, "a matrix on the GPU");
    auto xc = x.contiguous();
    auto out = torch::empty({xc.size(0)}, xc.options().dtype(torch::kFloat32));
    const int rows = xc.size(0), n = xc.size(1);
    if (xc.scalar_type() == torch::kHalf)
        launch_row_sum<__half>(reinterpret_cast<const __half*>(xc.data_ptr<at::Half>()),
                               out.data_ptr<float>(), rows, n);
    else
        launch_row_sum<float>(xc.data_ptr<float>(), out.data_ptr<float>(), rows, n);
    return out;
}
"""

rowsum_cpp = "torch::Tensor row_sum(torch::Tensor x);"

rowsum_ext = load_inline(name="style_rowsum_tmpl", cpp_sources=rowsum_cpp,
                         cuda_sources=rowsum_cuda, functions=["row_sum"])


class ModelNew(nn.Module):
    def forward(self, x):
        return rowsum_ext.row_sum(x)
