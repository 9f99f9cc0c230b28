"""Style case `nw_scan_recurrence`: h[t] = a[t] * h[t-1] + x[t] along rows through tl.associative_scan, fp32."""
from __future__ import annotations

import torch

NAME = "nw_scan_recurrence"
DESCRIPTION = "first-order linear recurrence along rows (every state and the last one), fp32"
PLATFORM = "cuda"
REFERENCE_NAME = "a step-by-step torch loop over time"
SHAPES = {"default": {"B": 4096, "T": 2048, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"B": 10, "T": 150, "dtype": "fp32"}}
TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}
EXPERTS: list = []
START = "scan_rec.py"
FAMILY = "reduction"


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    decay = 0.5 + 0.5 * torch.rand(shape["B"], shape["T"], generator=g, device=device)
    x = torch.randn(shape["B"], shape["T"], generator=g, device=device)
    return (decay, x)


def reference(decay, x):
    h = torch.zeros(x.shape[0], device=x.device, dtype=torch.float32)
    out = torch.empty_like(x, dtype=torch.float32)
    for t in range(x.shape[1]):
        h = decay[:, t].float() * h + x[:, t].float()
        out[:, t] = h
    return out, h.clone()


def flops(shape):
    return 2.0 * shape["B"] * shape["T"]


def bytes_moved(shape):
    return float(4 * 3 * shape["B"] * shape["T"])
