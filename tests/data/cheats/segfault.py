"""Isolation: writes to the zero page in the host process (SIGSEGV)."""
import ctypes

import triton
import triton.language as tl


@triton.jit
def saxpy_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


def run(a, x, y):
    ctypes.c_int.from_address(16).value = 1  # write to the zero page: SIGSEGV
