"""bench/roundtrip.py's scheduler (what a device call starts with the time it has left) and
the held-out lineages its admissions get."""
from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("_roundtrip_bench", ROOT / "bench" / "roundtrip.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_run_without_its_share_of_the_box_is_left_for_the_next_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rt = _module()
    started: list[dict[str, Any]] = []

    def launch(spec: dict[str, Any], gpu: str | None) -> dict[str, Any]:
        started.append(spec)
        return {"error": "not run in this test"}

    monkeypatch.setattr(rt, "launch", launch)
    monkeypatch.setattr(rt, "say", lambda message: None)
    specs = [{"name": "long", "box": 200.0, "grace": 0.0},
             {"name": "short", "box": 50.0, "grace": 0.0}]
    end = time.monotonic() + 100.0
    rt.schedule(specs, [None], end, min_share=0.9)
    # 100 s left: "long" would get half of its box (skipped), "short" all of its own.
    assert [s["name"] for s in started] == ["short"] and started[0]["box"] == 50.0
    started.clear()
    rt.schedule(specs, [None], time.monotonic() + 100.0)  # without a share: cut to what is left
    assert [s["name"] for s in started] == ["long", "short"]
    # the box is cut to what is left after the grace and the kill margin
    assert 95.0 - rt.KILL_MARGIN_S <= started[0]["box"] <= 100.0 - rt.KILL_MARGIN_S


def test_leave_one_out_table_splits_a_case_timed_over_several_variants() -> None:
    rt = _module()
    verdict = {"timing": {"candidate_ms": 3.0, "variants": [
        {"variant": "causal", "candidate_ms": 2.0}, {"variant": "noncausal", "candidate_ms": 1.0}]}}
    assert rt._variant_ms(verdict) == {"causal": 2.0, "noncausal": 1.0}
    assert rt._variant_ms({"timing": None}) == {}
    record = {"name": "loo-x-0", "kind": "loo", "case": "x", "trial": 0, "reached_gate": True,
              "improved": True, "start_ms": 9.0, "best_ms": 3.0, "speedup": 3.0,
              "fraction_of_expert": 0.5, "passes_recovered": [], "passes_removed": ["p"],
              "applied": ["p"], "gated": 4, "expert_ms": 1.5,
              "expert_variant_ms": {"causal": 0.5, "noncausal": 1.0},
              "best_variant_ms": rt._variant_ms(verdict)}
    text = rt.tables([record], "device")
    rows = [line for line in text.splitlines()
            if line.startswith(("| x | causal |", "| x | noncausal |"))]
    by_variant = {row.split("|")[2].strip(): float(row.split("|")[5]) for row in rows}
    assert by_variant == {"causal": 0.25, "noncausal": 1.0}
    # one variant: no split table
    single = dict(record, expert_variant_ms={"default": 1.5}, best_variant_ms={"default": 3.0})
    assert "per shape variant" not in rt.tables([single], "device")


def test_admission_takes_the_repositorys_held_out_lineages_unless_told_otherwise(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without --held-out, each library's admission gets the repository's held-out lineages
    (loo-<case> without that case's), and the log says where they came from; `--held-out none`
    gives none, a list gives that list, and without the repository's folder there are none."""
    rt = _module()
    calls: dict[str, tuple[list[str], str]] = {}

    def build_library(name, lineages, libraries, tier, max_trials, held_out=(), jobs=1,
                      deadline=None, executor=None, held_out_from="--held-out"):
        calls[name] = ([str(path) for _, path in held_out], held_out_from)
        return None  # no admission in this test

    logged: list[str] = []
    monkeypatch.setattr(rt, "build_library", build_library)
    monkeypatch.setattr(rt, "say", logged.append)
    fixtures = ROOT / "tests" / "data" / "lineages"
    base = [str(fixtures / "gemm.json"), str(fixtures / "conv2d.json"), "--only", "loo",
            "--libraries-only", "--out", str(tmp_path / "rt")]

    def run(*extra: str) -> dict[str, tuple[list[str], str]]:
        calls.clear()
        logged.clear()
        assert rt.main([*base, *extra]) == 0
        assert set(calls) == {"loo-gemm", "loo-conv2d"}
        return dict(calls)

    repo = {str(p) for p in (ROOT / rt.DEFAULT_HELD_OUT).glob("*/lineage.json")}
    assert any("/gemm/" in p for p in repo) and len(repo) > 1
    got = run()
    assert set(got["loo-conv2d"][0]) == repo
    # loo-gemm leaves gemm's own held-out lineage out, as it does a given one's
    assert set(got["loo-gemm"][0]) == {p for p in repo if "/heldout/gemm/" not in p}
    assert all(rt.DEFAULT_HELD_OUT in how and "--held-out none" in how for _, how in got.values())
    assert any("held-out lineages for admission: the repository's" in line for line in logged)
    assert run("--held-out", "none") == {n: ([], "none (--held-out none)") for n in calls}
    one = str(ROOT / rt.DEFAULT_HELD_OUT / "trmm")
    assert run("--held-out", one)["loo-gemm"] == ([str(Path(one) / "lineage.json")], "--held-out")
    monkeypatch.setattr(rt, "DEFAULT_HELD_OUT", str(tmp_path / "absent"))
    assert all(paths == [] and "no --held-out" in how for paths, how in run().values())


def test_an_admission_logs_and_records_where_its_held_out_lineages_came_from(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The library's admission.json and its log name the held-out lineages and how they were
    chosen, the untried cards' line included (admission itself faked)."""
    import lineage.admission

    rt = _module()
    seen: dict[str, Any] = {}

    def admit(lib, lins, **kw):
        seen.update(kw)
        return lineage.admission.AdmissionReport(admitted=(), rejected=(), untried=("card-x",), trials=0)

    monkeypatch.setattr(lineage.admission, "admit", admit)
    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path / "cache"))  # build_library sets it
    logged: list[str] = []
    monkeypatch.setattr(rt, "say", logged.append)
    lineages = rt.load_case_lineages([str(ROOT / "tests" / "data" / "lineages" / "gemm.json")])
    held = rt.load_held_out([str(ROOT / rt.DEFAULT_HELD_OUT / "trmm")])
    how = "the repository's, test"
    folder = rt.build_library("loo-x", list(lineages.values()), tmp_path / "libs", "interpret", 1,
                              held, held_out_from=how)
    assert folder is not None and len(seen["held_out"]) == 1
    record = json.loads((folder / "admission.json").read_text())
    assert record["held_out_from"] == how and record["held_out"] == [str(held[0][1])]
    assert any(f"held-out lineages: {how}: trmm" in line for line in logged)
    assert any("untried" in line and how in line and "card-x" in line for line in logged)
