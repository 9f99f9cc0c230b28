"""CUDA style case `cu_mm_reg1d`: C = A @ B, 1-D register blocking (CuPy RawKernel host)."""
from __future__ import annotations

from experts.gemm.case import bytes_moved, flops, make_inputs, reference  # noqa: F401

NAME = "cu_mm_reg1d"
DESCRIPTION = "matrix product, fp16, 64x64 tiles with 8 results per thread (CuPy)"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul (cuBLAS)"

SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 72, "N": 80, "K": 40, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "mm_reg1d.py"
FAMILY = "gemm"
