"""Style case `xent_chunks`: per-row cross-entropy loss over a large vocabulary."""
from __future__ import annotations
import torch

NAME = "xent_chunks"
DESCRIPTION = "per-row cross entropy (logsumexp - target logit), logits (R, V) fp16, loss fp32"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.nn.functional.cross_entropy"
SHAPES = {"default": {"R": 4096, "V": 32000, "dtype": "fp16"}}
SMALL_SHAPES = {"default": {"R": 9, "V": 300, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-5}
EXPERTS: list = []
START = "xent.py"
FAMILY = "reduction"
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    x = (3 * torch.randn(shape["R"], shape["V"], generator=g, device=device)).to(_DTYPES[shape["dtype"]])
    t = torch.randint(0, shape["V"], (shape["R"],), generator=g, device=device)
    return (x, t)


def reference(x, t):
    if x.device.type == "cpu":
        return torch.nn.functional.cross_entropy(x.float(), t, reduction="none")
    return torch.nn.functional.cross_entropy(x, t, reduction="none").float()


def flops(shape):
    return 4.0 * shape["R"] * shape["V"]


def bytes_moved(shape):
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * shape["R"] * shape["V"] + 12 * shape["R"])
