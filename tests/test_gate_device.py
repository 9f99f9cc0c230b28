"""The device tier on a GPU (make gpu-test): correctness, timing and the checks only a GPU shows.

Each test gates one kernel at real shapes in a fresh worker; run with `-m gpu` on the device
machine (Triton 3.6 there, Triton 3.9 in CI's interpret-tier tests).
"""
from __future__ import annotations

from pathlib import Path

import pytest

import gate
from gate import FailureKind, Tier

pytestmark = pytest.mark.gpu

DATA = Path(__file__).parent / "data"
SAXPY = DATA / "cases" / "saxpy"
CHEATS = DATA / "cheats"


def _device(path: Path, case: str | Path = SAXPY, timeout: float = 120) -> gate.Verdict:
    return gate.check_file(path, case, Tier.DEVICE, cache=False, timeout=timeout)


def test_honest_triton_kernel_is_timed_against_the_reference() -> None:
    verdict = _device(SAXPY / "saxpy_triton.py")
    assert verdict.ok, verdict.reason
    assert verdict.stage == "timing"
    t = verdict.timing
    assert t is not None and t.candidate_ms > 0 and t.reference_ms > 0
    assert t.speedup == pytest.approx(t.reference_ms / t.candidate_ms)
    phases = {r.phase for r in verdict.correctness.results}
    # timed calls on buffers refilled with each set of the pool (a sample checked), then one
    # more fresh-input check; the sealed call's inputs are visible only to its kernels
    assert phases == {"seed", "sealed", "refill", "reverify"}
    assert len({r.seed for r in verdict.correctness.results if r.phase == "refill"}) >= 2
    # every measurement waited for the parent to finish judging the outputs sent before it
    assert dict(verdict.phases).get("parent compare wait", 0.0) > 0.0


def test_the_verdict_profiles_each_own_kernel_of_a_timed_call() -> None:
    """Two kernels, the first reading its input 32 times: the profile of the timed run names
    both, puts most of the GPU time in the first, and leaves out the gate's own flush and
    refill kernels (their sum stays below the candidate's median)."""
    verdict = _device(SAXPY / "saxpy_two_kernels.py")
    assert verdict.ok, verdict.reason
    (variant,) = verdict.timing.variants
    kernels = dict(variant.kernels)
    assert set(kernels) == {"scale_kernel", "add_kernel"}
    assert kernels["scale_kernel"] > 2 * kernels["add_kernel"] > 0
    assert sum(kernels.values()) <= 1.2 * variant.candidate_ms
    shares = verdict.timing.kernel_shares()
    assert shares["scale_kernel"] > 0.6 and sum(shares.values()) == pytest.approx(1.0)


def test_honest_cuda_kernel_passes_through_cuLaunchKernel() -> None:
    verdict = _device(SAXPY / "saxpy_cuda.cu")
    assert verdict.ok, verdict.reason
    assert verdict.timing is not None


def test_simple_matmul_passes_the_gemm_case_at_real_shapes() -> None:
    verdict = _device(DATA / "cases" / "matmul_triton.py", "gemm", timeout=300)
    assert verdict.ok, verdict.reason  # autotuning inside the traced call is not torch compute
    assert verdict.timing.candidate_ms > 0
    # what its autotuner picked, one of its four configurations: an own sweep starts there
    pick = verdict.timing.picks()["matmul_kernel"]
    assert (pick["BM"], pick["BN"], pick["BK"]) in {(128, 128, 64), (128, 64, 64), (64, 128, 64),
                                                    (64, 64, 32)}
    assert pick["num_warps"] in (4, 8) and pick["num_stages"] in (3, 4)


