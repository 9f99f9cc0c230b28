"""Isolation: asks for far more memory than any machine has (256 TiB)."""
import torch
import triton
import triton.language as tl


@triton.jit
def saxpy_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


def run(a, x, y):
    return torch.empty(1 << 46, dtype=torch.float32, device=x.device)
