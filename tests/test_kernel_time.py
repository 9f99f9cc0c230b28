"""bench/kernel_time.py: the profiler's sum and per-name rows from torch's own event objects
(built by hand, no GPU), the argument checks, and on a GPU the figures the four bench scripts
took before they shared it (marked `gpu`)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench import kernel_time as kt  # noqa: E402


def _event(name: str, start: float, end: float, device: DeviceType, eid: int = 0) -> FunctionEvent:
    return FunctionEvent(id=eid, name=name, thread=0, start_us=start, end_us=end, stack=[],
                         device_type=device, use_device="cuda")


def _profile() -> EventList:
    """What a profile of two calls looks like: per call one launch on the host (its kernel
    attached, as torch does when it links them) and a kernel; a flush kernel before each."""
    events = []
    for call in range(2):
        t = 100.0 * call
        launch = _event("cudaLaunchKernel", t, t + 1.0, DeviceType.CPU, eid=10 + call)
        launch.append_kernel("gemm_kernel", 0, 6.0)
        events += [launch,
                   _event("vectorized_elementwise_kernel<bitwise_not_kernel_cuda>", t + 1, t + 41,
                          DeviceType.CUDA, eid=20 + call),
                   _event("gemm_kernel", t + 42, t + 48, DeviceType.CUDA, eid=30 + call),
                   _event("Memset (Device)", t + 48, t + 48.5, DeviceType.CUDA, eid=40 + call)]
    out = EventList(events, use_device="cuda")
    out._build_tree()
    return out


def test_the_sum_takes_device_activities_per_call_and_leaves_the_host_and_the_skipped_out() -> None:
    events = _profile()
    assert kt.summed_us(events, 2) == pytest.approx((40.0 + 6.0 + 0.5) * 2 / 2)
    assert kt.summed_us(events, 2, skip=kt.FLUSH_KERNEL) == pytest.approx(6.5)
    assert kt.summed_us(events, 4, skip=kt.FLUSH_KERNEL) == pytest.approx(6.5 / 2)
    # each device event's own `device_time` (what ab_probe summed) is the interval summed here
    device = [e for e in events if e.device_type.name == "CUDA"]
    assert kt.summed_us(events, 2) == sum(e.device_time for e in device) / 2
    assert [kt.on_device(e) for e in events[:4]] == [False, True, True, True]


def test_no_device_time_is_none_not_zero() -> None:
    host_only = [_event("cudaLaunchKernel", 0.0, 3.0, DeviceType.CPU)]
    assert kt.summed_us(host_only, 1) is None
    assert kt.summed_us([], 3) is None
    flush_only = [_event("bitwise_not_kernel", 0.0, 9.0, DeviceType.CUDA)]
    assert kt.summed_us(flush_only, 1, skip=kt.FLUSH_KERNEL) is None
    assert kt.summed_us(flush_only, 1) == 9.0


def test_rows_are_ms_per_call_by_name_largest_first_with_the_host_rows_torch_gives_time() -> None:
    rows = kt.rows_ms(_profile().key_averages(), 2)
    assert set(rows) == {"vectorized_elementwise_kernel<bitwise_not_kernel_cuda>", "gemm_kernel",
                         "cudaLaunchKernel", "Memset (Device)"}
    assert list(rows.values()) == sorted(rows.values(), reverse=True)
    assert rows["vectorized_elementwise_kernel<bitwise_not_kernel_cuda>"] == pytest.approx(0.04)
    assert rows["gemm_kernel"] == pytest.approx(6.0 / 1e3)
    assert rows["cudaLaunchKernel"] == pytest.approx(6.0 / 1e3)  # the kernel torch attached to it
    assert rows["Memset (Device)"] == pytest.approx(0.5 / 1e3)


def test_rows_fall_back_to_cuda_time_cut_names_and_drop_rows_without_time() -> None:
    class Row:
        def __init__(self, key: str, **times: float) -> None:
            self.key = key
            self.__dict__.update(times)

    long = "k" * 100
    rows = kt.rows_ms([Row("a", device_time_total=None, cuda_time_total=3000.0),
                       Row(long, device_time_total=1000.0), Row("idle", device_time_total=0.0),
                       Row("old")], 1)
    assert rows == {"a": 3.0, long[:80]: 1.0}


@pytest.mark.parametrize("calls", [0, -3, 2.0, True, None, "20"])
def test_a_bad_call_count_is_refused_before_anything_runs(calls: object) -> None:
    ran = []
    for measure in (kt.kernel_us, kt.kernel_rows_ms, kt.graph_ms):
        with pytest.raises(ValueError, match="calls"):
            measure(lambda: ran.append(1), calls)
    with pytest.raises(ValueError, match="calls"):
        kt.summed_us([], calls)
    with pytest.raises(ValueError, match="calls"):
        kt.rows_ms([], calls)
    assert ran == []


def _matmul() -> object:
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    return lambda: a @ a


@pytest.mark.gpu
def test_gpu_the_sum_is_what_ab_probe_and_gemm_ceiling_summed_on_one_profile() -> None:
    fn = _matmul()
    prof = kt.profiled(fn, 20)
    events = prof.events()
    old_ab = sum(e.device_time for e in events if e.device_type.name == "CUDA") / 20
    assert kt.summed_us(events, 20) == pytest.approx(old_ab, rel=1e-12) and old_ab > 0
    flushed = kt.profiled(fn, 20, flush=True).events()
    mine = kt.summed_us(flushed, 20, kt.FLUSH_KERNEL)
    everything = kt.summed_us(flushed, 20)
    assert 0 < mine < everything  # the flush ran, and is left out
    assert mine == pytest.approx(kt.summed_us(events, 20), rel=0.5)


@pytest.mark.gpu
def test_gpu_one_call_captured_replays_as_conv2d_timed_it_and_twenty_as_ab_probe_did() -> None:
    from triton.testing import do_bench

    fn = _matmul()
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # bench_conv2d's capture before it used the helper
        fn()
    old_conv = float(do_bench(graph.replay, warmup=50, rep=300, return_mode="median"))
    assert kt.graph_ms(fn, calls=1, warmup=50, rep=300) == pytest.approx(old_conv, rel=0.1)
    twenty = kt.graph_ms(fn, calls=20)
    assert twenty == pytest.approx(old_conv, rel=0.25)
    with pytest.raises(Exception):  # noqa: B017 - a host read cannot be captured
        kt.graph_ms(lambda: fn().sum().item(), calls=1)