@pytest.mark.parametrize(
    ("cheat", "kind"),
    [
        ("side_stream.py", FailureKind.SIDE_STREAM),
        ("illegal_address.py", FailureKind.ILLEGAL_ADDRESS),
        ("cuda_no_launch.cu", FailureKind.NO_LAUNCH),       # cuLaunchKernel counted
        # reads its inputs off the device (x.cpu()) in every call: host compute, before the
        # knockout would find it
        ("cuda_knockout.cu", FailureKind.HOST_COMPUTE),
        # re-validation after timing; its unwritten output may hold an earlier call's answer
        ("lazy_after_warmup.py", (FailureKind.STALE_OUTPUT, FailureKind.REUSED_OUTPUT)),
        ("tamper_timer.py", FailureKind.TAMPERING),
        ("oom.py", FailureKind.OUT_OF_MEMORY),
        ("knockout_numpy.py", FailureKind.HOST_COMPUTE),
        ("host_read_flag.py", FailureKind.HOST_COMPUTE),  # same launches, path by a flag buffer
    ],
)
def test_device_cheat_is_rejected(cheat: str, kind: FailureKind | tuple[FailureKind, ...]) -> None:
    verdict = _device(CHEATS / cheat)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    assert verdict.failure_kind in kinds, (verdict.failure_kind, verdict.reason)


def test_gpu_hang_times_out_and_the_gpu_stays_usable() -> None:
    verdict = _device(CHEATS / "hang_gpu.py", timeout=20)
    assert verdict.failure_kind is FailureKind.TIMEOUT
    after = _device(SAXPY / "saxpy_triton.py")
    assert after.ok, after.reason


def test_a_large_speedup_is_flagged_and_reverified() -> None:
    verdict = _device(SAXPY / "saxpy_triton.py", DATA / "cases" / "slowref")
    assert verdict.ok, verdict.reason
    assert verdict.timing.speedup > 10
    assert any("re-verified" in f for f in verdict.flags)


def test_static_tier_on_this_triton_version() -> None:
    verdict = gate.check_file(DATA / "cases" / "matmul_triton.py", "gemm", Tier.STATIC, cache=False)
    assert verdict.ok, verdict.reason
    assert "wgmma" in verdict.facts.instruction_classes
    assert len(verdict.facts.compiles) == 4


def test_gates_side_by_side_time_alone() -> None:
    """Three gates of one kernel at once on one GPU: each times under the GPU's exclusive lock
    (gate.gpulock), so their times match a gate run alone, and some of them waited for it."""
    from concurrent.futures import ThreadPoolExecutor

    kernel = DATA / "cases" / "matmul_triton.py"
    alone = _device(kernel, "gemm", timeout=300)
    assert alone.ok, alone.reason
    with ThreadPoolExecutor(3) as pool:
        together = list(pool.map(lambda _: _device(kernel, "gemm", timeout=300), range(3)))
    assert all(v.ok for v in together), [v.reason for v in together]
    for v in together:
        assert v.timing.candidate_ms == pytest.approx(alone.timing.candidate_ms, rel=0.15)
        assert v.timing.reference_ms == pytest.approx(alone.timing.reference_ms, rel=0.15)
    assert any(dict(v.phases).get("gpu lock wait", 0.0) > 0.05 for v in together)


def test_the_host_time_to_launch_a_kernel_is_not_timed() -> None:
    """300 us of Python before each launch of a ~50 us kernel: do_bench alone would time the
    host (the GPU idles between its start event and the late kernel); the gate's GPU lead
    keeps the host ahead, so the kernel times as it does behind a fast host."""
    fast = _device(SAXPY / "saxpy_triton.py")
    slow = _device(SAXPY / "saxpy_slow_host.py")
    assert fast.ok and slow.ok, (fast.reason, slow.reason)
    assert slow.timing.candidate_ms < 0.2  # well under the 0.3 ms the host takes per call
    assert slow.timing.candidate_ms == pytest.approx(fast.timing.candidate_ms, rel=0.3)


