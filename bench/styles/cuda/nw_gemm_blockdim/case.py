"""CUDA style case `nw_gemm_blockdim`: C = A @ B in fp16, square tiles as wide as the 2-D block (`blockDim.x`), carved out of dynamic shared memory, indexed through a macro (experts.cudahost host)."""
from __future__ import annotations

from experts.gemm.case import bytes_moved, flops, make_inputs, reference  # noqa: F401

NAME = "nw_gemm_blockdim"
DESCRIPTION = "matrix product, fp16, tiles sized by blockDim in carved dynamic shared memory"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul (cuBLAS)"

SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 40, "N": 56, "K": 72, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "hgemm_dyn.cu"
FAMILY = "gemm"
