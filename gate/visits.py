"""First visits of the timed calls: a candidate that profits from input sets it has seen.

The device tier's timed calls rotate through the few input sets of a refill pool
(`gate.refill`), so a candidate that keeps answers on the device, keyed by its inputs' values,
and copies them out when a set comes back is timed mostly on its copies: every output is right,
only the work differs. Such a memo cannot be fast on a set it has not been called on. So the
timed calls hold back the pool's sets the candidate has not met yet and bring each of them in
at a place among the measured calls drawn at random when their number is known (`places`);
every such first visit is checked, and each measured call is timed alone (`bench_calls`: the
measurement of `triton.testing.do_bench`, kept per call). A gate whose later calls on each set
it met there take less than `FACTOR` of its first call on that set (`memo_gain`) is refused.

An honest kernel takes as long on a set it has met as on one it has not (the L2 cache is
flushed between timed calls, the buffers are the same): a first visit's time is the kernel's
on that set (sets may differ in work: drawn integers, lengths), and `FACTOR` leaves room for
the noise of single calls. One call alone can still be slow for reasons of its own: a kernel
whose run() waits for the host (`.tolist()`, `.item()`) has the host's jitter inside its
timed call, and one such first call took twice its set's later calls on an H200. So the
worker judges the untraced run's first visits, and those of both timed runs together (each
against the later calls of its own run), and every one judged must be slow (`MIN_VISITS` at
least): a memo is slow on each, an honest kernel's spike is one call. Where one first visit
alone is judged (a lean plan's untraced run, a pool of two sets), it must be slower by
1 / `FACTOR_ONE`. A memo that copies on more than half of its revisits gains at most
1 / `FACTOR` (1 / `FACTOR_ONE` with one first visit) on the reported median before it is
refused.

Where the kernel log holds the GPU's timeline, the figures judged are each call's GPU time
(`call_gpu_ms`), not its events': a memo's first visit runs longer work on the GPU, while a
host stall inside an honest call leaves the GPU idle, with the same kernels; one first visit
alone is then judged by `FACTOR_ONE_GPU`. A memo that computes a first visit's answer on the
host, the GPU idle meanwhile, is judged on its GPU work alone there (a copy) and passes this
judgement, where the events would show its first visits slow.
"""
from __future__ import annotations

import contextlib
import gc
import random
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

