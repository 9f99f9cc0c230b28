"""The `topk` workload: the k largest values of each row and their positions.

Contract (the reference is `torch.topk(x, k, dim=-1, largest=True, sorted=True)`):
- outputs are a tuple (values, indices), both of shape (B, K); values have x's dtype, indices
  are int64, as torch.topk returns them;
- each row is sorted descending, so values must equal the reference values position by
  position;
- ties may be broken in any order: an index is right when it points at the right value
  (x[b, indices[b, j]] == values_ref[b, j]) and no index repeats within a row.
Plain relative-norm error is wrong for the indices (two correct kernels may order equal values
differently), so this case defines `compare`, which the gate uses instead of it.

A case module is plain data plus a few functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows.
"""
from __future__ import annotations

import torch

NAME = "topk"
DESCRIPTION = "per-row top-k (values and int64 indices, sorted descending)"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.topk"

SHAPES = {"default": {"B": 64, "L": 4096, "K": 512, "dtype": "fp32"}}
# L and K are not powers of two, so the padded paths run; "ties" draws from 8 distinct values
# so that the threshold value is shared by many elements and tie selection is exercised.
SMALL_SHAPES = {
    "default": {"B": 4, "L": 300, "K": 37, "dtype": "fp32"},
    "ties": {"B": 3, "L": 256, "K": 50, "dtype": "fp32", "distinct": 8},
}

# Returned by `compare`: selection is exact, so values must match to the last bit (the slack
# only forgives a -0.0/+0.0 swap, which the norm does not see anyway).
TOLERANCE = {"fp32": 1e-6, "fp16": 1e-6}

EXPERTS = [("topk_triton.py", "triton"), ("topk_cuda.cu", "cuda")]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    """(x, k): x of shape (B, L), random normal (or, with "distinct", small integers); k an int."""
    g = torch.Generator(device=device).manual_seed(seed)  # drawn where the inputs live
    dt = _DTYPES[shape["dtype"]]
    if "distinct" in shape:
        x = torch.randint(0, shape["distinct"], (shape["B"], shape["L"]), generator=g,
                          device=device).float() - 3.0
    else:
        x = torch.randn(shape["B"], shape["L"], generator=g, device=device)
    return (x.to(device=device, dtype=dt), int(shape["K"]))


def reference(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.topk(x, k, dim=-1, largest=True, sorted=True)


def compare(out: tuple, ref: tuple, inputs: tuple) -> float:
    """Error of `out` against `ref` under the contract above; inf when it cannot be right.

    Returns max(||v - v_ref|| / ||v_ref||, ||x[idx] - v_ref|| / ||v_ref||) after checking the
    structure: a pair of tensors of the reference's shapes, int64 indices in range, no index
    repeated within a row. NaN in the values propagates (NaN never passes).
    """
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        return float("inf")
    x = inputs[0]
    values, indices = out
    ref_values = ref[0]
    if values.shape != ref_values.shape or indices.shape != ref_values.shape:
        return float("inf")
    if indices.dtype != torch.int64 or values.dtype != ref_values.dtype:
        return float("inf")
    indices = indices.to(x.device)
    if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= x.shape[-1]):
        return float("inf")
    sorted_idx = indices.sort(dim=-1).values
    if bool((sorted_idx[..., 1:] == sorted_idx[..., :-1]).any()):
        return float("inf")
    v_ref = ref_values.double()
    denom = v_ref.norm().clamp_min(torch.finfo(torch.float64).tiny)
    err_values = (values.to(v_ref.device).double() - v_ref).norm() / denom
    gathered = x.gather(-1, indices).to(v_ref.device).double()
    err_indices = (gathered - v_ref).norm() / denom
    return float(torch.maximum(err_values, err_indices))


def flops(shape: dict) -> float:
    # Selection does comparisons, not arithmetic: counted as one operation per input element.
    return float(shape["B"] * shape["L"])


def bytes_moved(shape: dict) -> float:
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    b, length, k = shape["B"], shape["L"], shape["K"]
    return float(size * b * length + (size + 8) * b * k)
