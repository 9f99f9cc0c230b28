"""Whether a candidate computed in lower precision than an fp32 reference.

The yardstick is measured on the case itself: the worker runs the reference once more on the
first seed's inputs with every fp32 tensor rounded to TF32 (10 mantissa bits, to nearest even),
and sends the relative-norm error of that run against the reference (`relative_error`). That is
the error a computation whose products see TF32 (or bf16 / fp16) operands shows on this case
and these values; fp32 arithmetic in another order stays well below it. A
candidate whose error on that seed reaches `LOWER_PRECISION_SHARE` of it computed in lower
precision than the reference (`lower_precision`): the verdict says so (a flag and
`Correctness.lower_precision`), and a speedup measured against the fp32 reference is then
partly precision, not skill. Only variants of dtype fp32 are probed.

Runs in the gate's worker (torch) for the probe; `lower_precision` is plain arithmetic.
"""
from __future__ import annotations

from typing import Any

LOWER_PRECISION_SHARE = 0.25
_CHUNK = 1 << 24  # elements per float64 partial sum (bounds the temporary)


def applies(inputs: tuple[Any, ...]) -> bool:
    """True when some input is an fp32 tensor (the probe has something to round)."""
    import torch  # noqa: PLC0415

    return any(isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in inputs)


def tf32_rounded(t: Any) -> Any:
    """A copy of an fp32 tensor rounded to TF32 (to nearest even at 10 mantissa bits; inf and
    NaN as they are)."""
    import torch  # noqa: PLC0415

    if _fused(t, t):  # an fp32 tensor on a GPU: one pass (`gate.fusedcompare`)
        from gate import fusedcompare  # noqa: PLC0415

        return fusedcompare.tf32_rounded(t)
    bits = t.contiguous().view(torch.int32)
    special = (bits & 0x7F800000) == 0x7F800000
    bias = ((bits >> 13) & 1) + 0xFFF
    rounded = (bits + bias) & -0x2000  # 0xFFFFE000 as an int32
    return torch.where(special, bits, rounded).view(torch.float32).view(t.shape)


def rounded_inputs(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """`inputs` with each fp32 tensor replaced by its TF32 rounding (the rest as they are)."""
    import torch  # noqa: PLC0415

    return tuple(tf32_rounded(t) if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t
                 for t in inputs)


def relative_error(out: Any, ref: Any) -> float:
    """The largest ||out - ref|| / ||ref|| over the floating tensors of two results (float64
    sums, a chunk at a time); 0.0 where no output floats, inf where `out` is not finite."""
    import torch  # noqa: PLC0415

    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    worst = 0.0
    for o, r in zip(outs, refs):
        if not (isinstance(o, torch.Tensor) and isinstance(r, torch.Tensor) and r.is_floating_point()):
            continue
        if _fused(o, r):  # an fp32 pair on a GPU: one pass (`gate.fusedcompare`)
            from gate import fusedcompare  # noqa: PLC0415

            worst = max(worst, fusedcompare.relative_error(o, r))
            continue
        o, r = o.reshape(-1), r.reshape(-1)
        num = den = 0.0
        for i in range(0, r.numel(), _CHUNK):
            rc = r[i:i + _CHUNK].double()
            num += float(((o[i:i + _CHUNK].double() - rc) ** 2).sum())
            den += float((rc ** 2).sum())
        err = (num ** 0.5) / max(den ** 0.5, 1e-300)
        worst = max(worst, err) if err == err else float("inf")
    return worst


def _fused(o: Any, r: Any) -> bool:
    from gate.heldcompare import fused_applies  # noqa: PLC0415

    return fused_applies(r) and o.dtype == r.dtype and o.shape == r.shape and o.device == r.device


def lower_precision(error: float, probe_error: float) -> bool:
    """A candidate's error on the probed seed reads as lower-precision arithmetic."""
    return probe_error > 0 and error == error and error >= LOWER_PRECISION_SHARE * probe_error
