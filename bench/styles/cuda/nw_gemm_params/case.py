"""CUDA style case `nw_gemm_params`: C = A @ B in fp16, the operands and sizes one structure passed by value and read through its fields, 64x64 tiles, a 4x4 register tile per thread, A's tile stored transposed and padded (cuda-python host)."""
from __future__ import annotations

from experts.gemm.case import bytes_moved, flops, make_inputs, reference  # noqa: F401

NAME = "nw_gemm_params"
DESCRIPTION = "matrix product, fp16, arguments in a structure, 4x4 results per thread"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul (cuBLAS)"

SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 72, "N": 80, "K": 40, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "gemm_params.cu"
FAMILY = "gemm"