def test_an_autotuner_times_its_configurations_as_the_gate_times_the_candidate() -> None:
    """The candidate's own autotuner: its fast kernel sits behind 600 us of host work per
    launch, its slow kernel launches at once. The gate times every configuration behind the
    GPU lead and with the GPU to itself, so the autotuner keeps the fast kernel: the candidate
    times like plain saxpy. Triton's plain do_bench would time the host and keep the slow one."""
    fast = _device(SAXPY / "saxpy_triton.py")
    tuned = _device(SAXPY / "saxpy_autotune_slow_host.py")
    assert fast.ok and tuned.ok, (fast.reason, tuned.reason)
    assert dict(tuned.phases).get("autotune timing", 0.0) > 0.0
    assert tuned.timing.candidate_ms == pytest.approx(fast.timing.candidate_ms, rel=0.3)


@pytest.mark.parametrize("cheat", ["reuse_data_ptr", "reuse_id", "reuse_checksum", "cache_outputs"])
def test_a_result_reused_across_timed_calls_is_rejected(cheat: str) -> None:
    verdict = _device(CHEATS / f"{cheat}.py")
    assert verdict.failure_kind is FailureKind.REUSED_OUTPUT, (verdict.failure_kind, verdict.reason)


def test_a_memo_kept_on_the_device_is_refused_by_its_first_visits() -> None:
    # every output right, the same launches in every call: only its first call on a set
    # multiplies (`gate.visits`)
    verdict = _device(CHEATS / "device_memo.py", DATA / "cases" / "gemm_small", timeout=300)
    assert verdict.failure_kind is FailureKind.REUSED_OUTPUT, (verdict.failure_kind, verdict.reason)
    assert "first call" in verdict.reason


def test_cublas_reached_through_hidden_ctypes_is_named_by_its_kernel() -> None:
    verdict = _device(CHEATS / "foreign_hidden_cublas.py", "gemm", timeout=300)
    assert verdict.failure_kind is FailureKind.FOREIGN_KERNEL, (verdict.failure_kind, verdict.reason)
    assert "not the candidate's ran" in verdict.reason


@pytest.mark.parametrize("cheat", ["foreign_ctypes_cublas", "foreign_cupy", "foreign_hidden_cupy"])
def test_another_gpu_library_is_rejected_on_the_device(cheat: str) -> None:
    if cheat.endswith("cupy"):
        pytest.importorskip("cupy")
    verdict = _device(CHEATS / f"{cheat}.py", "gemm", timeout=300)
    assert verdict.failure_kind in (FailureKind.FOREIGN_LIBRARY, FailureKind.FOREIGN_KERNEL), \
        (verdict.failure_kind, verdict.reason)


def test_honest_kernels_using_torch_fills_and_copies_are_not_foreign() -> None:
    # The matmul allocates, autotunes (flushes, sleeps) and its output is converted by torch.
    verdict = _device(DATA / "cases" / "matmul_triton.py", "gemm", timeout=300)
    assert verdict.ok, verdict.reason
    assert not any("not attributed" in f for f in verdict.flags), verdict.flags


@pytest.mark.parametrize("exploit", ["numpy_host_copy", "python_tolist"])
def test_an_answer_computed_on_the_host_is_rejected_on_the_device(exploit: str) -> None:
    # Host code that reads the inputs' values off the device is refused in the first call that
    # does (`guards.host_read`); one that read them otherwise would see poison in the sealed call.
    path = DATA / "exploits" / f"{exploit}.py"
    case = "gemm" if exploit == "numpy_host_copy" else SAXPY
    verdict = _device(path, case)
    assert verdict.failure_kind is FailureKind.HOST_COMPUTE, (verdict.failure_kind, verdict.reason)
    assert "read floating-point values off the device" in verdict.reason or \
        "visible only to the candidate's kernels" in verdict.reason, verdict.reason


def test_a_wrong_configuration_the_autotuner_does_not_pick_is_still_rejected() -> None:
    """The autotuner keeps the fast, right configuration; the slow one is wrong. Another shape
    or GPU could pick it, so the gate runs every configuration (`worker.configs`)."""
    verdict = _device(DATA / "bugs" / "saxpy_autotune_slow_wrong.py")
    assert verdict.failure_kind is FailureKind.WRONG_OUTPUT, verdict.reason
    assert "config 1 of saxpy_kernel" in verdict.reason and "BLOCK=32" in verdict.reason
