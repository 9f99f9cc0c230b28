"""Leave-one-out with the current search, CI-sized: `bench/roundtrip.py --only loo` at the
interpret tier on the gemm fixture lineage, with a library that holds none of gemm's cards (the
held-out library's cards whose scope names another case), a budget of two candidates. On the
device the same command runs with `--tier device` from the case's device lineage and the
admitted `loo-<case>` library."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lineage.skills import Library
from skill_helpers import ROOT, packed_library


@pytest.mark.slow
def test_leave_one_out_runs_with_the_current_search_at_the_interpret_tier(tmp_path: Path) -> None:
    held = packed_library("heldout_all")
    lib = Library.open(tmp_path / "libs" / "loo-gemm", create=True)
    for card in Library.open(held).cards():
        if "gemm" not in (card.scope.get("cases") or ()):
            lib.put(card)
    shutil.copy(held / "admission.json", tmp_path / "libs" / "loo-gemm" / "admission.json")
    left_in = {c.id for c in lib.cards()}
    out = tmp_path / "rt"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "roundtrip.py"), str(ROOT / "tests/data/lineages/gemm.json"),
         "--out", str(out), "--libraries", str(tmp_path / "libs"), "--tier", "interpret",
         "--only", "loo", "--cases", "gemm", "--budget-steps", "2", "--box", "300", "--grace", "60"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    [run] = json.loads((out / "roundtrip.json").read_text())["runs"]
    assert (run["kind"], run["case"], run["tier"]) == ("loo", "gemm", "interpret")
    assert run["expert_ok"] and run["reached_gate"], run
    assert 1 <= run["gated"] <= 2 and run["termination"] in ("budget-steps", "exhausted")
    # what the run kept came from the library without gemm's cards
    lineage = json.loads((out / "runs" / "loo-gemm-0" / "optimize" / "result.json").read_text())
    assert {step["card"] for step in lineage["applied"]} <= left_in
    assert "Leave-one-out" in (out / "roundtrip.md").read_text()
