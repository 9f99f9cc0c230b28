"""The cost of a device gate against the GPU work in it (bench/gate_cost.py), and the reference
timed with TF32 allowed beside the fp32 one (x/ref_tf32): arithmetic on the CPU, the budget and
the baseline on a GPU with a large problem written here."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from gate.verdict import Timing, VariantTiming

REPO = Path(__file__).resolve().parents[1]


def _bench(name: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


COST = _bench("gate_cost")


def test_overhead_is_the_wall_time_outside_the_timed_gpu_runs() -> None:
    phases = [("spawn", 1.0), ("references", 4.0), ("timing", 6.0), ("autotune timing", 2.0)]
    c = COST.cost(phases, wall_s=14.0, timed_s=5.0)
    assert c["gpu_s"] == 7.0 and c["overhead_s"] == 7.0
    assert c["overhead_allowed_s"] == pytest.approx(5.0 + 0.2 * 7.0)
    assert not c["within_budget"]  # 7 s outside the GPU runs, 6.4 s allowed
    assert COST.cost(phases, wall_s=12.0, timed_s=5.0)["within_budget"]
    assert not COST.cost({"timing": 1.0}, wall_s=31.0, timed_s=30.0)["within_budget"]  # wall > 30 s
    text = COST.table([{"op": "level1/x", "bytes": 2e9, "ok": True, **c}])
    assert "| level1/x | 2.00 | pass | 14.0 | 7.0 | 7.0 | 6.4 | MISSED | 1.00 | 4.00 | 6.00 | 2.00 |" in text


def test_the_tf32_reference_time_travels_in_the_verdict_and_the_bench_row() -> None:
    timing = Timing(2.0, 4.0, (VariantTiming("default", 2.0, 4.0, reference_tf32_ms=3.0),), 1.0)
    back = Timing.from_json(timing.to_json())
    assert back.reference_tf32_ms == 3.0 and back.speedup_tf32 == 1.5 and back.speedup == 2.0
    assert Timing(2.0, 4.0, (VariantTiming("default", 2.0, 4.0),)).to_json().get("speedup_tf32") is None
    compiled = Timing(2.0, 4.0, (VariantTiming("default", 2.0, 4.0, reference_compile_ms=1.0),))
    again = Timing.from_json(compiled.to_json())
    assert again.speedup_compile == 0.5 and again.reference_tf32_ms is None
    from lineage.commands import bench

    case = SimpleNamespace(name="p", device_shapes={"default": {"dtype": "fp32"}}, bench_shapes={},
                           module=lambda: SimpleNamespace(REFERENCE_NAME="torch", flops=lambda s: 1e9,
                                                                  bytes_moved=lambda s: 1e9))
    verdict = SimpleNamespace(ok=True, reason=None, flags=(), timing=back)
    [row] = bench.rows_for_verdict(case, "k.py", "triton", verdict, {"matrix_tflops": 1.0, "copy_tbs": 1.0})
    assert row.reference_tf32_ms == 3.0 and row.speedup_tf32 == 1.5
    assert "| 2.000 | 1.500 |" in "\n".join(bench.table_lines([row]))


# A problem of 4.3 GB of fp32 input and a plain start kernel for it, written for this test.
LARGE_PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x / torch.sqrt(torch.mean(x * x, dim=1, keepdim=True) + 1e-5)


n = 64
c = 64
h = 512
w = 512


def get_inputs():
    return [torch.rand(n, c, h, w)]


def get_init_inputs():
    return []
'''

LARGE_START = '''import torch
import triton
import triton.language as tl


@triton.jit
def channel_rms(x_ptr, y_ptr, C, P, BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr):
    img = tl.program_id(1).to(tl.int64)
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    ch = tl.arange(0, BLOCK_C)
    offs = img * C * P + ch[:, None] * P + p[None, :]
    keep = (ch[:, None] < C) & (p[None, :] < P)
    x = tl.load(x_ptr + offs, mask=keep, other=0.0)
    scale = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / C + 1e-5)
    tl.store(y_ptr + offs, x * scale[None, :], mask=keep)


def run(x):
    n, c = x.shape[0], x.shape[1]
    p = x.numel() // (n * c)
    y = torch.empty_like(x)
    channel_rms[(triton.cdiv(p, 32), n)](x, y, c, p, BLOCK_C=triton.next_power_of_2(c), BLOCK_P=32)
    return y
'''


@pytest.mark.gpu
def test_a_large_problems_device_gate_meets_the_phase_budget(tmp_path: Path) -> None:
    import gate

    problem = tmp_path / "channel_rms.py"
    problem.write_text(LARGE_PROBLEM)
    start = tmp_path / "channel_rms_start.py"
    start.write_text(LARGE_START)
    case = gate.load_case(problem)
    gate.prestart("device", wait=COST.STARTUP_WAIT_S, case=case)  # the run's start-up, paid once
    row = COST.gate_once(start, case)
    assert row["ok"], row["reason"]
    assert row["wall_s"] <= COST.WALL_BUDGET_S, row
    assert row["overhead_s"] <= row["overhead_allowed_s"], row
    assert {"references", "correctness", "timing"} <= set(row["phases"])


@pytest.mark.gpu
def test_an_fp32_problems_verdict_has_the_tf32_and_compiled_references(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gate

    monkeypatch.setenv("KLINEAGE_GATE_COMPILE", "1")

    problem = tmp_path / "small_rms.py"
    problem.write_text(LARGE_PROBLEM.replace("n = 64", "n = 2"))
    start = tmp_path / "small_rms_start.py"
    start.write_text(LARGE_START)
    verdict = gate.check_file(start, gate.load_case(problem), "device", cache=False)
    assert verdict.ok, verdict.reason
    assert verdict.timing.reference_tf32_ms is not None and verdict.timing.reference_tf32_ms > 0
    assert "speedup_tf32" in verdict.to_json()["timing"]
    assert verdict.timing.reference_compile_ms is not None, verdict.flags
    assert verdict.to_json()["timing"]["speedup_compile"] > 0


def test_an_interpret_gate_records_each_phase_for_the_cost_table() -> None:
    """The phases bench/gate_cost.py tabulates are in the verdict at the interpret tier too:
    the worker's phases in order, the parent's comparisons, each a duration in seconds."""
    import gate

    saxpy = REPO / "tests" / "data" / "cases" / "saxpy"
    verdict = gate.check_file(saxpy / "saxpy_triton.py", saxpy, "interpret", cache=False)
    assert verdict.ok, verdict.reason
    names = [name for name, _ in verdict.phases]
    worker = ["start-up", "references", "load_candidate", "correctness", "configs", "knockout",
              "sealed", "repeat"]
    assert [n for n in names if n in worker] == worker
    assert "spawn" in names and "compare (parent)" in names
    assert all(s >= 0 for _, s in verdict.phases)
    row = COST.cost(verdict.phases, wall_s=sum(s for _, s in verdict.phases), timed_s=0.0)
    assert set(worker) <= set(row["phases"]) and row["gpu_s"] == 0.0


def test_the_budget_check_fails_where_the_overhead_or_the_wall_is_over() -> None:
    # within: 4 s outside 20 s of GPU work (9 s allowed), 24 s in all
    assert COST.cost({"timing": 20.0}, wall_s=24.0, timed_s=20.0)["within_budget"]
    over = COST.cost({"spawn": 4.4, "timing": 1.2}, wall_s=8.2, timed_s=1.2)  # 7 s > 5.24 s
    assert not over["within_budget"] and over["overhead_s"] == 7.0
    assert over["overhead_allowed_s"] == pytest.approx(5.24)
    row = {"op": "level1/4 [before]", "problem": "level1/4", "mode": "before", "bytes": 8.6e9,
           "ok": True, **over}
    after = {**row, "op": "level1/4 [after]", "mode": "after",
             **COST.cost({"timing": 1.2}, wall_s=5.0, timed_s=1.2)}
    text = COST.table([row, after])
    assert "| level1/4 [before] | 8.60 | pass | 8.2 | 1.2 | 7.0 | 5.2 | MISSED |" in text
    assert "| level1/4 [after] | 8.60 | pass | 5.0 | 1.2 | 3.8 | 5.2 | met |" in text
    assert "spawn" in text and "timing" in text
    parts = {**after, "phases": {"start-up": 0.5, "start-up: cuda": 0.4, "timing": 1.2}}
    assert "start-up: cuda" not in COST.table([parts])
    assert "| start-up: cuda |" in COST.table([parts], parts=True)
    line = COST.comparison([row, after])
    assert line.startswith("level1/4: before: wall 8.2 s") and "after: wall 5.0 s" in line


def test_the_modes_set_and_clear_the_gates_settings() -> None:
    env = {"KLINEAGE_GATE_COMPARE": "worker", "OTHER": "x"}
    COST.apply_mode("before", env)
    assert env == {"KLINEAGE_GATE_COMPARE": "parent", "KLINEAGE_GATE_SETS": "job",
                   "KLINEAGE_GATE_STANDBY": "0", "KLINEAGE_GATE_FUSED": "0", "OTHER": "x"}
    COST.apply_mode("unfused", env)
    assert env == {"KLINEAGE_GATE_FUSED": "0", "OTHER": "x"}
    COST.apply_mode("after", env)
    assert env == {"OTHER": "x"}
    COST.apply_mode("parked-host", env)  # the lean plan as it first kept its sets
    assert env == {"KLINEAGE_GATE_REDRAW": "0", "KLINEAGE_GATE_ROOM": "0", "KLINEAGE_GATE_STAGING": "0",
                   "KLINEAGE_GATE_SAMPLES": "host", "OTHER": "x"}
    COST.apply_mode("after", env)
    assert env == {"OTHER": "x"}
    COST.apply_mode("held-refs", env)  # references kept, not computed again where compared
    assert env == {"KLINEAGE_GATE_RECOMPUTE": "0", "OTHER": "x"}
    COST.apply_mode("after", env)
    assert env == {"OTHER": "x"}


@pytest.mark.gpu
def test_a_large_problem_under_a_lean_plan_meets_the_phase_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The large problem with device memory for a lean plan (its reference step's peak taken
    as two outputs) and its six references beside it with an output to spare, too little for
    every set (as when it shares a GPU): its sets leave the device and are drawn again where
    used, its references are computed again where compared (or stay in the room), and the
    gate stays in the budget."""
    import gate
    from gate import memplan

    problem = tmp_path / "channel_rms.py"
    problem.write_text(LARGE_PROBLEM)
    start = tmp_path / "channel_rms_start.py"
    start.write_text(LARGE_START)
    case = gate.load_case(problem)
    _, set_bytes, out_bytes = case.module().work(dict(next(iter(case.shapes.values()))))
    monkeypatch.setenv(memplan.CAP_ENV, str(int(memplan.lean_bytes(int(set_bytes), int(out_bytes),
                                                                   int(2 * out_bytes)) + 7 * out_bytes)))
    gate.prestart("device", wait=COST.STARTUP_WAIT_S, case=case)
    row = COST.gate_once(start, case)
    assert row["ok"], row["reason"]
    assert any("leaves the device between its uses" in f for f in row["flags"]), row["flags"]
    assert any("drawn again on the device" in f for f in row["flags"]), row["flags"]
    assert row["wall_s"] <= COST.WALL_BUDGET_S, row
    assert row["overhead_s"] <= row["overhead_allowed_s"], row


def test_the_store_reads_a_gate_cost_record(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("results_store", REPO / "bench" / "store.py")
    store = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(store)
    row = {"op": "level1/4 [after]", "problem": "level1/4", "mode": "after", "bytes": 8.6e9,
           "ok": True, "reason": None, "candidate_ms": 1.0, "reference_ms": 2.0,
           **COST.cost({"spawn": 0.3, "timing": 1.2}, wall_s=5.0, timed_s=1.2)}
    record = tmp_path / "gate_cost.json"
    record.write_text(__import__("json").dumps({"rows": [row], "gpu": "NVIDIA H200",
                                                 "wall_budget_s": 30.0}))
    [got] = store.rows_of(record)
    assert got["benchmark"] == "gate_cost" and got["operator"] == "level1/4"
    assert got["variant"] == "after" and got["gpu"] == "NVIDIA H200"
    assert got["metrics"]["overhead_s"] == 3.8 and got["metrics"]["within_budget"] is True
    assert got["metrics"]["phases.spawn"] == 0.3
