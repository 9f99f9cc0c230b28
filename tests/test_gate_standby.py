"""Workers started before their jobs (`gate.runner.Standby`): the next gate's worker starts up
while the gate before it runs, takes exactly one job, and no candidate code runs in a process
before its own job."""
from __future__ import annotations

from pathlib import Path

import pytest

import gate
from gate import runner
from gate.verdict import Tier

SAXPY = Path(__file__).resolve().parent / "data" / "cases" / "saxpy"


def _candidate(tmp_path: Path, marker: Path) -> Path:
    """The saxpy candidate, recording its process id (and whether a candidate ran in that
    process before) in `marker` when imported."""
    text = (SAXPY / "saxpy_triton.py").read_text()
    path = tmp_path / "saxpy_marked.py"
    path.write_text(text + f'''

import builtins as _b
import os as _os

with open({str(marker)!r}, "a") as _f:
    _f.write(f"{{_os.getpid()}} {{getattr(_b, '_klineage_seen', 0)}}\\n")
_b._klineage_seen = 1
''')
    return path


def test_each_gate_runs_in_a_process_no_candidate_ran_in_before(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLINEAGE_GATE_STANDBY", "1")
    marker = tmp_path / "pids.txt"
    candidate = _candidate(tmp_path, marker)
    runner.STANDBY.close()
    runner.STANDBY._last = None
    alone = gate.check_file(candidate, SAXPY, Tier.INTERPRET, cache=False, timeout=60)
    assert alone.ok and not runner.STANDBY._ready  # a lone gate leaves no worker behind
    first = gate.check_file(candidate, SAXPY, Tier.INTERPRET, cache=False, timeout=60)
    assert first.ok, first.reason
    [(key, (waiting, _))] = list(runner.STANDBY._ready.items())
    assert key[0] == "interpret" and waiting.is_alive()  # started while the first gate ran
    second = gate.check_file(candidate, SAXPY, Tier.INTERPRET, cache=False, timeout=60)
    assert second.ok, second.reason
    waiting.join(10)
    assert not waiting.is_alive()  # it took the second job and ended with it
    rows = [line.split() for line in marker.read_text().splitlines()]
    assert [r[1] for r in rows] == ["0", "0", "0"]  # no candidate had run in any of them
    assert len({r[0] for r in rows}) == 3 and int(rows[2][0]) == waiting.pid
    assert runner.STANDBY._ready  # and the next one is starting
    runner.STANDBY.close()


def test_a_changed_environment_gets_a_fresh_worker_and_off_means_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLINEAGE_GATE_STANDBY", "1")
    runner.STANDBY.close()
    assert runner.prestart(Tier.INTERPRET, wait=60) > 0  # waited for its start-up
    [(_, (waiting, _))] = list(runner.STANDBY._ready.items())
    assert waiting.pid in runner.STANDBY._warm
    monkeypatch.setenv("KLINEAGE_TEST_SETTING", "changed")  # the caller's environment moved on
    verdict = gate.check_file(SAXPY / "saxpy_triton.py", SAXPY, Tier.INTERPRET, cache=False,
                              timeout=60)
    assert verdict.ok, verdict.reason
    waiting.join(10)
    assert not waiting.is_alive()  # ended unused: its environment is not the job's
    assert all(dict(k[1]).get("KLINEAGE_TEST_SETTING") == "changed" for k in runner.STANDBY._ready)
    runner.STANDBY.close()
    monkeypatch.setenv("KLINEAGE_GATE_STANDBY", "0")
    again = gate.check_file(SAXPY / "saxpy_triton.py", SAXPY, Tier.INTERPRET, cache=False,
                            timeout=60)
    assert again.ok and not runner.STANDBY._ready


@pytest.mark.gpu
def test_on_the_device_a_standby_worker_starts_the_next_gate_in_under_a_second(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLINEAGE_GATE_STANDBY", "1")
    runner.STANDBY.close()
    runner.prestart(Tier.DEVICE, wait=120)
    verdicts = [gate.check_file(SAXPY / "saxpy_triton.py", SAXPY, Tier.DEVICE, cache=False)
                for _ in range(2)]
    for v in verdicts:
        assert v.ok, v.reason
        phases = dict(v.phases)
        # the worker was up: the job's own start-up alone (no CUDA context, no imports)
        assert phases["spawn"] < 1.0, phases
        assert phases.get("start-up: cuda", 0.0) < 0.5, phases
    runner.STANDBY.close()
