"""The held-out tier: its start kernels and KernelBench problems at the interpret tier, cases
given by path from any working directory, `klineage cases DIR`, the KernelBench adapter, and a
smoke run of bench/heldout.py."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gate
from gate import kernelbench
from gate.cases import find_cases
from lineage.cli import main

REPO = Path(__file__).resolve().parents[1]
HELDOUT = REPO / "bench" / "heldout"
# Case paths only at collection: loading a KernelBench problem whose Model has parameters sizes it
# on torch's meta device, which imports torch._dynamo and with it triton; in-process interpreter
# tests of other files need triton imported after TRITON_INTERPRET is set.
OPERATOR_PATHS = find_cases([HELDOUT])
STYLE_PATHS = find_cases([REPO / "bench" / "styles"])


def _operators() -> list[gate.Case]:
    return [gate.load_case(p) for p in OPERATOR_PATHS]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_tier_has_its_operators() -> None:
    operators = _operators()
    folders = [c for c in operators if not c.problem]
    problems = [c for c in operators if c.problem]
    assert len(folders) >= 14 and len(problems) >= 4
    assert all(c.start_path() is not None and c.start_path().is_file() for c in operators)


@pytest.mark.parametrize("path", OPERATOR_PATHS, ids=[
    p.parent.name if p.name == "case.py" else p.stem for p in OPERATOR_PATHS])
def test_start_kernel_passes_the_interpret_tier(path: Path) -> None:
    case = gate.load_case(path)
    verdict = gate.check_file(case.start_path(), case, tier="interpret")
    assert verdict.ok, (case.ref, verdict.failure_kind, verdict.reason)
    assert verdict.correctness is not None and verdict.correctness.max_rel_err <= max(case.tolerance.values())


@pytest.mark.parametrize("path", STYLE_PATHS, ids=[
    p.parent.name if p.name == "case.py" else p.stem for p in STYLE_PATHS])
def test_style_start_kernel_passes_the_interpret_tier(path: Path) -> None:
    case = gate.load_case(path)
    verdict = gate.check_file(case.start_path(), case, tier="interpret")
    if not verdict.ok and "Block pointers have been removed" in str(verdict.reason):
        pytest.skip("this Triton's interpreter has no block pointers (the GPU's runs them)")
    assert verdict.ok, (case.ref, verdict.failure_kind, verdict.reason)


def test_case_refs_resolve_from_another_working_directory(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = gate.load_case(HELDOUT / "mm2048")
    assert folder.ref == "bench/heldout/mm2048"
    assert gate.load_case(folder.ref).path == folder.path
    problem = gate.load_case(HELDOUT / "kernelbench" / "sum_dim.py")
    assert gate.load_case(problem.ref).path == problem.path
    assert gate.load_case("gemm").ref == "gemm"


@pytest.mark.parametrize("ref", ["bench/heldout/softmax", "bench/heldout/kernelbench/sum_dim.py"])
def test_gate_and_optimize_take_a_case_path_from_anywhere(ref: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    case = gate.load_case(REPO / ref)
    monkeypatch.chdir(tmp_path)
    code, out, _ = _run(capsys, "gate", str(case.start_path()), "--case", str(REPO / ref),
                        "--tier", "interpret", "--json")
    assert code == 0 and json.loads(out)["ok"]
    # Budget 0: the start kernel is gated and the pass context built from the case, nothing more.
    code, out, err = _run(capsys, "optimize", str(case.start_path()), "--case", str(REPO / ref),
                          "--tier", "interpret", "--budget-steps", "0", "--out", str(tmp_path / "o"),
                          "--json")
    assert code == 0, err
    assert json.loads(out)["library"]["shipped"] is True  # no --library: the shipped one, named
    lineage = json.loads((tmp_path / "o" / "lineage.json").read_text())
    refs = {n["case"] for n in lineage["nodes"] if n.get("case")}
    assert refs == {ref}
    assert gate.load_case(ref).path == case.path  # the lineage's reference finds the case again


@pytest.mark.parametrize("ref", ["bench/heldout/softmax", "bench/heldout/kernelbench/sum_dim.py"])
def test_without_case_the_case_beside_the_kernel_is_used(ref: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A start kernel in a case folder, or `<stem>_triton.py` beside a problem file, is gated and
    optimized with no --case; a kernel beside neither is a one-line error (exit 2)."""
    case = gate.load_case(REPO / ref)
    monkeypatch.chdir(tmp_path)
    code, out, _ = _run(capsys, "gate", str(case.start_path()), "--tier", "interpret", "--json")
    assert code == 0 and json.loads(out)["ok"]
    code, out, err = _run(capsys, "optimize", str(case.start_path()),
                          "--tier", "interpret", "--budget-steps", "0", "--out", str(tmp_path / "o"),
                          "--json")
    assert code == 0, err
    lineage = json.loads((tmp_path / "o" / "lineage.json").read_text())
    assert {n["case"] for n in lineage["nodes"] if n.get("case")} == {ref}
    alone = tmp_path / "alone.py"
    alone.write_text(case.start_path().read_text())
    code, out, _ = _run(capsys, "gate", str(alone), "--json")
    assert code == 2 and "no --case given, and none lies beside it" in json.loads(out)["error"]


