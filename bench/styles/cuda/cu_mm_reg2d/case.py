"""CUDA style case `cu_mm_reg2d`: C = A @ B, 2-D register blocking (load_inline ModelNew host)."""
from __future__ import annotations

from experts.gemm.case import bytes_moved, flops, make_inputs, reference  # noqa: F401

NAME = "cu_mm_reg2d"
DESCRIPTION = "matrix product, bf16, 128x128 tiles with 8x8 results per thread (load_inline)"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul (cuBLAS)"

SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 136, "N": 144, "K": 40, "dtype": "bf16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "mm_reg2d.py"
FAMILY = "gemm"
