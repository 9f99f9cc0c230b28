"""Isolation (GPU): a kernel that spins forever on a flag nobody sets."""
import torch
import triton
import triton.language as tl


@triton.jit
def spin_kernel(flag_ptr, out_ptr):
    while tl.load(flag_ptr, volatile=True) == 0:
        pass
    tl.store(out_ptr, 1.0)


def run(a, x, y):
    flag = torch.zeros(1, dtype=torch.int32, device=x.device)
    out = torch.empty_like(x)
    spin_kernel[(1,)](flag, out)
    return out
