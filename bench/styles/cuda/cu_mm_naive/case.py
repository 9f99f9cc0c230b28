"""CUDA style case `cu_mm_naive`: C = A @ B, one thread per output (cudahost host)."""
from __future__ import annotations

from experts.gemm.case import bytes_moved, flops, make_inputs, reference  # noqa: F401

NAME = "cu_mm_naive"
DESCRIPTION = "matrix product, bf16, a naive CUDA kernel (one thread per element)"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul (cuBLAS)"

SHAPES = {"default": {"M": 2048, "N": 2048, "K": 2048, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 72, "N": 80, "K": 56, "dtype": "bf16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "mm_naive.cu"
FAMILY = "gemm"
