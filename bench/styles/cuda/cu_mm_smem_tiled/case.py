"""CUDA style case `cu_mm_smem_tiled`: C = A @ B, shared-memory tiled (cudahost host)."""
from __future__ import annotations

from experts.gemm.case import bytes_moved, flops, make_inputs, reference  # noqa: F401

NAME = "cu_mm_smem_tiled"
DESCRIPTION = "matrix product, bf16, 32x32 shared-memory tiles"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul (cuBLAS)"

SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 72, "N": 80, "K": 72, "dtype": "bf16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "mm_tiled.cu"
FAMILY = "gemm"