def test_cases_lists_folders_and_problem_files(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = _run(capsys, "cases", str(HELDOUT), "--json")
    assert code == 0
    records = {r["ref"]: r for r in json.loads(out)["cases"]}
    assert records["bench/heldout/mm1024"]["kind"] == "case"
    assert records["bench/heldout/mm1024"]["start"].endswith("mm1024/mm_naive.py")
    kb = records["bench/heldout/kernelbench/linear_gelu.py"]
    assert kb["kind"] == "problem" and kb["start"].endswith("linear_gelu_triton.py")
    assert kb["shapes"]["default"] == {"batch_size": 4096, "in_features": 2048, "out_features": 4096,
                                       "dtype": "fp32"}
    assert len(records) == len(OPERATOR_PATHS)
    code, _, err = _run(capsys, "cases", str(tmp_path / "missing"))
    assert code == 2 and "missing" in err and "Traceback" not in err


PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.proj = nn.Linear(n_in, n_out)
        self.register_buffer("shift", torch.randn(n_out))

    def forward(self, x, scale):
        return self.proj(x) * scale + self.shift


rows = 4096
n_in = 512
n_out = 256


def get_inputs():
    return [torch.randn(rows, n_in), 0.5]


def get_init_inputs():
    return [n_in, n_out]
'''


def test_problem_parameters_follow_the_inputs_and_feed_the_reference(tmp_path: Path) -> None:
    path = tmp_path / "affine.py"
    path.write_text(PROBLEM)
    case = gate.load_case(path)
    assert case.problem and case.tolerance_for("fp32") == kernelbench.TOLERANCE["fp32"]
    small = dict(case.small_shapes["default"])
    assert small["n_in"] * small["rows"] + small["n_in"] * small["n_out"] <= kernelbench.SMALL_ELEMENTS
    assert small["rows"] < 4096
    module = case.module()
    inputs = module.make_inputs(small, 7, "cpu")
    x, scale, weight, bias, shift = inputs
    assert scale == 0.5 and x.shape == (small["rows"], small["n_in"])
    assert weight.shape == (small["n_out"], small["n_in"]) and bias.shape == shift.shape == (small["n_out"],)
    expected = (x @ weight.T + bias) * scale + shift
    assert torch.allclose(module.reference(*inputs), expected, atol=1e-5)
    # The reference computes with the tensors it is given, not the Model's own.
    other = (x, scale, weight * 2, bias, shift + 1)
    assert torch.allclose(module.reference(*other), (x @ (2 * weight).T + bias) * scale + shift + 1, atol=1e-5)
    # Seeded: the same seed gives the same inputs and parameters.
    again = module.make_inputs(small, 7, "cpu")
    assert all(torch.equal(a, b) for a, b in zip(inputs, again) if isinstance(a, torch.Tensor))


def test_problem_small_inputs_hook(tmp_path: Path) -> None:
    path = tmp_path / "hooked.py"
    path.write_text(PROBLEM + "\n\ndef get_small_inputs():\n    return [torch.randn(3, n_in), 2.0]\n")
    case = gate.load_case(path)
    small = dict(case.small_shapes["default"])
    assert small["inputs"] == "get_small_inputs"
    x = case.module().make_inputs(small, 1, "cpu")[0]
    assert x.shape == (3, 512)


@pytest.mark.parametrize("text, message", [
    ("import torch\nclass Model(torch.nn.Module):\n    pass\n\ndef get_inputs():\n    return []\n",
     "missing get_init_inputs"),
    ("def get_inputs(:\n", "does not parse"),
    (PROBLEM.replace("return [torch.randn(rows, n_in), 0.5]", "raise RuntimeError('no inputs')"),
     "fails to build its inputs or Model"),
])
def test_bad_problem_files_are_one_line_errors(text: str, message: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.py"
    path.write_text(text)
    code, _, err = _run(capsys, "gate", str(HELDOUT / "softmax" / "softmax_rows.py"), "--case", str(path),
                        "--tier", "interpret")
    assert code == 2
    assert message in err and str(path) in err
    assert len(err.strip().splitlines()) == 1


def test_bench_heldout_smoke_at_the_interpret_tier(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, str(REPO / "bench" / "heldout.py"), "--tier", "interpret",
           "--only", "softmax,sum_dim", "--budget-steps", "2", "--jobs", "2", "--out", str(out),
           "--ablation", "library-off"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((out / "heldout.json").read_text())
    rows = {r["op"]: r for r in result["rows"]}
    assert set(rows) == {"softmax", "sum_dim"}
    for row in rows.values():
        assert row["start"]["ok"] and row["status"] == "done"
        assert row["best"]["ok"] and row["best"]["gated"] <= 2
        assert isinstance(row["cards"], list)
        assert "ok" in row["control"]
        # untimed, sweeps are no moves: without a library nothing is gated
        assert row["ablations"]["library-off"]["gated"] == 0
    assert rows["softmax"]["family"] == "reduction" and rows["sum_dim"]["family"] == "kernelbench"
    assert "| reduction | softmax | pass |" in (out / "heldout.md").read_text()
    # A rerun resumes from the records: nothing is run again.
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                           env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert again.returncode == 0 and "2 with a record, 0 to run" in again.stderr


def test_small_sizes_divide_the_sizes_by_one_common_factor(tmp_path: Path) -> None:
    """The problem's proportions are kept: every literal size is divided by the same factor."""
    path = tmp_path / "wide.py"
    path.write_text(PROBLEM.replace("rows = 4096", "rows = 64").replace("n_in = 512", "n_in = 8192"))
    small = dict(gate.load_case(path).small_shapes["default"])
    assert small["n_in"] < 8192
    assert 8192 // small["n_in"] == 64 // small["rows"] == 256 // small["n_out"]


def test_sizes_given_in_one_tuple_or_with_an_annotation_are_reduced_too(tmp_path: Path) -> None:
    """`N, M, K, L = 8, 512, 256, 384` and `L: int = 384` are integer globals like `N = 8`:
    the interpret tier's small sizes halve them (before, the tuple was not read and a problem
    of 1.1 million elements was refused)."""
    path = tmp_path / "mm3d.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n    def forward(self, A, B):\n        return torch.matmul(A, B)\n\n"
        "N, M, K = 8, 512, 256\nL: int = 384\n\n"
        "def get_inputs():\n    return [torch.randn(N, M, K), torch.randn(K, L)]\n\n"
        "def get_init_inputs():\n    return []\n")
    case = gate.load_case(path)
    assert dict(case.shapes["default"]) == {"N": 8, "M": 512, "K": 256, "L": 384, "dtype": "fp32"}
    small = dict(case.small_shapes["default"])
    assert small["N"] == 8 and small["M"] < 512 and small["K"] < 256 and small["L"] < 384
    assert small["N"] * small["M"] * small["K"] + small["K"] * small["L"] <= 1 << 15


@pytest.mark.slow  # a Ray cluster's start and a bench run; the file's gates take minutes in all
def test_bench_heldout_through_ray_gives_the_local_verdicts(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    env = {**__import__("os").environ, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled"}
    rows = {}
    for executor in ("local", "ray"):
        out = tmp_path / executor
        cmd = [sys.executable, str(REPO / "bench" / "heldout.py"), "--tier", "interpret",
               "--only", "softmax", "--budget-steps", "1", "--out", str(out), "--executor", executor]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        rows[executor] = json.loads((out / "heldout.json").read_text())["rows"][0]
    for part in ("start", "control"):
        local, ray = rows["local"][part], rows["ray"][part]
        assert (local["ok"], local["failure_kind"]) == (ray["ok"], ray["failure_kind"]), part
    assert rows["local"]["best"]["ok"] == rows["ray"]["best"]["ok"]
    assert rows["local"]["best"]["gated"] == rows["ray"]["best"]["gated"]


def test_a_folders_flaggems_times_fill_the_column_where_a_record_has_none(tmp_path: Path) -> None:
    """--gems-only writes OUT/gems.json; a later table takes FlagGems' speed over torch from it
    for the records that have no FlagGems time (theirs failed to import), naming the folder."""
    import shutil

    runs = REPO / "bench" / "results" / "heldout" / "h200x4-d4eb01b"
    recs = tmp_path / "recs"
    (recs / "ops").mkdir(parents=True)
    for op in ("bench__heldout__mm1024", "bench__heldout__bmm"):
        shutil.copy(runs / "ops" / f"{op}.json", recs / "ops" / f"{op}.json")
    gems = tmp_path / "gems-run"
    gems.mkdir()
    (gems / "gems.json").write_text(json.dumps({
        "bench__heldout__mm1024": {"ms": 0.02, "torch_ms_same_timer": 0.01, "vs_torch": 0.5,
                                   "rel_err": 0.001, "gpu": "a GPU"},
        "bench__heldout__bmm": {"ms": None, "reason": "NotImplementedError: no bmm"}}))
    env = {**__import__("os").environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, str(REPO / "bench" / "heldout.py"), "--tier", "device", "--tables-only",
           "--only", "mm1024,bmm", "--out", str(gems), "--records", str(recs),
           "--results", str(tmp_path / "table")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {r["op"]: r for r in json.loads((tmp_path / "table.json").read_text())["rows"]}
    assert rows["mm1024"]["flag_gems"]["vs_torch"] == 0.5
    assert rows["mm1024"]["flag_gems"]["from"] == "gems-run"
    assert rows["mm1024"]["records"] == "recs"  # the row's own run is unchanged
    assert "no bmm" in rows["bmm"]["flag_gems"]["reason"]
    text = (tmp_path / "table.md").read_text()
    assert "FlagGems x/ref" in text and "| 0.500 |" in text
    bad = subprocess.run([*cmd[:2], "--tier", "interpret", "--gems-only"], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path, env=env)
    assert bad.returncode == 2 and "--gems-only needs --tier device" in bad.stderr


def test_tables_take_the_best_kernels_fresh_gate_and_each_gates_own_reference(tmp_path: Path) -> None:
    """The search keeps the fastest of the candidates it timed, so its own figure of the best
    kernel is biased low: a record's fresh gate of the best kernel (`regate`) is what the tables
    use, each ratio against the reference of the same gate; a record without one (or whose fresh
    gate failed) keeps the search's figure and says so."""
    import argparse
    import importlib.util

    spec = importlib.util.spec_from_file_location("heldout_bench", REPO / "bench" / "heldout.py")
    heldout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(heldout)
    base = {"family": "gemm", "intensity": 100.0, "reference_ms": 1.0,
            "start": {"ok": True, "ms": 4.0, "reference_ms": 1.0},
            "control": {"ok": True, "ms": 1.25, "reference_ms": 1.1}}
    records = [
        {**base, "op": "again", "best": {"ok": True, "ms": 0.9, "reference_ms": 1.0,
                                         "regate": {"ok": True, "ms": 1.2, "reference_ms": 1.05}}},
        {**base, "op": "failed", "best": {"ok": True, "ms": 0.9, "reference_ms": 1.0,
                                          "regate": {"ok": False, "ms": None, "reason": "x"}}},
        {**base, "op": "old", "best": {"ok": True, "ms": 0.9, "reference_ms": 1.0}},
    ]
    args = argparse.Namespace(tier="device", library="lib", budget_steps=16, box=300.0)
    rows = {r["op"]: r for r in heldout.build_tables(records, args)["rows"]}
    assert rows["again"]["best_from"] == "regate"
    assert rows["again"]["best_vs_ref"] == pytest.approx(1.05 / 1.2)
    assert rows["again"]["control_vs_ref"] == pytest.approx(1.1 / 1.25)
    assert rows["again"]["best_vs_control"] == pytest.approx((1.05 / 1.2) / (1.1 / 1.25))
    for op in ("failed", "old"):
        assert rows[op]["best_from"] == "search"
        assert rows[op]["best_vs_ref"] == pytest.approx(1.0 / 0.9)
    text = heldout.markdown(heldout.build_tables(records, args))
    line = next(l for l in text.splitlines() if "| again |" in l)
    assert "| 1.2000 | 0.9000 |" in line
    assert "| search | 0.9000 |" in next(l for l in text.splitlines() if "| old |" in l)


def test_an_earlier_records_flaggems_time_fills_a_later_record_without_one(tmp_path: Path) -> None:
    """FlagGems' time does not depend on the run's kernels: a later record whose FlagGems did not
    import takes the earlier record's time, and the table names the folder it came from."""
    runs = REPO / "bench" / "results" / "heldout" / "h200x4-d4eb01b"
    rec = json.loads((runs / "ops" / "bench__heldout__mm1024.json").read_text())
    for name, gems in (("early", {"ms": 0.02, "vs_torch": 0.5}),
                       ("late", {"ms": None, "reason": "import flag_gems failed"})):
        (tmp_path / name / "ops").mkdir(parents=True)
        (tmp_path / name / "ops" / "bench__heldout__mm1024.json").write_text(
            json.dumps({**rec, "flag_gems": gems}))
    env = {**__import__("os").environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, str(REPO / "bench" / "heldout.py"), "--tier", "device", "--tables-only",
           "--only", "mm1024", "--out", str(tmp_path / "late"), "--records", str(tmp_path / "early"),
           "--results", str(tmp_path / "table")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads((tmp_path / "table.json").read_text())["rows"][0]
    assert row["records"] == "late" and row["flag_gems"]["vs_torch"] == 0.5
    assert row["flag_gems"]["from"] == "early"
    assert "mm1024 (early)" in (tmp_path / "table.md").read_text()


def test_each_ablation_is_a_column_of_the_device_tables() -> None:
    """An ablated run's best (its fresh gate where it passed) is a column of its own: x/ref
    against the reference of the same gate, and the full search's best over it, per operator
    and as a geometric mean."""
    import argparse
    import importlib.util

    spec = importlib.util.spec_from_file_location("heldout_bench", REPO / "bench" / "heldout.py")
    heldout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(heldout)
    base = {"family": "gemm", "intensity": 100.0, "reference_ms": 1.0,
            "start": {"ok": True, "ms": 4.0, "reference_ms": 1.0},
            "control": {"ok": True, "ms": 1.25, "reference_ms": 1.0},
            "best": {"ok": True, "ms": 1.0, "reference_ms": 1.0}}
    records = [{**base, "op": "mm", "ablations": {
        "library-off": {"ok": True, "ms": 1.25, "reference_ms": 1.0},
        "priors-off": {"ok": True, "ms": 0.8, "reference_ms": 1.0,
                       "regate": {"ok": True, "ms": 1.1, "reference_ms": 1.0}}}},
               {**base, "op": "plain"}]
    args = argparse.Namespace(tier="device", library="lib", budget_steps=12, box=300.0)
    result = heldout.build_tables(records, args)
    rows = {r["op"]: r for r in result["rows"]}
    assert rows["mm"]["best_vs_library-off"] == pytest.approx(1.25)
    assert rows["mm"]["priors-off_vs_ref"] == pytest.approx(1 / 1.1)  # the fresh gate
    assert rows["mm"]["lookahead-off_vs_ref"] is None and rows["plain"]["best_vs_priors-off"] is None
    assert result["families"]["gemm"]["best_vs_library-off"] == pytest.approx(1.25)
    text = heldout.markdown(result)
    assert "| operator | best x/ref | library-off x/ref | best / library-off | priors-off x/ref" in text
    assert "| mm | 1.000 | 0.800 | 1.250 | 0.909 | 1.100 |" in text
    assert "| plain |" not in text.split("Ablations")[1]


def _heldout_module(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / "heldout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _verdict(ok: bool, kind: str | None = None):
    from types import SimpleNamespace

    timing = SimpleNamespace(candidate_ms=1.0, reference_ms=1.0, reference_tf32_ms=None,
                             reference_compile_ms=None, variants=())
    return SimpleNamespace(ok=ok, failure_kind=kind, reason=None if ok else f"{kind}",
                           timing=timing if ok else None, flags=())


def test_wall_is_a_deadline_for_the_fresh_gates_and_the_tables(tmp_path: Path, monkeypatch) -> None:
    """--wall bounds the whole command, the fresh gates after the searches included: each gets
    the time left before the deadline (less the reserve kept for writing), a gate the deadline
    stops or leaves unstarted is recorded as not done (status, reason, no best x/ref, its file
    kept), and the records and tables are written before the deadline; a rerun of the same
    command gates what waits and searches nothing again."""
    import time

    import lineage.optimize

    heldout = _heldout_module("heldout_bench_wall")
    monkeypatch.setattr(heldout, "WALL_RESERVE_S", 0.5)
    monkeypatch.setattr(lineage.optimize, "BOX_GRACE_S", 0.0)
    searched: list[str] = []

    def search(case, args, out_dir, deadline, ablation=None, progress=None, start=None):
        searched.append(case.name)
        out_dir.mkdir(parents=True, exist_ok=True)
        best = out_dir / "best.py"
        best.write_text(f"# best of {case.name}\n")
        return {"ok": True, "ms": 0.5, "reference_ms": 1.0, "termination": "budget", "gated": 1,
                "cards": ["card"], "pending": str(best)}

    needs = [0.1, 3.0, 3.0, 3.0]  # seconds each fresh gate takes, in order
    limits: list[float | None] = []

    def check(source, language, case, tier, *, path=None, host=None, timeout=None, cache=True):
        if source == case.start_path().read_text():
            return _verdict(True)  # the start's gate, before the searches
        need = needs.pop(0)
        limits.append(timeout)
        took = need if timeout is None else min(need, timeout)
        time.sleep(took)
        return _verdict(True) if took == need else _verdict(False, "timeout")

    monkeypatch.setattr(heldout, "search", search)
    monkeypatch.setattr(gate, "check", check)
    out = tmp_path / "run"
    wall = 3.0
    argv = [str(HELDOUT / "softmax"), str(HELDOUT / "layernorm"), "--tier", "device",
            "--jobs", "2", "--wall", str(wall), "--library", str(tmp_path / "lib"),
            "--out", str(out)]
    began = time.monotonic()
    assert heldout.main(argv) == 0
    assert time.monotonic() - began < wall  # everything, tables included, before the deadline
    assert len(limits) == 2 and all(t is not None and t < wall for t in limits)
    rows = {r["op"]: r for r in json.loads((out / "heldout.json").read_text())["rows"]}
    [first] = [r for r in rows.values() if "regate" in r["best"]]
    [second] = [r for r in rows.values() if r is not first]
    assert first["best"]["regate"]["ok"] and first["best_vs_ref"] == pytest.approx(1.0)
    for row, undone in ((first, "control"), (second, "best, control")):
        assert row["status"] == "searched" and f"--wall deadline: {undone} " in row["reason"]
        assert row["control"]["pending"] and "--wall" in row["control"]["reason"]
        assert row["control_vs_ref"] is None
    assert second["best_from"] == "not gated" and second["best_vs_ref"] is None
    assert Path(second["best"]["pending"]).is_file()
    table = (out / "heldout.md").read_text()
    assert f"| {second['op']} | 1.0000 | not gated | 0.5000 | - |" in table
    assert "Not done: " in table and f"{second['op']} (searched): not gated fresh" in table
    # the rerun gates what waits and starts no search (the FlagGems and bandwidth columns,
    # device-only, are not this test's)
    needs[:] = [0.0] * 3
    limits.clear()
    monkeypatch.setattr(heldout, "measure_extras", lambda cases, records, in_time: None)
    assert heldout.main(argv) == 0
    assert len(searched) == 2 and len(limits) == 3
    rows = {r["op"]: r for r in json.loads((out / "heldout.json").read_text())["rows"]}
    assert all(r["status"] == "done" and "reason" not in r for r in rows.values())
    assert all(r["best"]["regate"]["ok"] and r["best_vs_ref"] for r in rows.values())
    assert not Path(second["best"]["pending"]).exists()


def test_a_gate_that_times_out_on_its_own_limit_is_a_verdict_not_the_walls(monkeypatch) -> None:
    """Under --wall a gate's limit is cut to what is left; its timeout is the wall's (not done)
    only where the wall cut the limit: under the gate's own limit it is the kernel's verdict.
    With no time left the gate does not run."""
    import argparse
    import time

    heldout = _heldout_module("heldout_bench_walled")
    given: list[float | None] = []

    def timing_out(limit):
        given.append(limit)
        return _verdict(False, "timeout")

    far = argparse.Namespace(tier="device", wall_deadline=time.monotonic() + 10_000)
    verdict = heldout._walled(far, timing_out)
    assert verdict is not None and verdict.failure_kind == "timeout" and given == [300.0]
    near = argparse.Namespace(tier="device", wall_deadline=time.monotonic() + heldout.WALL_RESERVE_S + 60)
    assert heldout._walled(near, timing_out) is None and 0 < given[-1] <= 60
    past = argparse.Namespace(tier="device", wall_deadline=time.monotonic())
    assert heldout._walled(past, timing_out) is None and len(given) == 2
    assert heldout._walled(argparse.Namespace(tier="device"), timing_out) is not None
    assert given[-1] is None
