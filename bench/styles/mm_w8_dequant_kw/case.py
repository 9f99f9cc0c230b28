"""Style case: weight-only int8 GEMM (fp16 activations, int8 weights, per-column fp16 scales); all-keyword launch, lowercase tile names."""
from __future__ import annotations
import torch

NAME = "mm_w8_dequant_kw"
DESCRIPTION = "C = (A @ Wq) * scale, A fp16, Wq int8 (K, N), scale fp16 (N,)"
PLATFORM = "cuda"
REFERENCE_NAME = "torch dequantize + matmul"
SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"M": 72, "N": 64, "K": 96, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "w8mm.py"
FAMILY = "gemm"
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dt)
    wq = torch.randint(-127, 128, (shape["K"], shape["N"]), generator=g, device=device).to(torch.int8)
    scale = (0.01 + 0.01 * torch.rand(shape["N"], generator=g, device=device)).to(dt)
    return (a, wq, scale)


def reference(a, wq, scale):
    if a.device.type == "cpu":
        return ((a.float() @ wq.float()) * scale.float()).to(a.dtype)
    return torch.matmul(a, wq.to(a.dtype)) * scale


def flops(shape):
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape):
    return float(2 * shape["M"] * shape["K"] + shape["K"] * shape["N"] + 2 * shape["M"] * shape["N"] + 2 * shape["N"])
