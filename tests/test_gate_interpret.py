"""The interpret tier on the CPU, the verdict JSON and the `klineage gate` command."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import gate
from gate import FailureKind, Tier, Verdict

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"
SAXPY = DATA / "cases" / "saxpy"
MATMUL = DATA / "cases" / "matmul_triton.py"


@dataclass(frozen=True)
class _Run:
    returncode: int
    stdout: str
    stderr: str


def _cli(*args: str, cache_dir: Path, capsys: pytest.CaptureFixture[str],
         monkeypatch: pytest.MonkeyPatch) -> _Run:
    """`klineage gate ARGS` in this process (the gate's workers are processes anyway)."""
    from lineage.cli import main

    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(cache_dir))
    capsys.readouterr()
    code = main(["gate", *args])
    out = capsys.readouterr()
    return _Run(code, out.out, out.err)


def test_a_simple_matmul_passes_the_gemm_case_at_small_shapes() -> None:
    verdict = gate.check_file(MATMUL, "gemm", Tier.INTERPRET, cache=False)
    assert verdict.ok, verdict.reason
    assert verdict.correctness.max_rel_err < 5e-3  # fp16 tolerance of the gemm case


def test_a_wrong_matmul_is_rejected_with_its_error(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.py"
    wrong.write_text(MATMUL.read_text().replace("acc += tl.dot(a, b)", "acc += tl.dot(a, b) * 1.01"))
    verdict = gate.check_file(wrong, "gemm", Tier.INTERPRET, cache=False)
    assert verdict.failure_kind is FailureKind.WRONG_OUTPUT
    assert 5e-3 < verdict.correctness.max_rel_err < 2e-2


def test_verdict_json_round_trips() -> None:
    verdict = gate.check_file(SAXPY / "saxpy_triton.py", SAXPY, Tier.INTERPRET, cache=False)
    data = verdict.to_json()
    assert set(data) >= {"ok", "tier", "stage", "failure_kind", "reason", "correctness"}
    assert "timing" not in data and "facts" not in data  # not reached at this tier
    assert Verdict.from_json(json.loads(json.dumps(data))) == verdict


def test_a_per_kernel_profile_round_trips_and_a_malformed_one_is_dropped() -> None:
    from gate.runner import MAX_PROFILED_KERNELS, _kernel_ms
    from gate.verdict import Timing, VariantTiming

    timing = Timing(3.0, 1.0, (VariantTiming("v", 3.0, 1.0, (("b", 2.0), ("a", 1.0))),))
    back = Verdict.from_json(json.loads(json.dumps(
        Verdict(True, Tier.DEVICE, "timing", timing=timing).to_json())))
    assert back.timing.variants[0].kernels == (("b", 2.0), ("a", 1.0))
    assert back.timing.kernel_shares() == pytest.approx({"b": 2 / 3, "a": 1 / 3})
    # what a worker sends is advisory: bad values are dropped, the slowest kept first
    assert _kernel_ms({"x": 1.0, "y": float("nan"), "z": -1.0, "w": "9", "v": 3}) == \
        (("v", 3.0), ("x", 1.0))
    assert _kernel_ms(["not", "a", "dict"]) == ()
    assert len(_kernel_ms({str(i): float(i) for i in range(500)})) == MAX_PROFILED_KERNELS


def test_the_two_kernel_saxpy_passes_at_the_interpret_tier() -> None:
    verdict = gate.check_file(SAXPY / "saxpy_two_kernels.py", SAXPY, Tier.INTERPRET,
                              cache=False)
    assert verdict.ok, verdict.reason


def test_a_verdict_says_where_the_gate_spent_its_time() -> None:
    verdict = gate.check_file(SAXPY / "saxpy_triton.py", SAXPY, Tier.INTERPRET, cache=False)
    phases = dict(verdict.phases)
    # the parent's parse, then the worker's phases in the order run, after its start
    assert list(phases)[:3] == ["parse (parent)", "spawn", "start-up"]
    assert "end (parent)" in phases and "start-up: case" in phases
    assert {"references", "load_candidate", "correctness", "knockout", "repeat"} <= set(phases)
    assert all(sec >= 0 for sec in phases.values())
    data = json.loads(json.dumps(verdict.to_json()))
    assert list(data["phases"]) == list(phases)
    assert dict(Verdict.from_json(data).phases) == pytest.approx(phases, abs=1e-3)


def test_the_threaded_norm_matches_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from gate import compare

    rng = np.random.default_rng(0)
    ref = rng.standard_normal(300_001).astype(np.float16)
    out = (ref + rng.standard_normal(ref.size).astype(np.float16) * 1e-3).astype(np.float16)
    monkeypatch.setattr(compare, "_THREADS", 1)
    serial = compare.relative_error(out, ref)
    monkeypatch.setattr(compare, "_THREADS", 4)
    monkeypatch.setattr(compare, "_PER_THREAD", 50_000)
    assert compare.relative_error(out, ref) == pytest.approx(serial, rel=1e-12)
    assert 1e-4 < serial < 1e-2
    holed = out.copy()
    holed[-3] = np.nan  # in the last thread's share: the output is unwritten there
    assert np.isnan(compare.relative_error(holed, ref))
    inf_ref, inf_out = ref.copy(), out.copy()
    inf_ref[7], inf_out[7] = np.inf, np.inf  # matched inf in the reference: exact path, finite error
    assert compare.relative_error(inf_out, inf_ref) == pytest.approx(serial, rel=1e-2)
    inf_out[7] = 1.0
    assert compare.relative_error(inf_out, inf_ref) == float("inf")


def test_bfloat16_outputs_are_compared_as_their_float32_values(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """bfloat16 travels as its bits and is widened a chunk at a time: the error is the one of
    the widened float32 arrays, to the last bit, and non-finite values are still told apart."""
    import numpy as np

    from gate import compare
    from gate.transport import to_numpy

    monkeypatch.setattr(compare, "_CHUNK", 1000)  # several chunks, a partial last one

    def bf16(values: np.ndarray) -> tuple:
        bits = (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return ("tensor", "bfloat16", values.shape, bits.tobytes())

    rng = np.random.default_rng(1)
    ref = rng.standard_normal((70, 101)).astype(np.float32)
    out = ref + rng.standard_normal(ref.shape).astype(np.float32) * 1e-2
    r, o = bf16(ref), bf16(out)
    outcome = compare.compare([o], [r], tolerance=1e-1)
    assert outcome.ok and outcome.rel_err == compare.relative_error(to_numpy(o), to_numpy(r))
    holed = out.copy()
    holed[69, 100] = np.nan  # the last element: unwritten output
    assert compare.compare([bf16(holed)], [r], tolerance=1e-1).kind is FailureKind.NAN_OUTPUT
    inf_ref, inf_out = ref.copy(), out.copy()
    inf_ref[3, 3] = inf_out[3, 3] = -np.inf  # matched in the reference: the exact path
    assert compare.compare([bf16(inf_out)], [bf16(inf_ref)], tolerance=1e-1).ok
    inf_out[3, 3] = np.inf
    assert compare.compare([bf16(inf_out)], [bf16(inf_ref)], tolerance=1e-1).rel_err == float("inf")
    assert compare.all_zero([bf16(np.array([0.0, -0.0]))])
    assert not compare.all_zero([bf16(np.array([0.0, 1e-30]))])


def test_finite_values_whose_squares_overflow_are_no_nan() -> None:
    import numpy as np

    from gate import compare

    ref = np.array([1e154, 1.0, 2.0])
    out = np.array([-1e154, 1.0, 2.0])  # finite: the squared error overflows float64
    assert compare.relative_error(out, ref) == float("inf")
    assert np.isnan(compare.relative_error(np.array([np.nan, 1.0, 2.0]), ref))


def test_the_parent_counts_its_wait_for_the_gpu_lock_apart_from_comparing() -> None:
    import contextlib
    import time

    import numpy as np

    from gate.runner import _Judge

    class SlowLock:
        waited_s = 0.0

        @contextlib.contextmanager
        def shared(self):  # another gate times for 0.2 s before the comparison may start
            time.sleep(0.2)
            self.waited_s += 0.2
            yield

    ref = np.linspace(1.0, 2.0, 1000).astype(np.float32)
    item = [("tensor", "float32", ref.shape, ref.tobytes())]
    judge = _Judge(gate.load_case(SAXPY), Tier.INTERPRET, gpu_lock=SlowLock())
    variant = next(iter(judge.case.small_shapes))
    judge.handle(("ref", variant, "seed", 1, item, None))
    judge.handle(("refs_done",))
    judge.handle(("out", variant, "seed", 1, item, 1))
    assert judge.verdict is None and judge.results[0].rel_err == 0.0
    assert judge.compare_lock_s == pytest.approx(0.2) and judge.compare_s < 0.1


def test_an_unknown_case_or_tier_is_bad_input() -> None:
    from kir.errors import BadInputError

    with pytest.raises(BadInputError):
        gate.load_case("no-such-case")
    with pytest.raises(BadInputError):
        gate.check("x = 1", "triton", SAXPY, "warp-speed")


def test_device_tier_without_a_gpu_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    verdict = gate.check_file(SAXPY / "saxpy_triton.py", SAXPY, Tier.DEVICE, cache=False)
    if verdict.ok:
        pytest.skip("a GPU is present")
    assert verdict.failure_kind is FailureKind.UNSUPPORTED


def test_cli_exit_codes_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    run = {"cache_dir": tmp_path, "capsys": capsys, "monkeypatch": monkeypatch}
    ok = _cli(str(SAXPY / "saxpy_triton.py"), "--case", str(SAXPY), "--tier", "interpret", "--json", **run)
    assert ok.returncode == 0, ok.stderr[-2000:]
    data = json.loads(ok.stdout)
    assert data["ok"] is True and data["tier"] == "interpret" and data["failure_kind"] is None
    assert len(data["correctness"]["seeds"]) == 5  # 3 seeds, the repeated runs, the sealed call
    rejected = _cli(str(DATA / "cheats" / "torch_fallback.py"), "--case", str(SAXPY), "--tier", "interpret",
                    "--json", **run)
    assert rejected.returncode == 1
    assert json.loads(rejected.stdout)["failure_kind"] == "torch_compute"
    bad = _cli(str(SAXPY / "saxpy_triton.py"), "--case", "no-such-case", **run)
    assert bad.returncode == 2 and bad.stderr.startswith("klineage: error:") and "Traceback" not in bad.stderr
    missing = _cli(str(tmp_path / "nope.py"), "--case", "gemm", **run)
    assert missing.returncode == 2


def test_cli_in_a_fresh_process_prints_only_json(tmp_path: Path) -> None:
    # Candidate output (prints, warnings) goes to stderr, never into the JSON on stdout.
    noisy = tmp_path / "noisy.py"
    noisy.write_text((SAXPY / "saxpy_triton.py").read_text().replace(
        "    out = torch.empty_like(x)", "    print('noise from the candidate')\n    out = torch.empty_like(x)"))
    env = {"KLINEAGE_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "lineage", "gate", str(noisy),
                          "--case", str(SAXPY), "--tier", "interpret", "--json"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["ok"] is True
    assert "noise from the candidate" in out.stderr


def test_cli_text_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    out = _cli(str(DATA / "cheats" / "mutate_input.py"), "--case", str(SAXPY), "--tier", "interpret",
               cache_dir=tmp_path, capsys=capsys, monkeypatch=monkeypatch)
    assert out.returncode == 1
    assert out.stdout.startswith("REJECTED") and "input_mutation" in out.stdout


def test_check_many_keeps_request_order() -> None:
    reqs = [gate.CheckRequest((DATA / "cheats" / n).read_text(), "triton", str(SAXPY), "interpret",
                              cache=False)
            for n in ("mutate_input.py", "no_write.py")]
    kinds = [v.failure_kind for v in gate.check_many(reqs, jobs=2)]
    assert kinds == [FailureKind.INPUT_MUTATION, FailureKind.NAN_OUTPUT]


def test_the_text_summary_names_each_kernels_share_of_the_time() -> None:
    from gate.verdict import Timing, VariantTiming
    from lineage.commands.gate import _summary

    timing = Timing(1.0, 2.0, (VariantTiming("v", 1.0, 2.0, (("state", 0.75), ("solve", 0.25))),))
    text = _summary(Verdict(True, Tier.DEVICE, "timing", timing=timing))
    assert "kernels (share of the candidate's GPU time): state 75%, solve 25%" in text
    assert "kernels (" not in _summary(Verdict(True, Tier.DEVICE, "timing", timing=Timing(1.0, 2.0)))


def _two_configs(tmp_path: Path, second_bk: int) -> Path:
    """The test matmul autotuned over two configurations under the interpreter too, its K loop
    stopping at the last whole step: right only where BK divides K (the small shape's K is
    192). Its loads stay masked, so a wrong configuration reads nothing out of bounds."""
    text = MATMUL.read_text()
    text = text.replace(
        'CONFIGS = [triton.Config({"BM": 32, "BN": 32, "BK": 32}, num_warps=4, num_stages=1)]',
        'CONFIGS = [triton.Config({"BM": 32, "BN": 32, "BK": 32}, num_warps=4, num_stages=1),\n'
        f'               triton.Config({{"BM": 32, "BN": 64, "BK": {second_bk}}}, num_warps=4, '
        'num_stages=1)]')
    text = text.replace("for k in range(0, K, BK):", "for k in range(0, K - BK + 1, BK):")
    path = tmp_path / f"two_configs_{second_bk}.py"
    path.write_text(text)
    return path


def _thin_gemm(tmp_path: Path) -> Path:
    """The small gemm test case at M 32, N 64 and the gemm case's K, 192 (which BK 128 does not
    divide): one or two 32-wide tiles instead of the gemm case's sixty."""
    folder = tmp_path / "gemm_thin"
    folder.mkdir()
    small = '{"default": {"M": 64, "N": 128, "K": 128, "dtype": "fp16"}}'
    text = (DATA / "cases" / "gemm_small" / "case.py").read_text()
    assert small in text
    (folder / "case.py").write_text(text.replace(small, small.replace('"M": 64, "N": 128, "K": 128',
                                                                      '"M": 32, "N": 64, "K": 192')))
    return folder


def test_every_autotune_configuration_is_checked_not_only_the_one_picked(tmp_path: Path) -> None:
    # The interpreter cannot time, so the autotuner runs the first configuration; the second
    # (BK 128 over K 192) leaves K's last 64 out and is wrong: the gate runs it too.
    case = str(_thin_gemm(tmp_path))
    verdict = gate.check_file(_two_configs(tmp_path, 128), case, Tier.INTERPRET, cache=False)
    assert verdict.failure_kind is FailureKind.WRONG_OUTPUT, verdict.reason
    assert verdict.stage == "correctness"
    assert "config 1 of matmul_kernel" in verdict.reason and "BK=128" in verdict.reason
    # The same kernel whose second configuration divides K passes, both configurations run.
    verdict = gate.check_file(_two_configs(tmp_path, 64), case, Tier.INTERPRET, cache=False)
    assert verdict.ok, verdict.reason
    phases = {r.phase for r in verdict.correctness.results}
    assert {p.split(" (")[0] for p in phases if p.startswith("config")} == \
        {"config 0 of matmul_kernel", "config 1 of matmul_kernel"}


def test_configurations_pruned_or_run_alike_by_the_interpreter_are_not_run_twice(tmp_path: Path) -> None:
    # Four configurations: the second differs from the first only in warps and stages (the
    # interpreter runs the same Python for both), the third has other tiles, and the candidate's
    # own pruning drops the fourth. The first stands for the second; the fourth never runs.
    text = MATMUL.read_text().replace(
        'CONFIGS = [triton.Config({"BM": 32, "BN": 32, "BK": 32}, num_warps=4, num_stages=1)]',
        'CONFIGS = [triton.Config({"BM": 32, "BN": 32, "BK": 32}, num_warps=4, num_stages=1),\n'
        '               triton.Config({"BM": 32, "BN": 32, "BK": 32}, num_warps=8, num_stages=3),\n'
        '               triton.Config({"BM": 32, "BN": 64, "BK": 64}, num_warps=4, num_stages=1),\n'
        '               triton.Config({"BM": 64, "BN": 64, "BK": 32}, num_warps=4, num_stages=1)]')
    text = text.replace(
        '@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])',
        'def _prune(configs, named_args, **kwargs):\n'
        '    return [c for c in configs if c.kwargs["BM"] == 32]\n\n\n'
        '@triton.autotune(configs=CONFIGS, key=["M", "N", "K"], '
        'prune_configs_by={"early_config_prune": _prune})')
    assert text.count("_prune") == 3 and text.count("triton.Config(") >= 7
    path = tmp_path / "four_configs.py"
    path.write_text(text)
    verdict = gate.check_file(path, str(DATA / "cases" / "gemm_small"), Tier.INTERPRET, cache=False)
    assert verdict.ok, verdict.reason
    phases = {r.phase.split(" (")[0] for r in verdict.correctness.results if r.phase.startswith("config")}
    assert phases == {"config 0 of matmul_kernel", "config 2 of matmul_kernel"}
    # Pruning that keeps one configuration alone: the correctness calls ran exactly it.
    path.write_text(text.replace('c.kwargs["BM"] == 32]', 'c.kwargs["BK"] == 64]'))
    verdict = gate.check_file(path, str(DATA / "cases" / "gemm_small"), Tier.INTERPRET, cache=False)
    assert verdict.ok, verdict.reason
    assert {r.phase for r in verdict.correctness.results} == {"seed", "sealed", "refill"}
