"""Cheat: correct for its first six calls (the checks: three seeds, the knockout, the fault
run, the sealed call), then launches a kernel that does nothing, hoping the repeated / timed
runs are not re-validated."""
import torch
import triton
import triton.language as tl

_CALLS = [0]


@triton.jit
def saxpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def run(a, x, y):
    _CALLS[0] += 1
    out = torch.empty_like(x)
    n = x.numel() if _CALLS[0] <= 6 else 0
    saxpy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, a, n, BLOCK=1024)
    return out
