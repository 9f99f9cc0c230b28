"""Style case: leaky_relu(A @ B + bias), bf16 on device (fp16 small); tiles passed positionally."""
from __future__ import annotations
import torch

NAME = "mm_bias_leaky"
DESCRIPTION = "leaky_relu(A @ B + bias, 0.01), bf16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch addmm + leaky_relu"
SHAPES = {"default": {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 80, "N": 96, "K": 64, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "fused_lin.py"
FAMILY = "gemm"
SLOPE = 0.01
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    a = torch.randn(shape["M"], shape["K"], generator=g, device=device).to(dt)
    b = torch.randn(shape["K"], shape["N"], generator=g, device=device).to(dt)
    bias = torch.randn(shape["N"], generator=g, device=device).to(dt)
    return (a, b, bias, SLOPE)


def reference(a, b, bias, slope):
    if a.device.type == "cpu":
        y = a.float() @ b.float() + bias.float()
        return torch.nn.functional.leaky_relu(y, slope).to(a.dtype)
    return torch.nn.functional.leaky_relu(torch.addmm(bias, a, b), slope)


def flops(shape):
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"] + shape["N"]))
