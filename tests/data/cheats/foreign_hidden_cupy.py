"""Cheat (gemm case, GPU): imports CuPy by a computed name (no text names it) and computes the
product there; its own kernel copies the result into the output."""
import torch
import triton
import triton.language as tl

cp = __import__("cu" + "py")


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def run(a, b):
    c = cp.asarray(a.float()) @ cp.asarray(b.float())
    src = torch.as_tensor(c, device=a.device).to(a.dtype)
    out = torch.empty_like(src)
    copy_kernel[(triton.cdiv(out.numel(), 1024),)](src, out, out.numel(), BLOCK=1024)
    return out
