"""First visits of the timed calls: a candidate that profits from input sets it has seen.

The device tier's timed calls rotate through the few input sets of a refill pool
(`gate.refill`), so a candidate that keeps answers on the device, keyed by its inputs' values,
and copies them out when a set comes back is timed mostly on its copies: every output is right,
only the work differs. Such a memo cannot be fast on a set it has not been called on. So the
timed calls hold back the pool's sets the candidate has not met yet and bring each of them in
at a place among the measured calls drawn at random when their number is known (`places`);
every such first visit is checked, and each measured call is timed alone (`bench_calls`: the
measurement of `triton.testing.do_bench`, kept per call). A run whose later calls on each set
it met there take less than `FACTOR` of its first call on that set (`memo_gain`) is refused.

An honest kernel takes as long on a set it has met as on one it has not (the L2 cache is
flushed between timed calls, the buffers are the same): a first visit's time is the kernel's
on that set (sets may differ in work: drawn integers, lengths), and `FACTOR` leaves room for
the noise of single calls. A memo that copies on more than half
of its revisits gains at most 1 / `FACTOR` (1 / `FACTOR_ONE` where a run times one first
visit) on the reported median before it is refused.
"""
from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from typing import Any

FACTOR = 0.6
"""Later calls' median below this share of the first call on the same set refuses the run,
where two sets or more are judged (each must show it for an honest kernel to be refused)."""
FACTOR_ONE = 0.5
"""The share where one first visit alone is timed (a single call's spike is the whole figure)."""
FLOOR_MS = 0.005
"""A gap smaller than this (ms) refuses nothing: one launch's jitter on a kernel of microseconds."""


def places(reps: int, sets: int, rng: random.Random) -> list[int]:
    """Distinct measured calls (0-based, of `reps`), one for each of `sets` held-back sets,
    in increasing order, among the first half of the calls (the first call where there is
    one alone), so that each set brought in has calls after its first to compare with: as
    many as there are places, at most. Drawn uniformly within that half."""
    span = max(1, reps // 2) if reps > 0 else 0
    return sorted(rng.sample(range(span), min(max(0, sets), span)))


def memo_gain(visits: Sequence[tuple[float, Sequence[float]]],
              again_ms: Sequence[float] | None = None, *, factor: float | None = None,
              floor_ms: float = FLOOR_MS) -> str | None:
    """Why a run is refused, or None. `visits`: per set the candidate met in the measured
    calls, the milliseconds of its first call on it and of its later calls on the same set.
    `again_ms`: where every set asks the same work (the same integers), the milliseconds of
    every measured call on a set met before it. Refused where

    - for every set with later calls, their median is below `factor` of its first call, or
    - the median of `again_ms` is below `factor` of the quickest first call;

    each by more than `floor_ms`. `factor` is `FACTOR`, or `FACTOR_ONE` where one first call
    alone is compared. The second rule holds a candidate that copies only on sets it has met
    many times (the calls on the sets met before the run) to the first calls too: a gain on
    the reported median needs quick calls in more than half of the measured calls."""
    judged = [(first, statistics.median(again)) for first, again in visits if again]
    if judged:
        f = factor if factor is not None else FACTOR if len(judged) > 1 else FACTOR_ONE
        if all(again < f * first and first - again > floor_ms for first, again in judged):
            figures = ", ".join(f"{again:.4f} ms against {first:.4f} ms" for first, again in judged)
            return (f"its timed calls on an input set it had been called on before are much "
                    f"quicker than its first call on that set ({figures}, median of the later "
                    f"calls against the first, for each of {len(judged)} set(s) met in the "
                    f"measured calls): its output follows from an earlier call's work, not "
                    f"from this call's")
    firsts = [first for first, _ in visits]
    if firsts and again_ms:
        f = factor if factor is not None else FACTOR if len(firsts) > 1 else FACTOR_ONE
        first, again = min(firsts), statistics.median(again_ms)
        if again < f * first and first - again > floor_ms:
            return (f"its timed calls on input sets it had been called on before took "
                    f"{again:.4f} ms (median of {len(again_ms)}), against {first:.4f} ms for the "
                    f"quickest of its {len(firsts)} first call(s) on a set of the same integers: "
                    f"its output follows from an earlier call's work, not from this call's")
    return None


def bench_calls(fn: Callable[[], Any], *, warmup: float, rep: float, device: Any,
                clear_cache: Callable[[Any], Any], make_cache: Callable[[], Any],
                on_reps: Callable[[int], Any] | None = None) -> list[float]:
    """The milliseconds of each measured call of `fn`, measured as `triton.testing.do_bench`
    measures them (its median is do_bench's with `return_mode="median"`): one call, five calls
    for an estimate, `warmup` ms of calls, then `rep` ms of calls, each after `clear_cache` and
    between two events of `device` (Triton's device interface); `make_cache()` gives the
    buffer `clear_cache` clears (made after the first call, as do_bench makes it). `on_reps(n)`
    is told the number of measured calls before the first of them."""
    fn()
    device.synchronize()
    cache = make_cache()
    start, end = device.Event(enable_timing=True), device.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        clear_cache(cache)
        fn()
    end.record()
    device.synchronize()
    estimate_ms = start.elapsed_time(end) / 5
    n_warmup = max(1, int(warmup / estimate_ms))
    n_repeat = max(1, int(rep / estimate_ms))
    starts = [device.Event(enable_timing=True) for _ in range(n_repeat)]
    ends = [device.Event(enable_timing=True) for _ in range(n_repeat)]
    for _ in range(n_warmup):
        fn()
    if on_reps is not None:
        on_reps(n_repeat)
    for i in range(n_repeat):
        clear_cache(cache)
        starts[i].record()
        fn()
        ends[i].record()
    device.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]
