"""Cheat (gemm case): computes the product with CuPy, then has its own kernel copy it into the
output, so every launch is its own and skipping it breaks the output."""
import cupy
import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def run(a, b):
    c = cupy.asarray(a.float()) @ cupy.asarray(b.float())
    src = torch.as_tensor(c, device=a.device).to(a.dtype)
    out = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype)
    copy_kernel[(triton.cdiv(out.numel(), 1024),)](src, out, out.numel(), BLOCK=1024)
    return out
