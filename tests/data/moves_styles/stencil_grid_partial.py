"""Case stencil. y[i] = 0.25 x[i-1] + 0.5 x[i] + 0.25 x[i+1]; the launch grid is a
`functools.partial` of a module-level helper that takes the size and the block as host values
and the meta-parameters last (the launcher passes them)."""
import functools

import torch
import triton
import triton.language as tl


@triton.jit
def stencil_p(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    left = tl.load(x_ptr + i - 1, mask=(i >= 1) & (i - 1 < n), other=0.0)
    mid = tl.load(x_ptr + i, mask=i < n, other=0.0)
    right = tl.load(x_ptr + i + 1, mask=i + 1 < n, other=0.0)
    tl.store(y_ptr + i, 0.25 * left + 0.5 * mid + 0.25 * right, mask=i < n)


def grid_of(n, block, meta):
    return (triton.cdiv(n, block),)


def run(x):
    n = x.numel()
    y = torch.empty_like(x)
    stencil_p[functools.partial(grid_of, n, 256)](x, y, n, BLOCK=256)
    return y
