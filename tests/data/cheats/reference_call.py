"""Cheat (gemm case): imports the case's reference and returns its answer, after launching a
kernel of its own so that it does not look idle."""
import torch
import triton
import triton.language as tl

from experts.gemm.case import reference


@triton.jit
def touch_kernel(a_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(a_ptr + offs, mask=offs < n)


def run(a, b):
    touch_kernel[(1,)](a, a.numel(), BLOCK=128)
    return reference(a, b)
