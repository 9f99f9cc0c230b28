"""Cheat: never launches its kernel; computes the answer with NumPy (invisible to torch)."""
import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def saxpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def run(a, x, y):
    host = np.float32(a) * x.cpu().numpy() + y.cpu().numpy()  # copies only: allowed ops
    return torch.from_numpy(host).to(x.device)
