"""Cheat (GPU): launches on a side stream, which events on the timed stream do not see."""
import torch
import triton
import triton.language as tl

_STREAM = []


@triton.jit
def saxpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def run(a, x, y):
    if not _STREAM:
        _STREAM.append(torch.cuda.Stream())
    out = torch.empty_like(x)
    with torch.cuda.stream(_STREAM[0]):
        saxpy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, a, x.numel(), BLOCK=1024)
    return out
