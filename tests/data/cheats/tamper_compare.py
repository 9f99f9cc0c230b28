"""Cheat: makes every comparison pass (allclose, norms, assert_close) and returns garbage."""
import torch
import triton
import triton.language as tl

torch.allclose = lambda *args, **kwargs: True
torch.linalg.norm = lambda *args, **kwargs: torch.zeros(())
torch.norm = lambda *args, **kwargs: torch.zeros(())
torch.testing.assert_close = lambda *args, **kwargs: None


@triton.jit
def fill_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.full((BLOCK,), 1.0, tl.float32), mask=offs < n)


def run(a, x, y):
    out = torch.empty_like(x)
    fill_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
