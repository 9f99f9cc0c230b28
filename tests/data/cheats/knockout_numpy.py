"""Cheat: launches a kernel that does nothing useful, returns a NumPy-computed answer."""
import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def touch_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


def run(a, x, y):
    touch_kernel[(1,)](x, x.numel(), BLOCK=128)
    host = np.float32(a) * x.cpu().numpy() + y.cpu().numpy()  # copies only: allowed ops
    return torch.from_numpy(host).to(x.device)
