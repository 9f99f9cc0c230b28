"""Style case: RMSNorm, a fixed number of programs walking rows grid-stride over tl.num_programs(0)."""
from __future__ import annotations
import torch

NAME = "rmsnorm_gridstride"
DESCRIPTION = "RMSNorm over (M, N), eps 1e-6, grid-stride row loop inside the kernel"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.rms_norm"
SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "bf16"}}
SMALL_SHAPES = {"default": {"M": 37, "N": 200, "dtype": "fp16"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-5}
EXPERTS: list = []
START = "rms_gs.py"
FAMILY = "reduction"
EPS = 1e-6
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    x = torch.randn(shape["M"], shape["N"], generator=g, device=device).to(dt)
    w = (1.0 + 0.1 * torch.randn(shape["N"], generator=g, device=device)).to(dt)
    return (x, w, EPS)


def reference(x, weight, eps):
    import torch.nn.functional as F
    if x.device.type == "cpu":
        return F.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def flops(shape):
    return 4.0 * shape["M"] * shape["N"]


def bytes_moved(shape):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * (2 * shape["M"] * shape["N"] + shape["N"]))
