"""Fresh CUDA style case `f2_gemm_tmpl_unroll`: C = A @ B, fp32; block tile from template<int BM, int BN>, unrolled K slab, column strips."""
from __future__ import annotations

from experts.gemm.case import bytes_moved, flops, make_inputs, reference  # noqa: F401

NAME = "f2_gemm_tmpl_unroll"
DESCRIPTION = "C = A @ B, fp32; block tile from template<int BM, int BN>, unrolled K slab, column strips"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.matmul"

SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"M": 70, "N": 130, "K": 36, "dtype": "fp32"}}
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "tile_gemm.cu"
FAMILY = "gemm"
