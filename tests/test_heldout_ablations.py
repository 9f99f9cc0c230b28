"""bench/heldout.py --ablation: every ablation named in one comma list is a column of the same
table in one invocation, beside the full search, sharing its start and control gates; the
records become store rows (bench/store.py) whose ablation metrics are columns beside
best / control."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ALL = ("library-off", "lookahead-off", "priors-off")


def _heldout(tmp_path: Path, *argv: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "bench" / "heldout.py"), *argv],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def _store():
    spec = importlib.util.spec_from_file_location("results_store", REPO / "bench" / "store.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_three_ablations_are_columns_of_one_interpret_tier_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = _heldout(tmp_path, "--tier", "interpret", "--only", "softmax", "--budget-steps", "2",
                    "--out", str(out), "--ablation", ",".join(ALL))
    assert done.returncode == 0, done.stderr[-2000:]
    [row] = json.loads((out / "heldout.json").read_text())["rows"]
    assert row["status"] == "done" and row["start"]["ok"] and row["best"]["ok"]
    assert set(row["ablations"]) == set(ALL)
    for name, entry in row["ablations"].items():
        assert entry["ok"] and entry["gated"] <= 2 and entry["termination"], name
        # each ran in its own folder, as a lineage of its own
        assert (out / "ops" / "bench__heldout__softmax" / name / "lineage.json").is_file()
    # untimed, sweeps are no moves: without a library nothing is gated
    assert row["ablations"]["library-off"]["gated"] == 0
    # one start gate and one control gate for the row: the ablations share them
    assert done.stderr.count("gating the start kernel") == 1
    assert done.stderr.count("softmax: control:") == 1
    table = (out / "heldout.md").read_text()
    assert "| cards | library-off | lookahead-off | priors-off |" in table
    assert "pass (0 gated) |" in table
    # the store reads each ablation's cells and renders them beside best / control
    store = _store()
    rows = store.rows_of(out / "heldout.json")
    [stored] = rows
    assert stored["metrics"]["ablations.library-off.gated"] == 0
    assert all(stored["metrics"][f"ablations.{a}.ok"] is True for a in ALL)
    header = store.render_table("heldout", rows).split("| operator |", 1)[1].split("\n", 1)[0]
    cells = [c.strip() for c in header.split("|")]
    assert cells.index("best.gated") < cells.index("ablations.library-off.gated") \
        < cells.index("ablations.priors-off.ok")


def test_device_rows_put_each_ablation_beside_best_over_control() -> None:
    """At the device tier the best over each ablated run and its x/ref come right after
    best / control, whatever else the rows hold."""
    store = _store()
    metrics = {"status": "done", "best_vs_ref": 1.1, "best_vs_control": 1.2, "wall_s": 3.0,
               "best_vs_priors-off": 1.05, "best_vs_library-off": 1.3,
               "library-off_vs_ref": 0.85, "priors-off_vs_ref": 1.05, "start_vs_ref": 0.3}
    row = {"benchmark": "heldout", "operator": "mm", "variant": "gemm", "metrics": metrics,
           "command": "c", "commit": "x", "gpu": "G", "date": "d", "source": "s"}
    header = store.render_table("heldout", [row]).split("| operator |", 1)[1].split("\n", 1)[0]
    cells = [c.strip() for c in header.split("|") if c.strip()]
    at = cells.index("best_vs_control")
    assert cells[at + 1:at + 5] == ["best_vs_library-off", "best_vs_priors-off",
                                    "library-off_vs_ref", "priors-off_vs_ref"]


def test_an_unknown_ablation_is_a_one_line_error(tmp_path: Path) -> None:
    done = _heldout(tmp_path, "--tier", "interpret", "--only", "softmax", "--out",
                    str(tmp_path / "run"), "--ablation", "library-off,no-such-part", timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == ("heldout: unknown --ablation no-such-part (one of "
                                   "library-off, lookahead-off, priors-off, around-off, "
                                   "bundles-off)")
    assert not (tmp_path / "run").exists()


def test_the_columns_of_a_row_share_its_start_gate(tmp_path: Path, monkeypatch) -> None:
    """The full search and each ablated search start from the row's one gate of the start
    kernel: at the interpret tier on softmax the start's text is gated once in all (the
    control, a different text, once more)."""
    import argparse

    import gate
    from gate.cases import scan_cases
    from lineage.control import autotune_control
    from lineage.shipped import shipped_library_path

    spec = importlib.util.spec_from_file_location("heldout_bench_share", REPO / "bench" / "heldout.py")
    heldout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(heldout)
    [case] = [c for c in scan_cases([REPO / "bench/heldout"])[0] if c.name == "softmax"]
    start = case.start_path().read_text()
    seen: list[str] = []
    real = gate.check

    def counting(source, *a, **kw):
        seen.append(source)
        return real(source, *a, **kw)

    monkeypatch.setattr(gate, "check", counting)
    args = argparse.Namespace(tier="interpret", library=str(shipped_library_path()),
                              budget_steps=1, box=300.0, ablation=list(ALL), gates=None)
    rec = heldout.bench_operator(case, args, tmp_path)
    assert rec["status"] == "done" and set(rec["ablations"]) == set(ALL)
    assert seen.count(start) == 1
    assert seen.count(autotune_control(start, max_configs=1)) == 1


def test_fresh_gates_wait_until_every_search_ended(tmp_path: Path, monkeypatch) -> None:
    """With several operators at once on the device, each best (the search's and each
    ablation's) is gated again and the control gated only after every search has ended, one
    at a time, in that order; each best's file is then removed and the record is done."""
    import argparse
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("heldout_bench_quiet", REPO / "bench" / "heldout.py")
    heldout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(heldout)
    ns = argparse.Namespace
    assert heldout._deferred(ns(tier="device", jobs=3))
    assert not heldout._deferred(ns(tier="device", jobs=1))
    assert not heldout._deferred(ns(tier="interpret", jobs=3))
    assert not heldout._deferred(ns(tier="device", jobs=3, from_partial=True))
    best, ablated = tmp_path / "best.py", tmp_path / "ablated.py"
    best.write_text("# best")
    ablated.write_text("# ablated")
    rec = {"best": {"ok": True, "ms": 1.0, "pending": str(best)},
           "ablations": {"library-off": {"ok": True, "ms": 1.5, "pending": str(ablated)},
                         "priors-off": {"ok": True, "ms": 2.0}},
           "control": {"ok": None, "ms": None, "pending": True}, "status": "searched"}
    calls: list[str] = []
    monkeypatch.setattr(heldout, "_check_file",
                        lambda args, case, path, timeout=None: calls.append(path.name) or path.name)
    monkeypatch.setattr(heldout, "_verdict_summary", lambda verdict: {"ok": True, "ms": len(verdict) / 10})
    monkeypatch.setattr(heldout, "control",
                        lambda case, path, args: calls.append("control") or {"ok": True, "ms": 0.7})
    case = SimpleNamespace(name="op", start_path=lambda: tmp_path / "start.py")
    heldout.settle(case, rec, ns(tier="device", jobs=3))
    assert calls == ["best.py", "ablated.py", "control"]
    assert rec["best"]["regate"]["ms"] == 0.7 and "pending" not in rec["best"]
    assert rec["ablations"]["library-off"]["regate"]["ms"] == 1.0
    assert "regate" not in rec["ablations"]["priors-off"]
    assert rec["control"]["ms"] == 0.7 and rec["status"] == "done"
    assert not best.exists() and not ablated.exists()
