"""Cheat: launches its kernel, then overwrites the result with a PyTorch computation."""
import torch
import triton
import triton.language as tl


@triton.jit
def saxpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def run(a, x, y):
    out = torch.empty_like(x)
    saxpy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, a, x.numel(), BLOCK=1024)
    out.copy_(torch.add(y, x, alpha=a))
    return out
