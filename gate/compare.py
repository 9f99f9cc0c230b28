"""Output comparison, done in the gate's parent process with numpy (out of any candidate's reach),
and the parent's judgement of figures the worker computed on its device against a held
reference (`held_outcome`, checked against the parent's own sample: `sample_contradicts`).

The metric is the relative-norm error ||out - ref|| / ||ref|| in float64 per output tensor, the
largest over a call's outputs. NaN or inf where the reference is finite never passes. The
denominator is floored at the smallest normal float64, so a reference that is tiny but not zero
still rejects an all-zeros output (error 1.0), and an all-zeros reference accepts only zeros.

A miss of an fp32/fp64 case whose error lies within the lower-precision band reads as a
precision downgrade only where the error is spread the way rounding spreads it: each element
off by a small part of its own magnitude. Where most of the squared error sits in elements off
by more than `WRONG_ELEMENT` of their magnitude (`CONCENTRATED`: an element left unwritten, a
stray value), a few elements are wrong and the output is `wrong_output`, whatever its norm.
"""
from __future__ import annotations

import math
import os
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from gate.transport import raw_numpy, to_torch
from gate.verdict import FailureKind

_TINY = float(np.finfo(np.float64).tiny)
_CHUNK = 1 << 16
_PER_THREAD = 1 << 22  # elements below which a thread is not worth starting
_THREADS = min(16, os.cpu_count() or 1)
LOW_PRECISION = ("fp16", "bf16")
_DEFAULT_LOW_TOLERANCE = 2e-2
WRONG_ELEMENT = 0.5
"""An element whose difference from the reference exceeds this share of the reference's
magnitude is wrong, not rounded: lower precision moves an element by a few units of its last
fp16/bf16 place (under 1%), except where the reference is near zero, which carries little of
the norm."""
CONCENTRATED = 0.5
"""The share of an output's squared error beyond which, carried by wrong elements
(`WRONG_ELEMENT`), an error within the lower-precision band is a wrong output. Rounding noise
of relative size e puts about 2.5 e of its square there (the elements whose reference is within
2|d| of zero): under 5% in the band; an element left unwritten puts all of its own."""


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
    return _relative_error(out.ravel(), ref.ravel(), bf16=False)


