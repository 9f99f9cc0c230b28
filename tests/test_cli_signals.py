"""SIGTERM (what `timeout` and job schedulers send) stops a command as Ctrl-C does: the gate's
worker group is stopped on the way out instead of being left to run (a ptxas of 15 GB was)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SLOW = '''import os, time
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def run(*args):
    with open(PID_FILE, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
    return args[0]
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_stops_the_gate_worker_and_exits_143(tmp_path: Path) -> None:
    pid_file = tmp_path / "worker.pid"
    kernel = tmp_path / "slow.py"
    kernel.write_text(f"PID_FILE = {str(pid_file)!r}\n" + SLOW)
    proc = subprocess.Popen(
        [sys.executable, "-m", "lineage.cli", "gate", str(kernel), "--case",
         str(ROOT / "tests/data/cases/saxpy"), "--tier", "interpret", "--no-cache"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (pid_file.is_file() and pid_file.read_text()) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        worker = int(pid_file.read_text())
        assert _alive(worker)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143
        assert "klineage: terminated" in err
        gone = time.monotonic() + 10
        while _alive(worker) and time.monotonic() < gone:
            time.sleep(0.2)
        assert not _alive(worker)
    finally:
        if proc.poll() is None:
            proc.kill()
