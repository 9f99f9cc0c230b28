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


# Candidate code runs inside the worker, beside its pipe to the parent and the verdict cache.
_ZERO_KERNEL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros((BLOCK,), tl.float32), mask=offs < n)


def run(a, x, y):
    out = torch.empty_like(x)
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
'''
# The worker's objects, reached through the frames below the candidate's import (the gate
# refuses gc's heap walks, not frames): every local of them.
_FRAMES = ("def gate_locals():\n"
           "    try:\n        raise LookupError\n"
           "    except LookupError as exc:\n        frame = exc.__traceback__.tb_frame\n"
           "    while frame is not None:\n"
           "        yield from list(frame.f_locals.values())\n        frame = frame.f_back\n")
_PIPES = ("from multiprocessing.connection import Connection\n" + _FRAMES +
          "PIPES = [v.conn for v in gate_locals() if isinstance(getattr(v, 'conn', None), Connection)]\n")


@pytest.mark.parametrize(
    ("forgery", "words"),
    [
        ("for p in PIPES:\n    p.send(('done',))\n", "'done' before the run sent"),
        ("for p in PIPES:\n    p.send(('ref', 'default', 'seed', 1, [], None))\n",
         "after the references were closed"),
    ],
)
def test_messages_forged_over_the_workers_pipe_are_tampering(forgery: str, words: str) -> None:
    verdict = gate.check(_PIPES + forgery + _ZERO_KERNEL, "triton", SAXPY, Tier.INTERPRET, cache=False)
    assert verdict.failure_kind is FailureKind.TAMPERING, (verdict.failure_kind, verdict.reason)
    assert words in verdict.reason


def test_a_verdict_the_candidate_wrote_into_the_cache_is_not_read_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # It writes an acceptance under every key the cache already holds and under its own, then
    # crashes (crashes are not cached): the next gate of the same text must run it again.
    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path))
    source = (
        "import os, sys\nimport gate.check, gate.verdict as gv, gate.cache as gca\n"
        "gc_ = sys.modules['gate.check']\n"
        "from gate.cases import load_case\n" + _FRAMES +
        "job = next(o for o in gate_locals() if type(o).__name__ == 'Job')\n"
        "case, tier = load_case(job.case_path), gv.Tier(job.tier)\n"
        "key = gc_.cache_key([gc_.GATE_VERSION, open(__file__).read(), '', 'triton', case.digest(),\n"
        "                     tier.value, case.platform, *gc_.platform_of(tier)])\n"
        "gca.VerdictCache().put(key, gv.Verdict(True, tier, 'correctness'))\n"
        "os._exit(1)\n" + _ZERO_KERNEL)
    first = gate.check(source, "triton", SAXPY, Tier.INTERPRET)
    assert first.failure_kind is FailureKind.CRASH, first.reason
    second = gate.check(source, "triton", SAXPY, Tier.INTERPRET)
    assert not second.ok and not second.cached, second


def test_an_allocation_without_end_meets_the_workers_memory_cap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Grows in small steps, so no single request is refused: only the cap stops it.
    monkeypatch.setenv("KLINEAGE_GATE_MEMORY_GIB", "3")
    source = _ZERO_KERNEL.replace("def run(a, x, y):\n", "def run(a, x, y):\n"
                                  "    hog = []\n    while True:\n"
                                  "        hog.append(bytearray(1 << 26))\n")
    t0 = time.monotonic()
    verdict = gate.check(source, "triton", SAXPY, Tier.INTERPRET, cache=False, timeout=120)
    assert verdict.failure_kind is FailureKind.OUT_OF_MEMORY, (verdict.failure_kind, verdict.reason)
    assert "MemoryError" in verdict.reason
    assert time.monotonic() - t0 < 100


_DEVICE_CAP = r"""
import os, resource, sys
from gate.worker import DEVICE_MEMORY_FRACTION, _limit_memory, data_bytes
held = data_bytes()
_limit_memory(device=True)
soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
share = float(os.environ.get("KLINEAGE_GATE_MEMORY_GIB") or DEVICE_MEMORY_FRACTION * total / 2**30)
assert soft == hard and abs(soft - (held + share * 2**30)) < 64 * 2**20, (soft, held, share)
kept = bytearray(64 << 20)  # what the worker may still map
try:
    bytearray(1 << 44)
except MemoryError:
    print("refused")
"""


@pytest.mark.parametrize("gib", ["", "1"])
def test_the_device_tier_caps_what_a_worker_maps_beyond_what_it_holds(gib: str) -> None:
    """On the device tier the worker's cap is what it holds at start plus a share of the
    machine's memory (or KLINEAGE_GATE_MEMORY_GIB): a 16 TiB buffer, which a host that
    overcommits would grant and zero until its OOM killer acts, is a MemoryError at once."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "KLINEAGE_GATE_MEMORY_GIB": gib}
    done = subprocess.run([sys.executable, "-c", _DEVICE_CAP], capture_output=True, text=True,
                          env=env, cwd=Path(__file__).resolve().parent.parent, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["refused"]
