"""The saxpy kernel behind a slow host path: 300 us of Python before each launch (a heavy
wrapper or dispatcher). The gate times the kernel, not the host: see gate.worker's gpu_lead.

The kernel is the one in saxpy_triton.py, written out again: the gate counts only launches of
kernels defined in the candidate's own file, so importing it would fail as "no launch"."""
import time

import torch
import triton
import triton.language as tl


@triton.jit
def saxpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a * x + y, mask=mask)


def run(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    until = time.perf_counter() + 300e-6
    while time.perf_counter() < until:
        pass
    out = torch.empty_like(x)
    n = x.numel()
    saxpy_kernel[(triton.cdiv(n, 1024),)](x, y, out, a, n, BLOCK=1024)
    return out
