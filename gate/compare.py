"""Output comparison, done in the gate's parent process with numpy (out of any candidate's reach).

The metric is the relative-norm error ||out - ref|| / ||ref|| in float64 per output tensor, the
largest over a call's outputs. NaN or inf where the reference is finite never passes. The
denominator is floored at the smallest normal float64, so a reference that is tiny but not zero
still rejects an all-zeros output (error 1.0), and an all-zeros reference accepts only zeros.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from gate.transport import to_numpy, to_torch
from gate.verdict import FailureKind

_TINY = float(np.finfo(np.float64).tiny)
_CHUNK = 1 << 16
_PER_THREAD = 1 << 22  # elements below which a thread is not worth starting
_THREADS = min(16, os.cpu_count() or 1)
LOW_PRECISION = ("fp16", "bf16")
_DEFAULT_LOW_TOLERANCE = 2e-2


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of comparing one call's outputs with the reference's."""

    ok: bool
    rel_err: float
    kind: FailureKind | None = None
    reason: str | None = None


def lower_precision_tolerance(case_dtype: str, tolerance: dict[str, float]) -> float | None:
    """Error up to which a miss of an fp32/fp64 case reads as a precision downgrade."""
    if case_dtype not in ("fp32", "fp64"):
        return None
    lows = [tolerance[d] for d in LOW_PRECISION if d in tolerance]
    return max(lows) * 2 if lows else _DEFAULT_LOW_TOLERANCE