def _relative_error(o: np.ndarray, r: np.ndarray, *, bf16: bool) -> float:
    """`relative_error` of flat arrays; with `bf16`, both hold bfloat16 bits (uint16), widened
    to float32 a chunk at a time (never the whole array at once)."""
    threads = min(_THREADS, max(1, o.size // _PER_THREAD))
    if threads > 1:
        bounds = [o.size * i // threads for i in range(threads + 1)]
        with ThreadPoolExecutor(threads) as pool:
            parts = list(pool.map(lambda i: _sums(o[bounds[i]:bounds[i + 1]],
                                                  r[bounds[i]:bounds[i + 1]], bf16),
                                  range(threads)))
    else:
        parts = [_sums(o, r, bf16)]
    if any(p is _REF_NONFINITE for p in parts):  # rare: inf/NaN in the reference, handled exactly
        return _relative_error_nonfinite(_widen(o, bf16).astype(np.float64),
                                         _widen(r, bf16).astype(np.float64))
    if any(p is _OUT_NONFINITE for p in parts):  # poison or NaN where the reference is finite
        return float("nan")
    num = sum(p[0] for p in parts)  # type: ignore[index]
    den = sum(p[1] for p in parts)  # type: ignore[index]
    return float(np.sqrt(num) / max(np.sqrt(den), _TINY))


_REF_NONFINITE, _OUT_NONFINITE = object(), object()


def _widen(a: np.ndarray, bf16: bool) -> np.ndarray:
    """`a` itself, or its bfloat16 bits (uint16) widened exactly to float32."""
    return (a.astype(np.uint32) << 16).view(np.float32) if bf16 else a


def _sums(o: np.ndarray, r: np.ndarray, bf16: bool = False) -> tuple[float, float] | object:
    """(sum of squared differences, sum of squared reference values) in float64, or a marker
    saying the reference (first) or the output holds a non-finite value.

    Finiteness is read off the two sums: both are finite only when every element of the chunk
    is (an inf or NaN on either side makes the difference or the reference's square inf or
    NaN); only a chunk whose sums are not finite is scanned element by element, which also
    tells a float64 overflow (finite values, kept as the inf sum it is) from a non-finite one.

    The sums are einsum loops, not BLAS dots: a threaded BLAS starts its own pool of one thread
    per core for each chunk's dot, and several gates on a many-core host then oversubscribe it
    (a gemm gate's comparison took 64-78 s on a 64-core host running four queues of gates)."""
    num = den = 0.0
    n = o.size
    od = np.empty(min(n, _CHUNK), dtype=np.float64)
    rd = np.empty_like(od)
    with np.errstate(all="ignore"):
        for i in range(0, n, _CHUNK):
            m = min(_CHUNK, n - i)
            oc, rc = od[:m], rd[:m]
            oc[...] = _widen(o[i:i + m], bf16)
            rc[...] = _widen(r[i:i + m], bf16)
            np.subtract(oc, rc, out=oc)
            part_num = float(np.einsum("i,i->", oc, oc))
            part_den = float(np.einsum("i,i->", rc, rc))
            if not (math.isfinite(part_num) and math.isfinite(part_den)):
                if not np.isfinite(rc).all():
                    return _REF_NONFINITE
                if not np.isfinite(_widen(o[i:i + m], bf16)).all():
                    return _OUT_NONFINITE
            num += part_num
            den += part_den
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
            inputs: Sequence[tuple[Any, ...]] | None = None,
            allclose: tuple[float, float] | None = None) -> Outcome:
    """Compare encoded outputs (see gate.transport) against the reference's.

    With `case_compare` (a case's own `compare(out, ref, inputs) -> float`), that error is used
    instead of the norm after the structure checks. With `allclose` (atol, rtol), the outputs
    pass when every element of every tensor output is close (`allclose_misses`), in place of
    `tolerance`; the relative-norm error is still what the outcome reports.
    """
    bad = _structure(out, ref)
    if bad is not None:
        return bad
    errs: list[float] = []  # per tensor output, in output order
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
            e = _relative_error(raw_numpy(o).ravel(), raw_numpy(r).ravel(), bf16=o[1] == "bfloat16")
            errs.append(e)
            err = e if e != e else max(err, e)
            if err != err:
                break
    judged = allclose if case_compare is None and err == err else None
    misses: list[int] = []
    if judged is not None:
        atol, rtol = judged
        misses = [allclose_misses(raw_numpy(o).ravel(), raw_numpy(r).ravel(), atol, rtol,
                                  bf16=o[1] == "bfloat16") if o[0] == "tensor" else 0
                  for o, r in zip(out, ref)]
    # (a case's own error leaves `errs` empty: nothing is read per element)
    failing = _failing(out, errs, misses, tolerance, judged)
    tensors = [(o, r) for o, r in zip(out, ref) if o[0] == "tensor"]

    def gross() -> float:
        # asked for only where the error is in the lower-precision band: a second pass, on a miss
        return max((gross_share(raw_numpy(o).ravel(), raw_numpy(r).ravel(), bf16=o[1] == "bfloat16")
                    for (o, r), f in zip(tensors, failing) if f), default=0.0)

    return _decide(out, err, tolerance, low_tolerance, judged, misses, gross=gross)


def _failing(out: Sequence[tuple[Any, ...]], errs: Sequence[float], misses: Sequence[int],
             tolerance: float, allclose: tuple[float, float] | None) -> list[bool]:
    """Per tensor output (in output order), whether it misses: with `allclose`, where it has
    elements not close (`misses`, per output), else where its error (`errs`, per tensor
    output) exceeds `tolerance`."""
    if allclose is not None:
        return [m > 0 for m, o in zip(misses, out) if o[0] == "tensor"]
    return [e > tolerance for e in errs]


def gross_share(o: np.ndarray, r: np.ndarray, *, bf16: bool = False) -> float:
    """The share of ||o - r||^2 carried by elements off by more than `WRONG_ELEMENT` of their
    reference's magnitude (flat arrays; float64, a chunk at a time; places where either side
    is not finite count for nothing); 0.0 where o equals r."""
    num = gross = 0.0
    with np.errstate(all="ignore"):
        for oc, rc in _float64_chunks(o, r, bf16):
            np.subtract(oc, rc, out=oc)
            oc[~np.isfinite(oc)] = 0.0
            num += float(np.einsum("i,i->", oc, oc))
            wrong = np.abs(oc) > WRONG_ELEMENT * np.abs(rc)
            gross += float(np.einsum("i,i->", oc[wrong], oc[wrong]))
    return gross / num if num > 0 else 0.0


def _no_share() -> float:
    return 0.0


def _decide(out: Sequence[tuple[Any, ...]], err: float, tolerance: float,
            low_tolerance: float | None, allclose: tuple[float, float] | None,
            misses: Sequence[int], where: str = "",
            gross: Callable[[], float] = _no_share) -> Outcome:
    """The outcome of a call whose error is `err` (and, with `allclose`, whose tensor outputs
    have `misses` elements not close, in output order). `gross`: the largest `gross_share` of
    a failing tensor output, asked for only where `err` is in the lower-precision band."""
    if err != err:
        return Outcome(False, err, FailureKind.NAN_OUTPUT,
                       "output holds NaN/inf where the reference is finite (unwritten or "
                       "poisoned)" + where)
    if allclose is not None:
        return _judge_allclose(out, err, allclose, low_tolerance, misses, where, gross)
    if err <= tolerance:
        return Outcome(True, err)
    wrong = f"relative error {err:.3g} exceeds the tolerance {tolerance:g}{where}"
    if low_tolerance is not None and err <= low_tolerance:
        return _in_band(err, gross(), wrong,
                        f"relative error {err:.3g} exceeds the tolerance {tolerance:g} but is "
                        f"typical of fp16/bf16/tf32 arithmetic: computed in lower precision than "
                        f"the case")
    return Outcome(False, err, FailureKind.WRONG_OUTPUT, wrong)


def _in_band(err: float, share: float, wrong: str, lower: str) -> Outcome:
    """A miss within the lower-precision band: a precision downgrade (`lower`) where the error
    is spread over the elements as rounding spreads it, a wrong output (`wrong`) where wrong
    elements carry it (`share`: their part of the squared error, `gross_share`)."""
    if share > CONCENTRATED:
        return Outcome(False, err, FailureKind.WRONG_OUTPUT,
                       f"{wrong}; {share:.0%} of the squared error is in elements off by more "
                       f"than {WRONG_ELEMENT:g} of their own magnitude: wrong elements, not "
                       f"lower precision")
    return Outcome(False, err, FailureKind.PRECISION_DOWNGRADE, lower)


def _judge_allclose(out: Sequence[tuple[Any, ...]], err: float, allclose: tuple[float, float],
                    low_tolerance: float | None, misses: Sequence[int], where: str = "",
                    gross: Callable[[], float] = _no_share) -> Outcome:
    atol, rtol = allclose
    for i, (o, missed) in enumerate(zip(out, misses)):
        if o[0] == "tensor" and missed:
            what = (f"output {i}: {missed} of {math.prod(o[2])} elements differ by more than "
                    f"atol {atol:g} + rtol {rtol:g} x |out| (relative error {err:.3g}){where}")
            if low_tolerance is not None and err <= low_tolerance:
                return _in_band(err, gross(), what,
                                f"{what}, typical of fp16/bf16/tf32 arithmetic: computed in lower "
                                f"precision than the case")
            return Outcome(False, err, FailureKind.WRONG_OUTPUT, what)
    return Outcome(True, err)


def held_outcome(out: Sequence[tuple[Any, ...]], ref: Sequence[tuple[Any, ...]],
                 figures: Mapping[str, Any], *, tolerance: float,
                 low_tolerance: float | None = None,
                 allclose: tuple[float, float] | None = None) -> Outcome:
    """`compare` for an output the worker compared on its device against a held reference
    (`gate.heldcompare.judge`): `out` and `ref` are headers (items without bytes), `figures`
    the worker's error, allclose misses per tensor output and the place of the worst element,
    and per tensor output its error (`errs`) and `gross_share` (`gross`): figures without
    these two read as an error spread over the elements."""
    bad = _structure(out, ref)
    if bad is not None:
        return bad
    for i, (o, r) in enumerate(zip(out, ref)):
        if o[0] == "value" and o[1] != r[1]:
            return Outcome(False, float("inf"), FailureKind.WRONG_OUTPUT,
                           f"output {i} is {o[1]!r}, the reference's is {r[1]!r}")
    err = float(figures["err"])
    at = figures.get("at")
    where = (f" (output {at[0]}, element {at[1]}: {at[2]:.6g}, the reference's {at[3]:.6g})"
             if at else "")
    misses: list[int] = []
    if allclose is not None:
        counts = iter(int(m) for m in figures.get("misses", ()))
        misses = [next(counts, 0) if o[0] == "tensor" else 0 for o in out]
    failing = _failing(out, [float(e) for e in figures.get("errs", ())], misses, tolerance,
                       allclose)
    shares = [float(g) for g in figures.get("gross", ())]
    return _decide(out, err, tolerance, low_tolerance, allclose, misses, where,
                   gross=lambda: max((g for g, f in zip(shares, failing) if f), default=0.0))


SAMPLE_ASKED = 256
"""Places of each tensor output the parent asks the worker for, with each held comparison
(drawn among the places of its sample of the reference, `gate.heldcompare.SAMPLE_PLACES`)."""


def new_key() -> int:
    """A fresh 63-bit key for a held reference, from the operating system's random source."""
    return secrets.randbits(63)


SAMPLE_SLACK = 10.0
"""A sample's relative error may exceed the error the worker reported (or the tolerance) by
this factor before the two are taken to contradict each other: a few hundred places of an
honest output scatter around its error, a wrong output's sample is off by orders of magnitude."""


def sample_contradicts(outcome: Outcome, samples: Sequence[Any], asked: Sequence[Any],
                       values: Sequence[Any], *, tolerance: float,
                       allclose: tuple[float, float] | None = None) -> str | None:
    """Why the output's values at the `asked` places (indices into each tensor output's
    `samples` of the reference, kept by the parent) contradict a passing `outcome` the worker's
    figures gave, or None. Contradictions: the sample holds NaN / inf where the reference is
    finite, an element KernelBench's allclose rejects, or a relative error beyond `SAMPLE_SLACK`
    times the reported one (or the tolerance)."""
    if not outcome.ok:
        return None
    num = den = 0.0
    for i, (sample, picks, got) in enumerate(zip(samples, asked, values)):
        if not sample or not picks:
            continue
        if got is None or len(got) != len(picks):
            return f"output {i}: {len(got or ())} sampled values for {len(picks)} places asked"
        ref = np.array([sample[1][k] for k in picks], dtype=np.float64)
        out = np.array(got, dtype=np.float64)
        with np.errstate(all="ignore"):
            if (np.isfinite(ref) & ~np.isfinite(out)).any() or np.isnan(out).any():
                return f"output {i}: the sample holds NaN/inf where the reference is finite"
            if allclose is not None:
                atol, rtol = allclose
                close = (np.abs(ref - out) <= atol + rtol * np.abs(out)) | (out == ref)
                if not close.all():
                    j = int(np.argmin(close))
                    return (f"output {i}: element {sample[0][picks[j]]} is {out[j]:.6g}, the "
                            f"reference's {ref[j]:.6g}, beyond KernelBench's allclose")
            finite = np.isfinite(ref)
            num += float(np.sum((out[finite] - ref[finite]) ** 2))
            den += float(np.sum(ref[finite] ** 2))
    err = math.sqrt(num) / max(math.sqrt(den), _TINY)
    bound = SAMPLE_SLACK * max(outcome.rel_err, tolerance)
    if allclose is None and err > bound:
        return f"the sample's relative error {err:.3g} is beyond {bound:.3g}"
    return None


def allclose_misses(o: np.ndarray, r: np.ndarray, atol: float, rtol: float, *, bf16: bool = False) -> int:
    """Elements of flat `o` (the candidate's) not close to flat `r` (the reference's) by the test
    of `torch.allclose(r, o, atol, rtol)`, as KernelBench calls it: |r - o| <= atol + rtol * |o|,
    equal infinities close, NaN never (float64, a chunk at a time; with `bf16` both hold
    bfloat16 bits)."""
    misses = 0
    with np.errstate(all="ignore"):
        for oc, rc in _float64_chunks(o, r, bf16):
            close = np.abs(rc - oc) <= atol + rtol * np.abs(oc)
            close |= oc == rc
            misses += oc.size - int(np.count_nonzero(close))
    return misses


def _float64_chunks(o: np.ndarray, r: np.ndarray, bf16: bool) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Flat `o` and `r` a cache-sized chunk at a time, widened to float64 (with `bf16`, from
    bfloat16 bits), in two buffers the next chunk overwrites (a caller may write into them)."""
    od = np.empty(min(o.size, _CHUNK), dtype=np.float64)
    rd = np.empty_like(od)
    for i in range(0, o.size, _CHUNK):
        m = min(_CHUNK, o.size - i)
        oc, rc = od[:m], rd[:m]
        oc[...] = _widen(o[i:i + m], bf16)
        rc[...] = _widen(r[i:i + m], bf16)
        yield oc, rc


def same_payload(a: Sequence[tuple[Any, ...]], b: Sequence[tuple[Any, ...]]) -> bool:
    """True when two encoded results are bit-identical (used to spot input-independent cases)."""
    return len(a) == len(b) and all(x == y for x, y in zip(a, b))


def all_zero(items: Sequence[tuple[Any, ...]]) -> bool:
    """True when every tensor of an encoded result is all zeros (-0.0 included)."""
    tensors = [x for x in items if x[0] == "tensor"]
    return bool(tensors) and not any(_any_nonzero(x) for x in tensors)


def _any_nonzero(item: tuple[Any, ...]) -> bool:
    raw = raw_numpy(item)
    if item[1] == "bfloat16":  # its bits, read without widening: zero once the sign is shifted out
        return any(np.any(raw.ravel()[i:i + _CHUNK] << 1) for i in range(0, raw.size, _CHUNK))
    return bool(np.any(raw))
