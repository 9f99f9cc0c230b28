"""Passes over CUDA C++ kernels (`.cu` text)."""