def _structure(out: Sequence[tuple[Any, ...]], ref: Sequence[tuple[Any, ...]]) -> Outcome | None:
    if len(out) != len(ref):
        return Outcome(False, float("inf"), FailureKind.SHAPE_MISMATCH,
                       f"returned {len(out)} outputs, the reference returns {len(ref)}")
    for i, (o, r) in enumerate(zip(out, ref)):
        if o[0] == "other":
            return Outcome(False, float("inf"), FailureKind.BAD_OUTPUT,
                           f"output {i} is a {o[1]} ({o[2]}), not a plain torch.Tensor")
        if o[0] != r[0]:
            return Outcome(False, float("inf"), FailureKind.SHAPE_MISMATCH,
                           f"output {i} is a {o[0]}, the reference's is a {r[0]}")
        if o[0] == "tensor" and (o[1], tuple(o[2])) != (r[1], tuple(r[2])):
            return Outcome(False, float("inf"), FailureKind.SHAPE_MISMATCH,
                           f"output {i} is {o[1]}{list(o[2])}, the reference's is {r[1]}{list(r[2])}")
    return None


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / max(||ref||, tiny); NaN when out has NaN/inf where ref is finite.

    Computed in float64 a cache-sized chunk at a time (whole-array float64 temporaries of a
    4096x4096 output would cost seconds); large outputs are split over threads (numpy releases
    the GIL in these loops), which keeps a 134M-element output near a second's work.
    """
    o, r = out.ravel(), ref.ravel()
    threads = min(_THREADS, max(1, o.size // _PER_THREAD))
    if threads > 1:
        bounds = [o.size * i // threads for i in range(threads + 1)]
        with ThreadPoolExecutor(threads) as pool:
            parts = list(pool.map(lambda i: _sums(o[bounds[i]:bounds[i + 1]], r[bounds[i]:bounds[i + 1]]),
                                  range(threads)))
    else:
        parts = [_sums(o, r)]
    if any(p is _REF_NONFINITE for p in parts):  # rare: inf/NaN in the reference, handled exactly
        return _relative_error_nonfinite(o.astype(np.float64), r.astype(np.float64))
    if any(p is _OUT_NONFINITE for p in parts):  # poison or NaN where the reference is finite
        return float("nan")
    num = sum(p[0] for p in parts)  # type: ignore[index]
    den = sum(p[1] for p in parts)  # type: ignore[index]
    return float(np.sqrt(num) / max(np.sqrt(den), _TINY))


_REF_NONFINITE, _OUT_NONFINITE = object(), object()


def _sums(o: np.ndarray, r: np.ndarray) -> tuple[float, float] | object:
    """(sum of squared differences, sum of squared reference values) in float64, or a marker
    saying the reference (first) or the output holds a non-finite value."""
    num = den = 0.0
    with np.errstate(all="ignore"):
        for i in range(0, o.size, _CHUNK):
            oc = o[i:i + _CHUNK].astype(np.float64)
            rc = r[i:i + _CHUNK].astype(np.float64)
            if not np.isfinite(rc).all():
                return _REF_NONFINITE
            if not np.isfinite(oc).all():
                return _OUT_NONFINITE
            d = oc - rc
            num += float(np.dot(d, d))
            den += float(np.dot(rc, rc))
    return num, den


def _relative_error_nonfinite(o: np.ndarray, r: np.ndarray) -> float:
    with np.errstate(all="ignore"):
        return _nonfinite(o, r)


def _nonfinite(o: np.ndarray, r: np.ndarray) -> float:
    finite = np.isfinite(r)
    if (~np.isfinite(o) & finite).any() or np.isnan(o).any():
        return float("nan")
    # inf in the reference must be matched exactly (same sign); it is not part of the norm
    if not np.array_equal(o[~finite], r[~finite]):
        return float("inf")
    diff = np.where(finite, o - r, 0.0)
    den = float(np.linalg.norm(np.where(finite, r, 0.0)))
    return float(np.linalg.norm(diff) / max(den, _TINY))


def compare(out: Sequence[tuple[Any, ...]], ref: Sequence[tuple[Any, ...]], *, tolerance: float,
            low_tolerance: float | None = None,
            case_compare: Callable[..., float] | None = None,
            inputs: Sequence[tuple[Any, ...]] | None = None) -> Outcome:
    """Compare encoded outputs (see gate.transport) against the reference's.

    With `case_compare` (a case's own `compare(out, ref, inputs) -> float`), that error is used
    instead of the norm after the structure checks.
    """
    bad = _structure(out, ref)
    if bad is not None:
        return bad
    if case_compare is not None:
        decoded = [to_torch(x) for x in out]
        err = float(case_compare(tuple(decoded) if len(decoded) > 1 else decoded[0],
                                 tuple(to_torch(x) for x in ref),
                                 tuple(to_torch(x) for x in (inputs or ()))))
    else:
        err = 0.0
        for i, (o, r) in enumerate(zip(out, ref)):
            if o[0] == "value":
                if o[1] != r[1]:
                    return Outcome(False, float("inf"), FailureKind.WRONG_OUTPUT,
                                   f"output {i} is {o[1]!r}, the reference's is {r[1]!r}")
                continue
            e = relative_error(to_numpy(o), to_numpy(r))
            err = e if e != e else max(err, e)
            if err != err:
                break
    if err != err:
        return Outcome(False, err, FailureKind.NAN_OUTPUT,
                       "output holds NaN/inf where the reference is finite (unwritten or poisoned)")
    if err <= tolerance:
        return Outcome(True, err)
    if low_tolerance is not None and err <= low_tolerance:
        return Outcome(False, err, FailureKind.PRECISION_DOWNGRADE,
                       f"relative error {err:.3g} exceeds the tolerance {tolerance:g} but is typical "
                       f"of fp16/bf16/tf32 arithmetic: computed in lower precision than the case")
    return Outcome(False, err, FailureKind.WRONG_OUTPUT,
                   f"relative error {err:.3g} exceeds the tolerance {tolerance:g}")


def same_payload(a: Sequence[tuple[Any, ...]], b: Sequence[tuple[Any, ...]]) -> bool:
    """True when two encoded results are bit-identical (used to spot input-independent cases)."""
    return len(a) == len(b) and all(x == y for x, y in zip(a, b))


def all_zero(items: Sequence[tuple[Any, ...]]) -> bool:
    """True when every tensor of an encoded result is all zeros."""
    tensors = [to_numpy(x) for x in items if x[0] == "tensor"]
    return bool(tensors) and all(not np.any(t) for t in tensors)
