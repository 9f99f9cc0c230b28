"""The `l2norm` workload: each row of an (M, N) matrix divided by its Euclidean norm.

The reference is `torch.nn.functional.normalize(x, p=2, dim=-1, eps=1e-12)`: y = x / max(||x||, eps).
A row reduction (a sum of squares) followed by a pass that writes the row scaled, the shape of
RMSNorm, LayerNorm and softmax.

A case module is plain data plus three functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "l2norm"
DESCRIPTION = "rows of an (M, N) matrix divided by their L2 norm, fp16"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.normalize"

SHAPES = {"default": {"M": 16384, "N": 4096, "dtype": "fp16"}}
# "odd": rows of an odd length, so every other row starts off a 16-byte boundary (the element
# path) and the vectors leave a tail; "long": rows longer than the expert keeps in shared memory.
SMALL_SHAPES = {
    "default": {"M": 6, "N": 520, "dtype": "fp16"},
    "odd": {"M": 5, "N": 301, "dtype": "fp16"},
    "long": {"M": 2, "N": 8200, "dtype": "fp16"},
}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS = [("l2norm_cuda.cu", "cuda"), ("l2norm_plain.cu", "cuda"), ("l2norm_regs.cu", "cuda"),
           ("l2norm_narrow.cu", "cuda")]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["M"], shape["N"], generator=g, device=device)
    return (x.to(_DTYPES[shape["dtype"]]),)


def reference(x: torch.Tensor) -> torch.Tensor:
    if x.device.type == "cpu":
        return F.normalize(x.float(), p=2.0, dim=-1, eps=1e-12).to(x.dtype)
    return F.normalize(x, p=2.0, dim=-1, eps=1e-12)


def flops(shape: dict) -> float:
    return 3.0 * shape["M"] * shape["N"]


def bytes_moved(shape: dict) -> float:
    return float(2 * _SIZE[shape["dtype"]] * shape["M"] * shape["N"])
