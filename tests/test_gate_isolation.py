"""A candidate that hangs, crashes, exits or exhausts memory gives a verdict; the caller lives on."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

import gate
from gate import FailureKind, Tier

DATA = Path(__file__).parent / "data"
SAXPY = DATA / "cases" / "saxpy"


@pytest.mark.parametrize(
    ("cheat", "kind", "words"),
    [
        ("segfault", FailureKind.CRASH, "SIGSEGV"),
        ("hard_exit", FailureKind.CRASH, "code 3"),
        ("oom", FailureKind.OUT_OF_MEMORY, "allocate"),
    ],
)
def test_worker_death_becomes_a_verdict(cheat: str, kind: FailureKind, words: str) -> None:
    verdict = gate.check_file(DATA / "cheats" / f"{cheat}.py", SAXPY, Tier.INTERPRET, cache=False)
    assert verdict.failure_kind is kind, verdict.reason
    assert words in verdict.reason


def test_a_hang_times_out_and_the_next_candidate_gets_a_clean_worker() -> None:
    t0 = time.monotonic()
    verdict = gate.check_file(DATA / "cheats" / "hang.py", SAXPY, Tier.INTERPRET, cache=False, timeout=3)
    assert verdict.failure_kind is FailureKind.TIMEOUT
    assert verdict.stage == "correctness"
    assert time.monotonic() - t0 < 60
    after = gate.check_file(SAXPY / "saxpy_triton.py", SAXPY, Tier.INTERPRET, cache=False)
    assert after.ok, after.reason


def test_timeouts_and_crashes_are_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path))
    first = gate.check_file(DATA / "cheats" / "hard_exit.py", SAXPY, Tier.INTERPRET)
    second = gate.check_file(DATA / "cheats" / "hard_exit.py", SAXPY, Tier.INTERPRET)
    assert first.failure_kind is second.failure_kind is FailureKind.CRASH
    assert not second.cached


@pytest.mark.slow
def test_a_script_calling_the_gate_at_top_level_does_not_recurse(tmp_path: Path) -> None:
    # Worker start-up must not re-run the caller's __main__ (spawn/forkserver would).
    import subprocess
    import sys

    script = tmp_path / "caller.py"
    script.write_text(
        "import gate\n"
        f"v = gate.check_file({str(SAXPY / 'saxpy_triton.py')!r}, {str(SAXPY)!r}, 'interpret', cache=False)\n"
        "print('VERDICT', v.ok)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).parent.parent)
    assert out.stdout.count("VERDICT") == 1 and "VERDICT True" in out.stdout, out.stderr[-2000:]
