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


def test_a_kernelbench_tier_record_renders_its_problems_and_its_metrics_apart(tmp_path: Path) -> None:
    import argparse

    store = _store()
    tier_spec = importlib.util.spec_from_file_location("kernelbench_tier", ROOT / "bench" / "kernelbench_tier.py")
    tier = importlib.util.module_from_spec(tier_spec)
    sys.modules.setdefault("kernelbench_tier", tier)
    tier_spec.loader.exec_module(tier)
    timed = {"ok": True, "ms": 1.0, "reference_ms": 4.0, "reference_tf32_ms": 2.0}
    records = [{"op": "level1/1_mm", "level": "level1", "status": "done", "compute_bound": True,
                "intensity": 600.0, "reference_ms": 4.0, "start": dict(timed, ms=8.0), "best": timed,
                "control": dict(timed, ms=2.0),
                "baselines": {"eager_ms": 4.0, "compile_ms": 8.0, "compile_status": "ok"}},
               {"op": "level1/2_sum", "level": "level1", "status": "not run yet", "compute_bound": False,
                "intensity": 0.0, "start": {"ok": False}}]
    result = tier.build_tables(records, argparse.Namespace(tier="device", library="lib", budget_steps=12,
                                                           box=100.0))
    record = tmp_path / "kernelbench" / "h200-abc1234" / "kernelbench.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps(result))
    rows = store.rows_of(record)
    problems = {r["operator"]: r["metrics"] for r in rows if r["variant"] != store.KERNELBENCH_METRICS}
    assert problems["level1/1_mm"]["best_x_eager_tf32"] == 2.0 and problems["level1/1_mm"]["best_x_compile"] == 8.0
    assert problems["level1/1_mm"]["compile_ms"] == 8.0 and problems["level1/2_sum"]["status"] == "not run yet"
    metrics = {r["operator"]: r["metrics"] for r in rows if r["variant"] == store.KERNELBENCH_METRICS}
    assert metrics["best vs compile (all problems)"]["fast_1.5"] == 0.5  # 1 of 2 problems
    assert metrics["best vs eager_tf32 (compute-bound)"] == {"n": 1, "correct": 1, "timed": 1, "fast_0": 1.0,
                                                              "fast_1": 1.0, "fast_1.5": 1.0, "fast_2": 0.0,
                                                              "geomean": 2.0}
    for r in rows:
        r["benchmark"] = "kernelbench"
    text = store.render_table("kernelbench", rows)
    head, _, apart = text.partition("KernelBench's metrics")
    assert "| level1/1_mm | level1 | done | yes | 600 | 8 | 1 | 2 | 4 | 2 | 8 |" in head
    assert "fast_1.5" not in head and "| best vs compile (all problems) |" in apart
    assert "Geometric mean of best_x_eager_tf32: 2.000 over 1 rows (the compute-bound problems timed)" in head


def test_a_gemm_schedule_record_gives_a_row_per_variant_timed_refused_or_failed(tmp_path: Path) -> None:
    store = _store()
    site = {"kernel": "k", "block_tile": [64, 64, 16]}
    record = tmp_path / "cuda" / "h200-abc1234" / "gemm_schedule.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"size": 512, "arch": "sm_90a", "device": "NVIDIA H200", "when": "2026-01-02 03:04:05",
        "starts": {"tiled": {"site": site, "refused": {"wgmma_wide": "the block is not 2 or 4 warpgroups"},
                             "ms": {"cublas": 0.5, "start": 5.0, "+mma": 1.0},
                             "vs_cublas": {"cublas": 1.0, "start": 0.1, "+mma": 0.5},
                             "max_rel_err": {"start": 0.003, "+mma": 0.0},
                             "failed": {"+wgmma": "CompileException: ptxas error\nmore lines"}},
                   "naive": {"site": None, "refused": {"mma": "no site"}},
                   "broken": {"site": site, "refused": {}, "error": "CudaError: not found"}}}))
    rows = {(r["operator"], r["variant"]): r for r in store.rows_of(record)}
    timed = rows[("gemm_schedule 512^3: tiled", "+mma")]
    assert timed["metrics"] == {"ms": 1.0, "vs_cublas": 0.5, "max_rel_err": 0.0}
    assert (timed["commit"], timed["gpu"], timed["date"]) == ("abc1234", "NVIDIA H200", "2026-01-02")
    assert rows[("gemm_schedule 512^3: tiled", "+wgmma")]["metrics"] == {
        "status": "failed: CompileException: ptxas error"}
    assert rows[("gemm_schedule 512^3: tiled", "+wgmma_wide")]["metrics"]["status"].startswith("refused: ")
    assert rows[("gemm_schedule 512^3: naive", "+mma")]["metrics"] == {"status": "refused: no site"}
    assert rows[("gemm_schedule 512^3: broken", "start")]["metrics"] == {"status": "error: CudaError: not found"}
    assert len(rows) == 7


