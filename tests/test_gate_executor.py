"""Gate jobs through an executor: the local one and a Ray cluster started on this machine.

Through Ray the same jobs get the same verdicts as on the local executor, job for job (the
kind, stage and outcome: the seeds are fresh each run, so errors and phases differ); the
caller's verdict cache answers a job before it is sent; a Ray worker killed in the middle of
a job gives that job a `gate_fault` (not cached: a retry runs it) and the other jobs finish.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import gate
from gate import CheckRequest, FailureKind, Tier
from gate.executor import LocalExecutor, open_executor
from lineage.admission import admit
from lineage.graph import Lineage
from lineage.optimize import optimize
from lineage.skills import Library
from passes.rewriter import DeterministicRewriter
from skill_helpers import DATA as LINEAGES
from skill_helpers import gemm_cards, library, naive_source

DATA = Path(__file__).parent / "data"
SAXPY = DATA / "cases" / "saxpy"
GOOD = SAXPY / "saxpy_triton.py"
# gemm at sizes where its naive kernel's gates take seconds in the interpreter, not tens
SMALL_GEMM = DATA / "cases" / "gemm_small"


def signature(verdict: Any) -> tuple[Any, ...]:
    """What must agree between two runs of one job (seeds, errors and times differ)."""
    return verdict.ok, verdict.tier, verdict.stage, verdict.failure_kind


# A candidate that, the first time it is imported, writes its worker's pid to a marker and
# waits: the test then SIGKILLs the Ray worker running its gate (the worker's nearest ancestor
# whose command line is a Ray task's; the gate refuses a candidate's own signals to processes
# outside its worker). Later imports behave as GOOD.
KILLER = '''
import os, time
from pathlib import Path
_marker = Path({marker!r})
if not _marker.exists():
    _marker.write_text(str(os.getpid()))
    time.sleep(120)
'''


def _kill_ray_worker_when_marked(marker: Path) -> threading.Thread:
    """A thread that waits for `marker` (a gate worker's pid) and SIGKILLs the Ray worker
    above that process."""
    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (marker.is_file() and marker.read_text()):
            time.sleep(0.05)
        pid = int(marker.read_text())
        while pid > 1:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().startswith(b"ray::"):
                    os.kill(pid, signal.SIGKILL)
                    return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def ray_gates() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with open_executor("ray") as gates:
            yield gates
    finally:
        ray.shutdown()


def _requests() -> list[CheckRequest]:
    def req(path: Path, tier: str = "interpret") -> CheckRequest:
        return CheckRequest(path.read_text(), "triton", str(SAXPY), tier, path=str(path))

    parse_error = CheckRequest("def run(:\n", "triton", str(SAXPY), "interpret", path=str(GOOD))
    return [req(GOOD), req(DATA / "cheats" / "zeros.py"), req(DATA / "cheats" / "hard_exit.py"),
            parse_error]


def test_check_many_through_ray_matches_the_local_executor_and_the_cache_answers_first(
        ray_gates: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    requests = _requests()
    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path / "local"))
    with LocalExecutor(2) as local:
        here = gate.check_many(requests, executor=local)
    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path / "ray"))
    there = gate.check_many(requests, executor=ray_gates)
    assert [signature(v) for v in there] == [signature(v) for v in here]
    assert [v.failure_kind for v in there] == [None, FailureKind.WRONG_OUTPUT, FailureKind.CRASH,
                                               FailureKind.PARSE_ERROR]
    assert not any(v.cached for v in there)
    # The caller cached what came back: the second time nothing cacheable is sent.
    again = gate.check_many(requests, executor=ray_gates)
    assert [v.cached for v in again] == [True, True, False, True]  # a crash is never cached
    assert [signature(v) for v in again] == [signature(v) for v in there]
    # `check` through the executor is `gate.check` with the cluster's tier resolution.
    assert ray_gates.resolve_tier("auto", "triton") == "interpret"  # no GPU in this cluster
    single = ray_gates.check(GOOD.read_text(), "triton", str(SAXPY), Tier.INTERPRET, path=GOOD)
    assert single.ok and single.cached


def test_a_killed_ray_worker_fails_only_its_job_and_a_retry_runs_it(
        ray_gates: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path / "cache"))
    good = GOOD.read_text()
    killer = KILLER.format(marker=str(tmp_path / "marker")) + good
    requests = [CheckRequest(good, "triton", str(SAXPY), "interpret", path=str(GOOD)),
                CheckRequest(killer, "triton", str(SAXPY), "interpret", path=str(GOOD)),
                CheckRequest(good + "\n# another candidate\n", "triton", str(SAXPY), "interpret",
                             path=str(GOOD))]
    watcher = _kill_ray_worker_when_marked(tmp_path / "marker")
    first = gate.check_many(requests, executor=ray_gates)
    watcher.join(5)
    assert (tmp_path / "marker").is_file()  # the worker was killed in the middle of the job
    assert first[0].ok and first[2].ok, (first[0].reason, first[2].reason)
    assert first[1].failure_kind is FailureKind.GATE_FAULT and not first[1].ok
    assert "Ray worker" in first[1].reason and "retried" in first[1].reason
    retry = gate.check_many(requests[1:2], executor=ray_gates)
    assert retry[0].ok and not retry[0].cached, retry[0].reason


def test_admission_through_ray_gives_the_local_trials(
        ray_gates: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    induced = Lineage.load(LINEAGES / "conv2d_induced.json")
    results = []
    for name, gates in (("local", LocalExecutor(1)), ("ray", ray_gates)):
        monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path / name / "cache"))
        lib = Library.open(tmp_path / name / "lib", create=True)
        card = lib.put(gemm_cards(admitted=False)["tensor-core-dot"])
        report = admit(lib, [induced], tier="interpret", max_trials=1,
                       rewriter=DeterministicRewriter(), executor=gates)
        trials = [(t.context, t.case, t.tier, t.ok, t.reason, t.rewriter)
                  for t in lib.get(card.id).verification]
        results.append((report.to_json(), trials))
    assert results[0] == results[1]
    assert results[1][0]["admitted"], results[1]


@pytest.mark.slow
def test_an_interpret_tier_optimize_through_ray_takes_the_local_path(
        ray_gates: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "gemm_naive.py"
    target.write_text(naive_source("gemm"))
    runs = []
    for name, gates in (("local", LocalExecutor(1)), ("ray", ray_gates)):
        monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path / name / "cache"))
        result = optimize(target, str(SMALL_GEMM), library(tmp_path / name, admitted=True),
                          tier="interpret", out=tmp_path / name / "out",
                          rewriter=DeterministicRewriter(), budget_steps=3, executor=gates)
        runs.append(([(s.card, s.anchor) for s in result.applied],
                     [(s.card, s.anchor, s.stage) for s in result.rejected],
                     result.gated, result.termination, result.best_path.read_text()))
    assert runs[0] == runs[1]
    assert runs[1][0], "the run through Ray kept no card"


def test_the_ray_executor_without_ray_says_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from lineage.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if not installed
    monkeypatch.delitem(sys.modules, "gate.ray_executor", raising=False)
    code = main(["optimize", str(GOOD), "--case", str(SAXPY), "--library", str(tmp_path),
                 "--executor", "ray", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0 and "pip install 'klineage[ray]'" in err, err


@pytest.mark.gpu
def test_device_tier_jobs_through_ray_take_a_gpu_and_match_the_local_verdicts(
        ray_gates: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not ray_gates.gpu_available():
        pytest.skip("the Ray cluster sees no GPU")
    requests = [CheckRequest(r.source, r.language, r.case, "device", path=r.path, cache=False)
                for r in _requests()]
    with LocalExecutor(1) as local:
        here = gate.check_many(requests, executor=local)
    there = gate.check_many(requests, executor=ray_gates)
    assert [signature(v) for v in there] == [signature(v) for v in here]
    assert there[0].ok and there[0].timing is not None and there[0].timing.candidate_ms > 0
    assert ray_gates.resolve_tier("auto", "triton") == "device"
