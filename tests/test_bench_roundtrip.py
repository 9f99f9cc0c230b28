"""bench/roundtrip.py's scheduler: what a device call starts with the time it has left."""
from __future__ import annotations

import importlib.util
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
