"""Fresh CUDA style case `f2_gemm_float2`: C = A @ B, fp32; float2 loads into shared slabs, 2x2 results a thread."""
from __future__ import annotations

from experts.gemm.case import bytes_moved, flops, make_inputs, reference  # noqa: F401

NAME = "f2_gemm_float2"
DESCRIPTION = "C = A @ B, fp32; float2 loads into shared slabs, 2x2 results a thread"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul"

SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 70, "N": 66, "K": 42, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "sgemm_f2.cu"
FAMILY = "gemm"
