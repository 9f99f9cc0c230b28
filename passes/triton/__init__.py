"""Passes over Triton kernels (Python source with `@triton.jit` functions)."""
