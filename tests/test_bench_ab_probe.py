"""bench/ab_probe.py without a GPU: each variant of an operator is run at the case's small
shape under Triton's interpreter and checked against the reference (nothing is timed); a
variant that fails is a row with its error, not the end of the probe; bad input exits 2."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from skill_helpers import ROOT

OP = "nw_attn_flat_ptrs"
START = ROOT / "bench/styles" / OP / "flat_attn.py"


def _probe(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.run([sys.executable, str(ROOT / "bench/ab_probe.py"), str(folder), *args],
                          capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)


def test_each_variant_is_checked_against_the_reference_and_a_failing_one_is_a_row(
        tmp_path: Path) -> None:
    start = START.read_text()
    (tmp_path / f"{OP}__start.py").write_text(start)
    # the same kernel with its output scaled: runs, and is wrong
    wrong = start.replace("    return o\n", "    return o * 2\n")
    assert wrong != start
    (tmp_path / f"{OP}__doubled.py").write_text(wrong)
    (tmp_path / f"{OP}__broken.py").write_text("def run(*args):\n    raise RuntimeError('no')\n")
    done = _probe(tmp_path, OP, "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "out" / f"{OP}.json").read_text())
    assert record["case"] == f"{OP} A/B" and "ab_probe.py" in record["command"]
    rows = record["timings"]
    assert set(rows) == {"reference", "start", "doubled", "broken"}
    assert rows["start"]["rel_err"] < 1e-2 and rows["start"]["ms"] is None
    assert rows["doubled"]["rel_err"] > 0.5
    assert rows["broken"]["error"] == "RuntimeError: no"
    assert json.loads(done.stdout.splitlines()[-1]) == record


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    missing = _probe(tmp_path / "nowhere", OP)
    assert missing.returncode == 2 and "no such folder" in missing.stderr
    unknown = _probe(tmp_path, "no_such_op")
    assert unknown.returncode == 2 and "no case folder" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1
