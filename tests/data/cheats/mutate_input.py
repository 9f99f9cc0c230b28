"""Cheat: writes the result into its input y and returns y (no output allocation)."""
import torch
import triton
import triton.language as tl


@triton.jit
def saxpy_inplace(x_ptr, y_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, a * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def run(a, x, y):
    saxpy_inplace[(triton.cdiv(x.numel(), 1024),)](x, y, a, x.numel(), BLOCK=1024)
    return y