FACTOR = 0.6
"""A first visit is slow where its set's later calls (or the calls on sets met before) take
less than this share of it."""
MIN_VISITS = 2
"""First visits that must all be slow to refuse (`FACTOR`): one slow call may be jitter."""
FACTOR_ONE = 0.3
"""The share where one first visit alone is judged (a lean plan's untraced run): a single
call's spike is the whole figure, so only a gap well beyond jitter refuses (a memo of the
device copies in a sixth of the time it computes: 0.071 against 0.433 ms on an H200)."""
FACTOR_ONE_GPU = 0.5
"""`FACTOR_ONE` where the figures are the GPU time of the calls' own activities
(`call_gpu_ms`): a stall of the host inside the call leaves the GPU idle and adds nothing there,
so the single call's spike that `FACTOR_ONE` leaves room for is not in the figure."""
FLOOR_MS = 0.005
"""A gap smaller than this (ms) refuses nothing: one launch's jitter on a kernel of microseconds."""
FIRST_LEAD_US = 2000.0
"""The GPU lead (`worker._Runner.gpu_lead`) before a call that brings in a set, at least (us):
the usual lead covers a few times the host's time to issue one call (100 us at the least), so
a host that stalls longer than that inside one call (the scheduler, a driver lock, another
process's start-up) leaves the GPU idle between the call's events. A later call's stall moves
the median of its set's calls not at all; a first visit is one call, judged alone. A longer
lead there costs a few milliseconds per run and holds nothing of the GPU's own work out of
the interval (the sleep ends before the start event)."""


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside (as it was after): a collection that starts
    inside a timed call (every few hundred calls, as the calls' bookkeeping grows) is host time
    the GPU may wait through between the call's events, in one call of hundreds, at random."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass(frozen=True, slots=True)
class FirstVisit:
    """One measured call on a set the candidate had not been called on, and what the same
    timed run measured after it."""

    first_ms: float
    later_ms: tuple[float, ...] = ()
    """The run's later calls on the same set."""
    again_ms: float | None = None
    """Where every set of the pool asks the same work (the same integers): the median of the
    run's calls on sets met before each (None: not compared, or no such call)."""
    gpu: bool = False
    """Whether the figures are the GPU time of each call's activities (`call_gpu_ms`), not the
    time between the call's events."""


def places(reps: int, sets: int, rng: random.Random) -> list[int]:
    """Distinct measured calls (0-based, of `reps`), one for each of `sets` held-back sets,
    in increasing order, among the first half of the calls (the first call where there is
    one alone), so that each set brought in has calls after its first to compare with: as
    many as there are places, at most. Drawn uniformly within that half."""
    span = max(1, reps // 2) if reps > 0 else 0
    return sorted(rng.sample(range(span), min(max(0, sets), span)))


def _slow(pairs: Sequence[tuple[float, float]], floor_ms: float, gpu: bool) -> bool:
    """Whether each (first, later) pair shows a slow first call: `FACTOR`, or `FACTOR_ONE`
    (`FACTOR_ONE_GPU` for figures of GPU time) for one pair alone; by more than `floor_ms` each."""
    factor = FACTOR if len(pairs) >= MIN_VISITS else (FACTOR_ONE_GPU if gpu else FACTOR_ONE)
    return bool(pairs) and all(later < factor * first and first - later > floor_ms
                               for first, later in pairs)


def memo_gain(visits: Sequence[FirstVisit], *, floor_ms: float = FLOOR_MS) -> str | None:
    """Why a variant's timed runs are refused, or None, from first visits (`FirstVisit`: one
    run's, or both runs' together, each against its own run's calls). Refused where every first visit that has later calls on its set is
    slow against their median, or every one compared with the calls on sets met before is slow
    against that median (`_slow`: all of them, `MIN_VISITS` or one with `FACTOR_ONE`). The
    second rule holds a candidate that copies only on sets it has met many times (the sets met
    before the runs) to the first calls too: a gain on the reported median needs quick calls
    in more than half of the measured calls."""
    on_set = [(v.first_ms, statistics.median(v.later_ms)) for v in visits if v.later_ms]
    met_before = [(v.first_ms, v.again_ms) for v in visits if v.again_ms is not None]
    rules = ((on_set, "an input set it had been called on before are much quicker than its "
                      "first call on that set", "the later calls on the set"),
             (met_before, "input sets it had been called on before are much quicker than each "
                          "first call on a set of the same integers",
              "the calls on sets met before in the same run"))
    gpu = bool(visits) and all(v.gpu for v in visits)
    for pairs, what, against in rules:
        if _slow(pairs, floor_ms, gpu):
            figures = ", ".join(f"{later:.4f} ms against {first:.4f} ms" for first, later in pairs)
            measure = "GPU time of each call's activities" if gpu else "time between each call's events"
            return (f"its timed calls on {what} ({figures}, {measure}: the median of {against} against "
                    f"the first call, for each of {len(pairs)} first call(s) in the measured "
                    f"calls): its output follows from an earlier call's work, not from this "
                    f"call's")
    return None


def call_gpu_ms(spans: Sequence[tuple[int, int, str]] | None, marker: frozenset[str],
                marks: int, calls: int) -> list[float] | None:
    """Per measured call (the last `calls` of a timed run), the milliseconds of GPU time of the
    device activities (kernels, copies, fills: any stream, launched from any thread) that
    started on the GPU's timeline after the call's lead started and before the mark issued
    right after the call, from `spans` ((start ns, end ns, name) each, the kernel log's).

    The lead (`worker._Runner.gpu_lead`) marks the timeline around every timed call with a
    kernel named in `marker`: one (a short one) before each refill and L2 flush, one (the
    lead) after them, right before the call's start event, and one when the timing ends; so
    the call's activities lie between its lead and the next mark, the gate's own refills,
    copies and flushes outside. A host stall inside the call leaves the GPU idle there and
    adds nothing to the figure; work the call runs on the GPU adds its time, wherever it was
    launched from. None (judge the events) where a figure cannot be told call by call: no
    spans, not `marks` marks on the timeline (the candidate launched a kernel of that name,
    or the profiler dropped one), fewer than two per call, or a call with no activity."""
    if spans is None or not marker or calls <= 0:
        return None
    ordered = sorted(spans)
    at = [k for k, (_, _, name) in enumerate(ordered) if name in marker]
    if len(at) != marks or marks < 2 * calls + 1:
        return None
    figures: list[float] = []
    for k in range(calls):
        lead = at[len(at) - 2 * (calls - k)]
        close = at[len(at) - 2 * (calls - k) + 1]
        inside = [end - start for start, end, _ in ordered[lead + 1:close]]
        if not inside:
            return None
        figures.append(sum(inside) / 1e6)
    return figures


def slow_calls(measured: Sequence[tuple[float, int, bool]]) -> tuple[int, int, float]:
    """Of a run's measured calls ((ms, set, whether a first visit) each), those that are no
    first visit: how many took more than their set's median of them over `FACTOR` (as slow as
    a first visit must be to count as slow), how many there are, and the slowest (ms). A
    measure of how often one call alone is slow (`KLINEAGE_GATE_DEBUG`): judges nothing."""
    by_set: dict[int, list[float]] = {}
    for ms, index, first in measured:
        if not first:
            by_set.setdefault(index, []).append(ms)
    medians = {index: statistics.median(times) for index, times in by_set.items()}
    later = [(ms, index) for ms, index, first in measured if not first]
    slow = sum(ms * FACTOR > medians[index] for ms, index in later)
    return slow, len(later), max((ms for ms, _ in later), default=0.0)


def bench_calls(fn: Callable[[], Any], *, warmup: float, rep: float, device: Any,
                clear_cache: Callable[[Any], Any], make_cache: Callable[[], Any],
                on_reps: Callable[[int], Any] | None = None) -> list[float]:
    """The milliseconds of each measured call of `fn`, measured as `triton.testing.do_bench`
    measures them (its median is do_bench's with `return_mode="median"`): one call, five calls
    for an estimate, `warmup` ms of calls, then `rep` ms of calls, each after `clear_cache` and
    between two events of `device` (Triton's device interface); `make_cache()` gives the
    buffer `clear_cache` clears (made after the first call, as do_bench makes it). `on_reps(n)`
    is told the number of measured calls before the first of them. Python's garbage collector
    is paused from the warm-up calls to the last measured call (`collector_paused`)."""
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
    with collector_paused():
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
