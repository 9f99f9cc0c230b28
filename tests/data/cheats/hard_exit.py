"""Isolation: ends the process with os._exit before the gate can see any output."""
import os

import triton
import triton.language as tl


@triton.jit
def saxpy_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


def run(a, x, y):
    os._exit(3)
