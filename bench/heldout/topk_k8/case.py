"""Held-out `topk_k8`: the 8 largest values of each row and their positions (an MoE router's
expert selection over many tokens), fp32. Same output contract as experts/topk: (values,
int64 indices), rows sorted descending, ties in any order; compared by `compare` below.

A case module is plain data plus a few functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows.
"""
from __future__ import annotations

import torch

NAME = "topk_k8"
DESCRIPTION = "per-row top-8 over 16384 rows of 1024 (values and int64 indices), fp32"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.topk"

SHAPES = {"default": {"B": 16384, "L": 1024, "K": 8, "dtype": "fp32"}}
# "ties" draws from 6 distinct values, so the k-th value is shared by many elements.
SMALL_SHAPES = {
    "default": {"B": 5, "L": 200, "K": 8, "dtype": "fp32"},
    "ties": {"B": 3, "L": 64, "K": 8, "dtype": "fp32", "distinct": 6},
}
TOLERANCE = {"fp32": 1e-6, "fp16": 1e-6}
EXPERTS: list = []
START = "topk_select.py"
FAMILY = "selection"

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    """(x, k): x of shape (B, L), random normal (or, with "distinct", small integers); k an int."""
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    if "distinct" in shape:
        x = torch.randint(0, shape["distinct"], (shape["B"], shape["L"]), generator=g, device=device).float()
    else:
        x = torch.randn(shape["B"], shape["L"], generator=g, device=device)
    return (x.to(dt), int(shape["K"]))


def reference(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.topk(x, k, dim=-1, largest=True, sorted=True)


def compare(out: tuple, ref: tuple, inputs: tuple) -> float:
    """experts/topk's comparison (values position by position, indices by the value they
    point at, no index repeated within a row)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "experts" / "topk" / "case.py"
    spec = importlib.util.spec_from_file_location("klineage_heldout_topk_contract", path)
    contract = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(contract)
    return contract.compare(out, ref, inputs)


def flops(shape: dict) -> float:
    return float(shape["B"] * shape["L"])


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(size * shape["B"] * shape["L"] + (size + 8) * shape["B"] * shape["K"])