def test_a_device_cuda_roles_record_sets_each_rule_against_the_start(tmp_path: Path) -> None:
    store = _store()
    verdict = {"ok": True, "stage": "timing", "reason": "", "ms": 0.5, "reference_ms": 1.0}
    kernel = {"kernel": "cu_sum", "start_verdict": dict(verdict, ms=2.0),
              "bandwidth": {"copy_ms": 0.25},
              "rules": {"vectorize-global": {"applied": 2, "refusals": [], "verdict": verdict},
                        "row-cache": {"applied": 0, "refusals": []},
                        "launch-bounds": {"applied": 1, "refusals": [],
                                          "verdict": {"ok": False, "reason": "output differs\nat 3",
                                                      "ms": None}}}}
    record = tmp_path / "cuda_roles" / "h200-abc1234" / "cuda_roles.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"tier": "device", "kernels": [kernel]}))
    rows = {r["variant"]: r for r in store.rows_of(record)}
    assert rows["start"]["benchmark"] == "cuda_roles-device" and rows["start"]["commit"] == "abc1234"
    assert rows["start"]["metrics"] == {"ok": True, "ms": 2.0, "reference_ms": 1.0, "x_ref": 0.5,
                                        "of_copy": 0.125}
    assert rows["vectorize-global"]["metrics"] == {"applied": 2, "ok": True, "ms": 0.5, "reference_ms": 1.0,
                                                   "x_ref": 2.0, "x_start": 4.0, "of_copy": 0.5}
    assert rows["row-cache"]["metrics"] == {"applied": 0, "reason": "no site"}
    assert rows["launch-bounds"]["metrics"] == {"applied": 1, "ok": False, "reason": "output differs"}
    record.write_text(json.dumps({"tier": "static", "kernels": [kernel]}))  # no timings: not a store record
    assert store.rows_of(record) == []


def test_gathered_gate_verdicts_give_a_row_per_kernel_gated(tmp_path: Path) -> None:
    store = _store()
    record = tmp_path / "cuda" / "h200-abc1234" / "gate_verdicts.json"
    record.parent.mkdir(parents=True)
    passed = {"ok": True, "failure_kind": None, "reason": None,
              "correctness": {"max_rel_err": 0.0},
              "timing": {"candidate_ms": 0.26, "reference_ms": 0.18, "speedup": 0.69}}
    failed = {"ok": False, "failure_kind": "wrong_output", "reason": "rel err 0.5\nat (3, 4)"}
    record.write_text(json.dumps({"case": "mm", "reference": "cublas", "command": "klineage gate ...",
                                  "verdicts": {"+tma": passed, "+broken": failed}}))
    rows = {r["variant"]: r for r in store.rows_of(record)}
    assert rows["+tma"]["operator"] == "gate: mm"
    assert rows["+tma"]["metrics"] == {"ms": 0.26, "reference_ms": 0.18, "vs_cublas": 0.69,
                                       "max_rel_err": 0.0, "ok": True}
    assert rows["+broken"]["metrics"] == {"ok": False, "status": "wrong_output: rel err 0.5"}
    assert rows["+tma"]["commit"] == "abc1234" and rows["+tma"]["command"] == "klineage gate ..."


def test_a_held_out_row_keeps_its_share_of_the_copy_bandwidth() -> None:
    """A memory-bound operator is judged against the measured copy bandwidth: the row keeps
    what `bench/heldout.py` measured of it."""
    record = {"rows": [{"op": "rowsum", "family": "reduction", "records": "x/h200x2-abcdef1",
                        "status": "done", "best_vs_ref": 1.2,
                        "bandwidth": {"bytes": 1e9, "copy_ms": 0.25, "best_of_copy": 0.93,
                                      "control_of_copy": 0.9, "reference_of_copy": 0.8}}]}
    (row,) = list(_store().operators(Path("bench/results/heldout/x/heldout.json"), record))
    assert row["metrics"]["bandwidth.best_of_copy"] == 0.93
    assert row["metrics"]["bandwidth.control_of_copy"] == 0.9
    assert row["metrics"]["bandwidth.reference_of_copy"] == 0.8


def test_an_ab_variant_that_raised_is_a_row_that_says_it_did_not_run(tmp_path: Path) -> None:
    """An A/B record (`bench/ab_probe.py`) whose variant raised (a configuration over the shared
    memory) has no time: its row says it did not run rather than holding no metric at all."""
    store = _store()
    record = tmp_path / "ab.json"
    record.write_text(json.dumps({"case": "op A/B", "gpu": "G", "command": "ab", "timings": {
        "reference": {"ms": 0.5}, "fast": {"ms": 0.25, "rel_err": 0.0},
        "over": {"error": "OutOfResources: out of resource: shared memory"}}}))
    target = tmp_path / "store.jsonl"
    assert store.ingest([record], target)[0] == 3
    got = {r["variant"]: r["metrics"] for r in store.load(target)}
    assert got["over"] == {"ran": False} and got["fast"]["ms"] == 0.25
