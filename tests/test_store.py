"""The results store (bench/store.py): the tables in bench/results are what the store gives,
and a record's figures become rows that say what produced them."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _store():
    spec = importlib.util.spec_from_file_location("results_store", ROOT / "bench" / "store.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tables_are_generated_from_the_store() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "store.py"), "check"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    rows = _store().load()
    assert {r["benchmark"] for r in rows} >= {"experts", "heldout", "styles", "roundtrip"}
    for r in rows:
        assert set(r) == {"benchmark", "operator", "variant", "metrics", "command", "commit",
                          "gpu", "date", "source"}
        assert r["metrics"] and r["source"].startswith("bench/results/")


def test_a_record_becomes_rows_and_an_excluded_row_leaves_the_headline(tmp_path: Path) -> None:
    store = _store()
    record = tmp_path / "experts.json"
    rows = [{"case": "a", "variant": "default", "expert": "a.py", "language": "triton",
             "ok": True, "expert_ms": 1.0, "reference_ms": 2.0, "speedup": 2.0},
            {"case": "b", "variant": "default", "expert": "b.py", "language": "triton",
             "ok": True, "expert_ms": 1.0, "reference_ms": 8.0, "speedup": 8.0,
             "reference_backend": "fallback: pytorch", "excluded": "the reference is a fallback"}]
    record.write_text(json.dumps({"gpu": "G", "command": "klineage bench", "rows": rows}))
    target = tmp_path / "store.jsonl"
    added, skipped = store.ingest([record], target)
    assert (added, skipped) == (2, [])
    got = store.load(target)
    assert [r["operator"] for r in got] == ["a", "b"] and got[0]["gpu"] == "G"
    assert got[0]["command"] == "klineage bench" and got[1]["metrics"]["excluded"]
    assert store.ingest([record], target)[0] == 2 and len(store.load(target)) == 2  # replaced
    text = store.render_table("experts", got)
    assert "Geometric mean of speedup: 2.000 over 1 rows (left out: b" in text
    assert "| b | default (b.py) |" in text and "fallback: pytorch" in text
