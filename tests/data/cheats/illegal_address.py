"""Isolation (GPU): stores far outside any allocation (CUDA illegal address)."""
import torch
import triton
import triton.language as tl


@triton.jit
def wild_store(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs + (1 << 40), tl.zeros((BLOCK,), tl.float32))


def run(a, x, y):
    out = torch.empty_like(x)
    wild_store[(4,)](out, x.numel(), BLOCK=1024)
    return out
