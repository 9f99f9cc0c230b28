"""The tanh form of GELU, elementwise: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
import torch
import triton
import triton.language as tl


@triton.jit
def gelu_tanh(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = 2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + t), mask=offs < n)


def run(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    gelu_tanh[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
    return y
