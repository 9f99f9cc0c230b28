"""The `fmha` workload: fused multi-head attention forward, softmax(Q K^T / sqrt(d)) V.

A case module is plain data plus three functions; it imports torch and nothing of KLineage.
See docs/INTERFACES.md ("Case modules") for the contract every case follows. Tensors are laid
out as scaled_dot_product_attention takes them: (batch, heads, seq, head_dim).
"""
from __future__ import annotations

import warnings

import torch

NAME = "fmha"
DESCRIPTION = "multi-head attention forward (flash attention), causal and non-causal"
PLATFORM = "cuda"
REFERENCE_NAME = "torch scaled_dot_product_attention, flash back-end"

# FlashAttention-2's benchmark setting at D = 128: 16k tokens (B x S), hidden size 2048
# (H = 16 heads): 2,048 query blocks of 128 rows fill the 132 SMs many times over.
SHAPES = {
    "causal": {"B": 8, "H": 16, "S": 2048, "D": 128, "causal": True, "dtype": "fp16"},
    "noncausal": {"B": 8, "H": 16, "S": 2048, "D": 128, "causal": False, "dtype": "fp16"},
}
# The interpreter runs the expert's first autotune config (128 x 128 tiles), so these are the
# smallest shapes on which every path the device runs is exercised: >= 2 query blocks and
# >= 2 key-loop iterations per variant, two (batch, head) programs; causal S is not a
# multiple of the tile (the diagonal block is partial), non-causal S is (EVEN_N, as on the
# device).
SMALL_SHAPES = {
    "causal": {"B": 1, "H": 2, "S": 300, "D": 64, "causal": True, "dtype": "fp16"},
    "noncausal": {"B": 1, "H": 2, "S": 256, "D": 64, "causal": False, "dtype": "fp16"},
}

# Benchmark-only (`klineage bench`; the gate's checks keep SHAPES): the paper's Table 2 FMHA
# workload, batch 8, heads 64, seq 2048, dim 128, fp16. The table names no mask: both are timed.
# 268 MB per tensor; the gate's input sets and refill pools hold about 7 GB per variant.
BENCH_SHAPES = {
    "paper-noncausal": {"B": 8, "H": 64, "S": 2048, "D": 128, "causal": False, "dtype": "fp16"},
    "paper-causal": {"B": 8, "H": 64, "S": 2048, "D": 128, "causal": True, "dtype": "fp16"},
}

TOLERANCE = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 1e-4}

EXPERTS = [("fmha_triton.py", "triton")]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# (device, dtype, head dim) on which the flash back-end refused to run: SDPA's own choice then.
_NO_FLASH: set[tuple[str, torch.dtype, int]] = set()


def make_inputs(shape: dict, seed: int, device: str) -> tuple:
    """(q, k, v, causal): three (B, H, S, D) tensors of standard normals and the causal flag.

    Drawn on `device` by its own seeded generator: a CPU draw of the device shapes costs seconds
    per call, and the gate draws five input sets per variant."""
    g = torch.Generator(device=device).manual_seed(seed)
    dt = _DTYPES[shape["dtype"]]
    dims = (shape["B"], shape["H"], shape["S"], shape["D"])
    q, k, v = (torch.randn(dims, generator=g, device=device).to(dtype=dt) for _ in range(3))
    return (q, k, v, bool(shape["causal"]))


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """SDPA with the flash back-end on a GPU; the fp32 math path on a CPU (small shapes only).

    Where the flash back-end cannot run (GPU, dtype or head dim it does not support), SDPA's
    own back-end choice computes it instead, with a warning (the gate records it as a flag)."""
    import torch.nn.functional as F

    if q.device.type == "cpu":
        out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        return out.to(q.dtype)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    key = (str(q.device), q.dtype, q.shape[-1])
    if key not in _NO_FLASH:
        try:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        except torch.cuda.OutOfMemoryError:
            raise
        except RuntimeError as exc:  # "No available kernel": decided once, not on every call
            _NO_FLASH.add(key)
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            warnings.warn(f"fallback: the flash back-end of SDPA is unavailable ({why}); SDPA's "
                          f"default back-end choice is the reference", stacklevel=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def flops(shape: dict) -> float:
    """Two matrix products of 2*S*S*D each per head; causal attention does half of them."""
    full = 4.0 * shape["B"] * shape["H"] * shape["S"] * shape["S"] * shape["D"]
    return full / 2.0 if shape["causal"] else full


def bytes_moved(shape: dict) -> float:
    """Q, K, V read once and O written once."""
    size = {"bf16": 2, "fp16": 2, "fp32": 4}[shape["dtype"]]
    return float(4 * size * shape["B"] * shape["H"] * shape["S"] * shape["D"])
