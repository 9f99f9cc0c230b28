"""SIGTERM (what `timeout` and job schedulers send) stops a command as Ctrl-C does: the gate's
worker group is stopped on the way out instead of being left to run (a ptxas of 15 GB was)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click
import pytest

import lineage.commands.passes
from lineage.cli import main

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


def _stand_in(monkeypatch: pytest.MonkeyPatch, body: Callable[[], None]) -> None:
    """`klineage passes` runs `body` instead (a command that is stopped while it runs)."""
    @click.command("passes")
    @click.option("--json", "as_json", is_flag=True)
    def command(as_json: bool) -> None:
        body()

    monkeypatch.setattr(lineage.commands.passes, "command", command)


def _sigterm_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)  # main()'s handler raises out of the sleep


def _ctrl_c() -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("body, code, message", [(_sigterm_self, 143, "terminated"),
                                                 (_ctrl_c, 130, "aborted")])
def test_a_stopped_command_with_json_says_so_as_json_on_stdout(
        body: Callable[[], None], code: int, message: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _stand_in(monkeypatch, body)
    handler = signal.getsignal(signal.SIGTERM)
    assert main(["passes", "--json"]) == code
    captured = capsys.readouterr()
    assert f"klineage: {message}" in captured.err
    assert json.loads(captured.out) == {"error": message, "exit": code}
    assert signal.getsignal(signal.SIGTERM) is handler  # main() put the old handler back


def test_a_stopped_command_without_json_prints_nothing_on_stdout(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _stand_in(monkeypatch, _sigterm_self)
    assert main(["passes"]) == 143
    captured = capsys.readouterr()
    assert "klineage: terminated" in captured.err and captured.out == ""
