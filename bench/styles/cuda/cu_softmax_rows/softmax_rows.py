"""KernelBench-style solution: softmax over the last dim of an fp16 (rows, cols) matrix, one
block per row, the row's max and sum each folded in a shared-memory tree."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

softmax_cuda = r"""
#include <torch/extension.h>
#include <cuda_fp16.h>

__global__ void softmax_rows_kernel(const __half* __restrict__ x, __half* __restrict__ y, int cols) {
    extern __shared__ float red[];
    const int tid = threadIdx.x;
    const __half* xr = x + (size_t)blockIdx.x * cols;
    __half* yr = y + (size_t)blockIdx.x * cols;

    float m = __int_as_float(0xff800000);
    for (int c = tid; c < cols; c += blockDim.x) m = fmaxf(m, __half2float(xr[c]));
    red[tid] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
        __syncthreads();
    }
    const float row_max = red[0];
    __syncthreads();

    float sum = 0.0f;
    for (int c = tid; c < cols; c += blockDim.x) sum += __expf(__half2float(xr[c]) - row_max);
    red[tid] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    const float inv = 1.0f / red[0];
    for (int c = tid; c < cols; c += blockDim.x)
        yr[c] = __float2half(__expf(__half2float(xr[c]) - row_max) * inv);
}

torch::Tensor softmax_rows(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.scalar_type() == torch::kHalf, "fp16 matrix on the GPU");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int rows = xc.size(0), cols = xc.size(1);
    const int threads = 256;
    softmax_rows_kernel<<<rows, threads, threads * sizeof(float)>>>(
        reinterpret_cast<const __half*>(xc.data_ptr<at::Half>()),
        reinterpret_cast<__half*>(y.data_ptr<at::Half>()), cols);
    return y;
}
"""

softmax_cpp = "torch::Tensor softmax_rows(torch::Tensor x);"

softmax_ext = load_inline(name="style_softmax_rows", cpp_sources=softmax_cpp,
                          cuda_sources=softmax_cuda, functions=["softmax_rows"])


class ModelNew(nn.Module):
    def forward(self, x):
        return softmax_ext.softmax_rows(x)
