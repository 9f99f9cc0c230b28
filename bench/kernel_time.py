"""Where a call's time goes on the GPU: its kernels' own time, and its time without the host.

- `kernel_us(fn, calls, flush=...)`: the GPU time of the kernels one call of `fn` launches,
  by torch.profiler: the durations of every activity on a CUDA device (kernels, copies, sets),
  summed over `calls` calls and divided by `calls`; None where the profiler saw none.
  `flush=True` overwrites an L2-sized buffer (`FLUSH_BYTES`) before each call, as
  `triton.testing.do_bench` does, and leaves that write's kernel out of the sum; without it
  each call finds the L2 as the call before left it.
- `kernel_rows_ms(fn, calls, flush=...)`: the same profile broken down by event name
  (torch.profiler's `key_averages`), ms per call, largest first.
- `graph_ms(fn, calls, warmup, rep)`: `calls` calls of `fn` captured in one CUDA graph, the
  replay timed by `do_bench` (median) and divided by `calls`: the GPU's time for one call with
  the host's issue work gone. More calls per capture also hide the gap between replays.

Each function first calls `fn` untimed (once to profile, twice on a side stream before a
capture), so autotuners settle outside the measurement. Nothing here imports torch or triton
until it is called.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

FLUSH_BYTES = 256 * 1024 * 1024
# The flush is `bitwise_not_` over an int32 buffer; its kernel's name holds this, and the
# profile's sum leaves out the events that do.
FLUSH_KERNEL = "bitwise_not"


def _check_calls(calls: Any) -> int:
    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
        raise ValueError(f"calls must be a positive integer, not {calls!r}")
    return calls


def on_device(event: Any) -> bool:
    """Whether a profiler event ran on a CUDA device (a kernel, copy or set), not the host."""
    return "CUDA" in str(getattr(event, "device_type", ""))


def summed_us(events: Iterable[Any], calls: int, skip: str | None = None) -> float | None:
    """Per call, the summed durations (us) of the device events whose name does not hold
    `skip`; None where there are none or they last nothing."""
    _check_calls(calls)
    total = 0.0
    for event in events:
        if not on_device(event) or (skip and skip in event.name):
            continue
        total += float(event.time_range.elapsed_us())
    return total / calls if total else None


def rows_ms(averages: Iterable[Any], calls: int) -> dict[str, float]:
    """ms per call of each profiler average (`key_averages()` rows) with device time, keyed
    by its first 80 characters (a later row of the same 80 replaces an earlier one), largest
    first."""
    _check_calls(calls)
    rows: dict[str, float] = {}
    for average in averages:
        total = getattr(average, "device_time_total", None)
        if total is None:
            total = getattr(average, "cuda_time_total", 0.0)
        if total:
            rows[average.key[:80]] = total / calls / 1e3
    return dict(sorted(rows.items(), key=lambda kv: -kv[1]))


def profiled(fn: Callable[[], Any], calls: int, flush: bool = False) -> Any:
    """torch.profiler's record (CUDA activities) of `calls` calls of `fn`, after one untimed
    call; with `flush`, an L2-sized write before each call (its kernel is in the record)."""
    import torch  # noqa: PLC0415
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    _check_calls(calls)
    buffer = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda") if flush else None
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            if buffer is not None:
                buffer.bitwise_not_()
            fn()
        torch.cuda.synchronize()
    return prof


def kernel_us(fn: Callable[[], Any], calls: int, flush: bool = False) -> float | None:
    """GPU time (us) per call of the device activities `fn` launches (module docstring)."""
    prof = profiled(fn, calls, flush)
    return summed_us(prof.events(), calls, FLUSH_KERNEL if flush else None)


def kernel_rows_ms(fn: Callable[[], Any], calls: int, flush: bool = False) -> dict[str, float]:
    """ms per call of each profiled name (module docstring). With `flush` the flush's own
    row is among them."""
    return rows_ms(profiled(fn, calls, flush).key_averages(), calls)


def graph_ms(fn: Callable[[], Any], calls: int = 20, warmup: int = 25, rep: int = 100) -> float:
    """ms of one call replayed from a CUDA graph of `calls` calls, `do_bench(warmup, rep)`
    median over `calls`. Raises where `fn` cannot be captured (a host read, a sync)."""
    import torch  # noqa: PLC0415
    from triton.testing import do_bench  # noqa: PLC0415

    _check_calls(calls)
    side = torch.cuda.Stream()  # torch's rule: warm up on a side stream before a capture
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return do_bench(graph.replay, warmup=warmup, rep=rep, return_mode="median") / calls
