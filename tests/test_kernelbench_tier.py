"""The KernelBench tier harness (bench/kernelbench_tier.py): KernelBench's metrics, pairing start
kernels with a checkout's problem files, staging them, the tables, and a smoke run at the
interpret tier on a problem written here. The start kernels of bench/kernelbench are checked
against the benchmark's own files where $KERNELBENCH_DIR points to a checkout."""
from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STARTS = REPO / "bench" / "kernelbench"


def _tier():
    spec = importlib.util.spec_from_file_location("kernelbench_tier", REPO / "bench" / "kernelbench_tier.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("kernelbench_tier", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


TIER = _tier()

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale


rows = 48
cols = 40


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [3.0]
'''

START = '''import torch
import triton
import triton.language as tl


@triton.jit
def relu_scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) * 3.0, mask=offs < n)


def run(x):
    y = torch.empty_like(x)
    relu_scale[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
    return y
'''


def _checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A KernelBench-like checkout (repository layout) with two problems, and a starts folder
    with a start kernel for one of them and for a problem the checkout lacks."""
    kb = tmp_path / "kb"
    (kb / "KernelBench" / "level1").mkdir(parents=True)
    (kb / "KernelBench" / "level1" / "7_Relu_scale.py").write_text(PROBLEM)
    (kb / "KernelBench" / "level1" / "12_Other.py").write_text(PROBLEM)
    # sizes too large to shrink for the CPU: refused at the interpret tier, a row that says so
    (kb / "KernelBench" / "level1" / "8_Huge.py").write_text(
        PROBLEM.replace("torch.randn(rows, cols)", "torch.randn(70000, 3)"))
    starts = tmp_path / "starts"
    (starts / "level1").mkdir(parents=True)
    (starts / "level1" / "7_Relu_scale.py").write_text(START)
    (starts / "level1" / "8_Huge.py").write_text(START)
    (starts / "level2").mkdir()
    (starts / "level2" / "3_Not_in_checkout.py").write_text(START)
    return kb, starts


def test_fast_p_counts_correct_and_faster_over_all_problems() -> None:
    results = [(True, 1.0, 2.5),    # 2.5x
               (True, 2.0, 3.0),    # 1.5x: not > 1.5
               (False, 1.0, 10.0),  # wrong: never fast, not in the geomean
               (True, 4.0, 2.0),    # 0.5x
               (True, None, 1.0)]   # correct, not timed: not fast, not in the geomean
    m = TIER.kernelbench_metrics(results)
    assert m["n"] == 5 and m["correct"] == 4 and m["timed"] == 3
    assert m["fast_p"] == {"0": 3 / 5, "1": 2 / 5, "1.5": 1 / 5, "2": 1 / 5}
    assert math.isclose(m["geomean_speedup"], (2.5 * 1.5 * 0.5) ** (1 / 3))
    empty = TIER.kernelbench_metrics([(False, 1.0, 1.0)])
    assert empty["fast_p"]["0"] == 0.0 and empty["geomean_speedup"] is None


def test_start_kernels_pair_with_the_checkouts_problem_files(tmp_path: Path) -> None:
    kb, starts = _checkout(tmp_path)
    root = TIER.problem_root(kb)
    assert root == kb / "KernelBench" and TIER.problem_root(root) == root
    problems, missing = TIER.pair_problems(root, starts)
    assert [p.key for p in problems] == ["level1/7_Relu_scale", "level1/8_Huge"]
    assert problems[0].problem == root / "level1" / "7_Relu_scale.py"
    assert missing == ["level2/3_Not_in_checkout"]
    assert TIER.pair_problems(root, starts, ["12_Other"])[0] == []
    by_number = TIER.pair_problems(root, starts, ["level1/7", "8_Huge"])[0]
    assert [p.key for p in by_number] == ["level1/7_Relu_scale", "level1/8_Huge"]
    assert TIER.unknown_names(starts, ["level1/7", "level1/9", "level2/3_Not_in_checkout"]) == ["level1/9"]
    problems = problems[:1]
    staged = TIER.stage(problems, tmp_path / ".kb")
    assert staged == [tmp_path / ".kb" / "level1" / "7_Relu_scale.py"]
    assert staged[0].read_text() == PROBLEM
    from kir.errors import BadInputError

    with pytest.raises(BadInputError, match="not a KernelBench checkout"):
        TIER.problem_root(tmp_path / "starts" / "level1")


def test_a_missing_checkout_is_a_one_line_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KERNELBENCH_DIR"}
    for argv in ([], ["--kernelbench", str(tmp_path)]):
        done = subprocess.run([sys.executable, str(REPO / "bench" / "kernelbench_tier.py"), *argv],
                              capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 2
        assert len(done.stderr.strip().splitlines()) == 1 and "kernelbench_tier:" in done.stderr


def test_device_tables_scale_the_gates_ratio_by_each_baseline() -> None:
    rec = {"op": "level1/1_mm", "level": "level1", "status": "done", "reference_ms": 4.0,
           "start": {"ok": True, "ms": 8.0, "reference_ms": 4.0},
           "best": {"ok": True, "ms": 3.0, "regate": {"ok": True, "ms": 2.0, "reference_ms": 4.0,
                                                       "flags": ["lower precision (default): error 0.001"]}},
           "control": {"ok": False, "ms": None},
           "baselines": {"eager_ms": 5.0, "eager_tf32_ms": 2.5, "compile_ms": 1.0}}
    refused = {"op": "level1/2_bad", "level": "level1", "status": "refused", "reason": "x.py: no",
               "start": {"ok": False}}
    args = argparse.Namespace(tier="device", library="lib", budget_steps=12, box=300.0)
    result = TIER.build_tables([rec, refused], args)
    row = next(r for r in result["rows"] if r["op"] == "level1/1_mm")
    assert row["best_x_eager"] == 2.0  # the fresh gate of the best: 4 / 2
    assert row["best_x_eager_tf32"] == 1.0  # eager-TF32 is twice eager's speed here
    assert row["best_x_compile"] == pytest.approx(0.4)
    assert row["start_x_eager"] == 0.5 and row["control_x_eager"] is None
    best = result["metrics"]["best"]
    assert best["eager"]["n"] == 2 and best["eager"]["fast_p"]["1.5"] == 0.5
    assert best["eager_tf32"]["fast_p"]["1"] == 0.0 and best["eager_tf32"]["fast_p"]["0"] == 0.5
    text = TIER.markdown(result)
    assert "| best | compile | 2 | 1 |" in text and "Refused by the loader: level1/2_bad" in text
    assert row["lower_precision"] == ["best"] and "| best | -" in text
    # where the gate timed the reference with TF32 allowed, that time is the baseline
    rec["start"]["reference_tf32_ms"] = 1.0
    assert TIER.kernel_vs(rec, "start", "eager_tf32") == (True, 8.0, 1.0)
    rec["start"]["reference_compile_ms"] = 16.0
    assert TIER.kernel_vs(rec, "start", "compile") == (True, 8.0, 16.0)
    # the start gate's compile time, scaled by the best's gate's reference over the start's
    assert TIER.kernel_vs(rec, "best", "compile") == (True, 2.0, pytest.approx(16.0))
    rec["start"]["reference_compile_ms"] = None  # else the harness's: 4 * 1 / 5
    assert TIER.kernel_vs(rec, "best", "compile") == (True, 2.0, pytest.approx(0.8))


def test_interpret_smoke_run_gates_start_best_and_control(tmp_path: Path) -> None:
    kb, starts = _checkout(tmp_path)
    out = tmp_path / "run"
    cmd = [sys.executable, str(REPO / "bench" / "kernelbench_tier.py"), "--starts", str(starts),
           "--tier", "interpret", "--budget-steps", "2", "--box", "120", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "KERNELBENCH_DIR": str(kb)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "level2/3_Not_in_checkout: start kernel without a problem file" in done.stderr
    result = json.loads((out / "kernelbench.json").read_text())
    row, huge = result["rows"]
    assert huge["op"] == "level1/8_Huge" and huge["status"] == "refused"
    assert "interpret" in huge["reason"] and len(huge["reason"].splitlines()) == 1
    assert row["op"] == "level1/7_Relu_scale" and row["status"] == "done"
    assert row["start"]["ok"] and row["best"]["ok"] and row["control"]["ok"]
    assert "| level1/7_Relu_scale | done | pass |" in (out / "kernelbench.md").read_text()


def _start_files() -> list[Path]:
    return sorted(STARTS.glob("level*/*.py"))


def test_the_tier_has_twenty_start_kernels_of_levels_one_and_two() -> None:
    levels = {p.parent.name for p in _start_files()}
    assert levels <= {"level1", "level2"} and len(_start_files()) >= 20


@pytest.mark.parametrize("path", _start_files(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_start_kernels_are_plain_triton_modules(path: Path) -> None:
    tree = ast.parse(path.read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"torch", "triton", "math"}, imported
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "run" in functions
    jitted = [f for f in functions.values()
              if any(ast.unparse(d).startswith("triton.jit") for d in f.decorator_list)]
    assert jitted, "no @triton.jit kernel"


KB_DIR = os.environ.get("KERNELBENCH_DIR")


@pytest.mark.skipif(not KB_DIR, reason="KERNELBENCH_DIR (a KernelBench checkout) not set")
@pytest.mark.parametrize("path", _start_files(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_start_kernel_passes_the_interpret_tier_on_the_benchmarks_problem(path: Path) -> None:
    import gate

    from kir.errors import BadInputError

    problem = TIER.problem_root(Path(KB_DIR)) / path.parent.name / path.name
    case = gate.load_case(problem)
    try:
        dict(case.small_shapes)
    except BadInputError as exc:  # the loader finds no CPU-sized variant of this problem
        pytest.skip(str(exc))
    verdict = gate.check_file(path, case, "interpret", cache=False)
    assert verdict.ok, verdict.reason


# -- the harness's baselines, the compile bound, compute-bound problems ---------------------------

def _lock_state(path: Path) -> str:
    """What another process would see of the GPU lock at `path`: "free", "shared" (a reader
    holds it) or "exclusive"."""
    import fcntl

    fd = os.open(f"{path}.rw", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return "free"
        except BlockingIOError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return "shared"
        except BlockingIOError:
            return "exclusive"
    finally:
        os.close(fd)


@pytest.mark.parametrize("benchmarks_locked", [False, True])
def test_baselines_are_timed_under_the_exclusive_gpu_lock(tmp_path: Path, benchmarks_locked: bool) -> None:
    import torch

    from gate.gpulock import GpuLock

    path = tmp_path / "gpu.lock"
    lock = GpuLock(path)
    model = torch.nn.Linear(8, 4)
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    seen: dict[str, list[str]] = {"bench": [], "model": [], "compiled": []}

    class Probe(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen["compiled"].append(_lock_state(path))
            return self.inner(x)

    def bench(fn) -> float:
        seen["bench"].append(_lock_state(path))
        fn()
        return 1.0

    writes = []
    out = TIER.time_baselines(model, [torch.randn(3, 8)], lock, bench, compile_fn=Probe,
                              write=writes.append, compile_benchmarks_locked=benchmarks_locked)
    assert seen["bench"] == ["exclusive"] * 3  # eager, eager-TF32, compiled: each timing alone
    # the compiled model's first call (the compile) under the shared lock, or under none where
    # its autotuning measurements take the exclusive lock themselves; its timing exclusive
    assert seen["compiled"] == ["free" if benchmarks_locked else "shared", "exclusive"]
    assert out["eager_ms"] == out["eager_tf32_ms"] == out["compile_ms"] == 1.0
    assert out["compile_status"] == "ok" and out["compile_err"] == 0.0
    assert [w["stage"] for w in writes] == ["reference", "compile", "timing", "done"]
    assert "compile_s" in writes[2] and "eager_ms" not in writes[2]  # compiled first, then timed
    assert _lock_state(path) == "free"
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == flags


def test_baselines_wait_for_a_gate_that_is_timing(tmp_path: Path) -> None:
    import threading
    import time

    import torch

    from gate.gpulock import GpuLock

    path = tmp_path / "gpu.lock"
    gate_lock, mine = GpuLock(path), GpuLock(path)
    benched = []
    with gate_lock.exclusive():  # a gate timing its kernel
        worker = threading.Thread(target=TIER.time_baselines, args=(
            torch.nn.Linear(4, 4), [torch.randn(2, 4)], mine, lambda fn: benched.append(1) or 1.0))
        worker.start()
        time.sleep(0.5)
        assert benched == []  # not even the untimed reference run went ahead
    worker.join(timeout=30)
    assert benched == [1, 1]
    failing = TIER.time_baselines(torch.nn.Linear(4, 4), [torch.randn(2, 4)], mine, lambda fn: 1.0,
                                  compile_fn=lambda m: (_ for _ in ()).throw(RuntimeError("no backend")))
    assert failing["compile_status"] == "error" and "no backend" in failing["compile_error"]
    assert failing["eager_ms"] == 1.0 and "compile_ms" not in failing


_CHILD = '''
import json, os, subprocess, sys, time
pid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]).pid
open({pid_file!r}, "w").write(str(pid))
json.dump({{"stage": "{stage}", "eager_ms": 2.0, "eager_tf32_ms": 1.0}}, open(os.environ["KB_BASELINE_OUT"], "w"))
time.sleep(120)
'''


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


@pytest.mark.parametrize("stage", ["compile", "eager_tf32"])
def test_a_baseline_over_its_time_is_stopped_and_recorded_as_such(tmp_path: Path, stage: str) -> None:
    import time

    pid_file = tmp_path / "grandchild.pid"
    t0 = time.monotonic()
    out = TIER.measure_baselines(tmp_path / "p.py", timeout=3.0, command=[
        sys.executable, "-c", _CHILD.format(stage=stage, pid_file=str(pid_file))])
    assert time.monotonic() - t0 < 30
    assert out["timeout_s"] == 3.0 and out["eager_ms"] == 2.0  # what it measured before stays
    if stage == "compile":
        assert out["compile_status"] == "timeout" and "within the 3 s" in out["compile_error"]
        assert "error" not in out
    else:
        assert "compile_status" not in out and out["error"] == "stopped after 3 s at eager_tf32"
    deadline = time.monotonic() + 10
    grandchild = int(pid_file.read_text())
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(grandchild)  # the child's own children (compile workers) are stopped too


def test_a_baseline_process_that_dies_says_why(tmp_path: Path) -> None:
    out = TIER.measure_baselines(tmp_path / "p.py", timeout=60.0, command=[
        sys.executable, "-c", "import sys; print('CUDA error: out of memory', file=sys.stderr); sys.exit(3)"])
    assert out["error"] == "the baseline process ended with code 3: CUDA error: out of memory"


def _problem(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n" + body)
    return path


def test_compute_bound_is_decided_by_flops_per_byte_at_the_real_sizes(tmp_path: Path) -> None:
    import gate

    gemm = _problem(tmp_path, "a", '''
class Model(nn.Module):
    def forward(self, a, b):
        return torch.relu(a @ b)

M = 4096 * 2
def get_inputs():
    return [torch.randn(M, M), torch.randn(M, M)]

def get_init_inputs():
    return []
''')
    matvec = _problem(tmp_path, "b", '''
class Model(nn.Module):
    def forward(self, a, x):
        return torch.matmul(a, x)

shape = (16384, 16384)
def get_inputs():
    return [torch.randn(*shape), torch.randn(shape[1], 1)]

def get_init_inputs():
    return []
''')
    conv = _problem(tmp_path, "c", '''
class Model(nn.Module):
    def __init__(self, cin, cout, k):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, bias=False)

    def forward(self, x):
        return self.conv(x)

batch, cin, cout, k, side = 16, 64, 128, 3, 130
def get_inputs():
    return [torch.randn(batch, cin, side, side)]

def get_init_inputs():
    return [cin, cout, k]
''')
    softmax = _problem(tmp_path, "d", '''
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)

def get_inputs():
    return [torch.randn(4096, 65536)]

def get_init_inputs():
    return []
''')
    works = {p.stem: TIER.problem_work(gate.load_case(p)) for p in (gemm, matvec, conv, softmax)}
    m = 8192
    assert works["a"]["flops"] == 2 * m ** 3 and works["a"]["bytes"] == 3 * m * m * 4
    assert works["a"]["compute_bound"] and works["c"]["compute_bound"]
    conv_flops = 2 * 16 * 128 * 128 * 128 * 64 * 9
    assert works["c"]["flops"] == conv_flops
    assert not works["b"]["compute_bound"] and works["b"]["intensity"] == pytest.approx(0.5, rel=1e-3)
    assert not works["d"]["compute_bound"] and works["d"]["flops"] == 0.0
    broken = _problem(tmp_path, "e", '''
class Model(nn.Module):
    def forward(self, x):
        return x * float(x.sum())

def get_inputs():
    return [torch.randn(64)]

def get_init_inputs():
    return []
''')
    error = TIER.problem_work(gate.load_case(broken))["work_error"]
    assert "meta device" in error and len(error.splitlines()) == 1
    # the bytes a forward must move count what it writes: softmax's output is its input's size
    # (the copy-bandwidth share divides a copy of these bytes by the kernel's time)
    shape = dict(next(iter(gate.load_case(softmax).shapes.values())))
    assert gate.load_case(softmax).module().bytes_moved(shape) == 2 * 4096 * 65536 * 4
    # a forward the meta device cannot run: its inputs, still a floor
    shape = dict(next(iter(gate.load_case(broken).shapes.values())))
    assert gate.load_case(broken).module().bytes_moved(shape) == 64 * 4


def test_tables_count_every_problem_and_the_compute_bound_ones_apart() -> None:
    def rec(op: str, bound: bool, best_ms: float | None, base: dict, status: str = "done") -> dict:
        r = {"op": op, "level": "level1", "status": status, "compute_bound": bound, "tier": "device",
             "reference_ms": 4.0, "start": {"ok": True, "ms": 8.0, "reference_ms": 4.0,
                                            "reference_tf32_ms": 2.0},
             "best": {"ok": best_ms is not None, "ms": best_ms, "reference_ms": 4.0},
             "control": {"ok": True, "ms": 6.0, "reference_ms": 4.0}, "baselines": base}
        return r

    timed = {"eager_ms": 4.0, "eager_tf32_ms": 2.0, "compile_ms": 2.0, "compile_status": "ok"}
    stopped = {"eager_ms": 4.0, "eager_tf32_ms": 2.0, "compile_status": "timeout"}
    records = [rec("level1/1_mm", True, 1.0, timed),          # 2x TF32 eager, 2x compile
               rec("level1/2_mm", True, 4.0, stopped,         # 0.5x TF32 eager, compile timed out
                   status="done, box cut by --wall (80 of 150 s)"),
               {"op": "level1/3_mm", "level": "level1", "status": "not started (--wall)",
                "compute_bound": True, "start": {"ok": False}},
               rec("level1/4_sum", False, 2.0, timed)]
    args = argparse.Namespace(tier="device", library="lib", budget_steps=12, box=150.0)
    result = TIER.build_tables(records, args)
    bound = result["compute_bound"]
    assert bound["problems"] == ["level1/1_mm", "level1/2_mm", "level1/3_mm"]
    goal = bound["metrics"]["best"]["eager_tf32"]
    assert goal["n"] == 3 and goal["timed"] == 2 and goal["geomean_speedup"] == pytest.approx(1.0)
    assert goal["fast_p"]["1"] == pytest.approx(1 / 3)
    vs_compile = result["metrics"]["best"]["compile"]
    assert vs_compile["n"] == 4 and vs_compile["fast_p"]["1"] == pytest.approx(1 / 4)  # 1_mm only
    rows = {r["op"]: r for r in result["rows"]}
    assert rows["level1/2_mm"]["compile_status"] == "timeout" and rows["level1/2_mm"]["compile_ms"] is None
    assert rows["level1/1_mm"]["eager_tf32_ms"] == 2.0 and rows["level1/1_mm"]["compile_ms"] == 2.0
    assert result["status"] == {"box cut by --wall": 1, "done": 2, "not started (--wall)": 1}
    text = TIER.markdown(result)
    assert "| level1/2_mm | done, box cut by --wall (80 of 150 s) | yes |" in text
    assert "| timeout |" in text and "| level1/3_mm | not started (--wall) | yes |" in text
    assert "geometric mean over the 2 compute-bound problems timed (3 compute-bound): 1.000" in text
    assert "fast_1 against torch.compile: 0.250 of 4 problems" in text


def _slots():
    spec = importlib.util.spec_from_file_location("gpuslots", REPO / "bench" / "gpuslots.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpuslots", module)
    spec.loader.exec_module(module)
    return module


SLOTS = _slots()
GB = 1e9


def test_a_gate_granted_less_than_it_asks_keeps_fewer_sets_and_the_grants_fit_together() -> None:
    """Made-up problems on two made-up 135 GB GPUs, placed smallest first: the largest ones
    (16 GB of inputs and outputs a set) run two to a GPU where their least fits, each gate
    plans for its grant whatever order they measure the free memory in, its resident sets
    and working memory fit in the grant, and the grants of one GPU fit its pool."""
    from gate import memplan

    total = 135 * GB
    sizes = [(1e8, 1e8), (3e8, 3e7), (1.3e9, 5e8), (8.6e9, 0), (8.6e9, 0), (4.3e9, 4.3e9),
             (7.5e9, 7.5e9), (8.6e9, 8.6e9)]
    needs = [TIER.gate_memory(a, b) for a, b in sizes]
    assert all(n.least < n.most for n in needs)
    assert needs[-1].most > total > needs[-1].least  # it would not fit at every set it asks for
    admission = SLOTS.Admission(["0", "1"], total)
    placed = []
    order = sorted(range(len(sizes)), key=lambda i: needs[i].least)
    for k, i in enumerate(order):
        after = needs[order[k + 1]] if k + 1 < len(order) else None
        slot = admission.place(needs[i], after)
        if slot is None:
            break
        assert needs[i].least <= slot.grant <= needs[i].most
        placed.append((i, slot))
    assert len(placed) >= 6  # the 8.6 GB-input problems share the GPUs instead of taking turns
    for gpu in ("0", "1"):
        mine = [(i, s) for i, s in placed if s.gpu == gpu]
        assert sum(s.grant for _, s in mine) <= total
        for order_seen in (mine, mine[::-1]):
            allocated = 0
            for i, slot in order_seen:
                set_bytes, out_bytes = (int(x) for x in sizes[i])
                free = min(int(total) - allocated, int(slot.grant))
                plan = memplan.plan_sets(free, set_bytes, out_bytes, seeds=TIER.GATE_SEEDS, pool=4,
                                         fixed=memplan.fixed_sets(device=True), held=True)
                held = memplan.plan_bytes(plan, set_bytes, out_bytes, held=True)
                assert held <= slot.grant  # fewer sets (parked ones) instead of out of memory
                allocated += held
            assert allocated <= total
    # what does not fit waits; a release makes room; a problem larger than a GPU runs alone
    waiting = next(i for i in order if i not in {j for j, _ in placed}) if len(placed) < len(sizes) else None
    if waiting is not None:
        assert admission.place(needs[waiting]) is None
    for _, slot in placed:
        admission.release(slot)
    assert admission.used == [0.0, 0.0] and admission.running == [0, 0]
    huge = SLOTS.GateMemory(200 * GB, 300 * GB)
    alone = admission.place(huge)
    assert alone is not None and alone.grant == total
    other = admission.place(huge)
    assert other is not None and other.gpu != alone.gpu  # the other GPU is idle
    assert admission.place(SLOTS.GateMemory(GB, GB)) is None  # nothing beside them


def test_five_large_memory_bound_problems_start_together_on_one_gpu_where_the_host_can_park_their_sets() -> None:
    """Made-up problems of the sizes of large memory-bound ones (6.4 GB of input and of output a
    set, 8.6 GB of input and a tiny output, 1.1 GB in and 8.6 GB out, 4.3 GB in and 8.6 GB out):
    granted their least (a lean plan), all five start at once on one 140 GB GPU where the host
    has room for the sets they park; each gate's plan for its grant holds no more than it, and
    together they fit the GPU. On a machine with less host memory, fewer start at once (some
    granted a plan that keeps its first sets and parks less) and what they park never exceeds it."""
    import threading
    import time

    from gate import memplan

    total = 140 * GB
    sizes = {"softmax": (6.442e9, 6.442e9), "log_softmax": (6.442e9, 6.442e9), "max": (8.588e9, 2.1e6),
             "conv3x3": (1.074e9, 8.556e9), "conv1x1": (4.295e9, 8.590e9)}
    needs = {k: TIER.gate_memory(*v) for k, v in sizes.items()}
    assert all(n.least <= 30 * GB < n.parked < n.most and n.parked_host < n.host for n in needs.values())
    order = sorted(sizes, key=lambda k: -needs[k].least)  # largest first, as the tier queues them

    def run_all(host_total: float) -> tuple[int, dict[str, object]]:
        lock, live, most, slots = threading.Lock(), [0], [0], {}
        admission = SLOTS.Admission(["0"], total, host_total)

        def run(key, slot) -> None:
            with lock:
                live[0] += 1
                most[0] = max(most[0], live[0])
                slots[key] = slot
                assert admission.host_used <= host_total and admission.used[0] <= total
            time.sleep(0.3)
            with lock:
                live[0] -= 1

        left = SLOTS.schedule(order, lambda k: needs[k], admission, run, jobs=5)
        assert left == [] and admission.used == [0.0] and admission.host_used == 0.0
        return most[0], slots

    together, slots = run_all(460 * GB)  # the five lean plans park 458 GB at the most
    assert together == 5
    assert sum(s.grant for s in slots.values()) <= total
    for key, slot in slots.items():
        set_bytes, out_bytes = (int(x) for x in sizes[key])
        plan = memplan.plan_sets(int(slot.grant), set_bytes, out_bytes, seeds=TIER.GATE_SEEDS, pool=4,
                                 fixed=memplan.fixed_sets(device=True), held=True)
        assert plan.lean and memplan.plan_bytes(plan, set_bytes, out_bytes, held=True) <= slot.grant
        assert slot.host == needs[key].host == memplan.host_bytes(plan, set_bytes, out_bytes)
    fewer, slots = run_all(110 * GB)  # a machine of 128 GiB
    assert 1 <= fewer < 5 and set(slots) == set(sizes)
    kept = [k for k, s in slots.items() if s.grant == needs[k].parked]
    for key in kept:  # granted the plan that keeps its first sets: it makes that plan
        set_bytes, out_bytes = (int(x) for x in sizes[key])
        plan = memplan.plan_sets(int(slots[key].grant), set_bytes, out_bytes, seeds=TIER.GATE_SEEDS,
                                 pool=4, fixed=memplan.fixed_sets(device=True), held=True)
        assert not plan.lean and memplan.host_bytes(plan, set_bytes, out_bytes) == slots[key].host
    # two GPUs and host room for two lean plans: the plans that keep their first sets fill both
    # GPUs (four at once) instead of two lean ones filling the host
    admission = SLOTS.Admission(["0", "1"], total, 220 * GB)
    pending = list(order)
    while (placed := SLOTS._first_placed(pending, lambda k: needs[k], admission)) is not None:
        pending.pop(placed[0])
    assert len(pending) == 1 and admission.host_used <= 220 * GB
    assert all(u <= total for u in admission.used)
    # where the host has no room for what a job parks but the GPU has room for its most, it
    # keeps every set on the device and parks nothing
    admission = SLOTS.Admission(["0", "1"], total, 10 * GB)
    small = SLOTS.GateMemory(20 * GB, 60 * GB, 30 * GB)
    first = admission.place(small, small)
    assert first.grant == 60 * GB and first.host == 0.0
    assert admission.place(SLOTS.GateMemory(70 * GB, 200 * GB, 80 * GB, 100 * GB, 20 * GB)) is None


def test_a_grant_is_the_most_where_the_next_problems_least_fits_beside_else_the_least() -> None:
    need = SLOTS.GateMemory(60 * GB, 110 * GB)
    assert SLOTS.grant(need, 135 * GB, None) == 110 * GB  # nothing waits: every set
    assert SLOTS.grant(need, 135 * GB, need) == 60 * GB  # the next one's 60 fit beside it
    assert SLOTS.grant(need, 100 * GB, need) == 60 * GB  # and will, once another ends
    assert SLOTS.grant(SLOTS.GateMemory(5 * GB, 6 * GB), 135 * GB, need) == 6 * GB
    unbounded = SLOTS.Admission(["0", "1"], None)
    first, second = unbounded.place(need), unbounded.place(need)
    assert first.grant is None and {first.gpu, second.gpu} == {"0", "1"}


def test_the_schedule_runs_in_order_within_jobs_and_room_and_stops_starting_at_the_wall() -> None:
    import threading
    import time

    admission = SLOTS.Admission(["0"], 10.0)
    log, lock, live, most = [], threading.Lock(), [0], [0]

    def run(item, slot) -> None:
        with lock:
            live[0] += 1
            most[0] = max(most[0], live[0])
            log.append(("in", item[0], slot.grant))
        time.sleep(item[2])
        with lock:
            live[0] -= 1
            log.append(("out", item[0]))

    items = [("a", 3.0, 0.3), ("b", 3.0, 0.3), ("c", 6.0, 0.0), ("d", 1.0, 0.0)]
    left = SLOTS.schedule(items, lambda it: SLOTS.GateMemory(it[1], it[1]), admission, run, jobs=3)
    assert left == [] and most[0] == 3  # a, b and d together; c waits for room
    assert [e[1] for e in log if e[0] == "in"] == ["a", "b", "d", "c"]
    assert log.index(("in", "c", 6.0)) > log.index(("out", "a"))
    started = []
    stop = SLOTS.schedule(items, lambda it: SLOTS.GateMemory(it[1], it[1]), admission,
                          lambda it, slot: started.append(it[0]), jobs=1,
                          stop=lambda: len(started) >= 2)
    assert started == ["a", "b"] and [it[0] for it in stop] == ["c", "d"]


def test_a_problems_process_is_pinned_to_its_gpu_and_plans_for_its_grant(tmp_path: Path, monkeypatch) -> None:
    """The device tier runs each problem in a process of its own: CUDA_VISIBLE_DEVICES names
    its GPU, the gates' memory cap is its grant, and a run's one GPU lock path becomes one per
    GPU; a process that ends without a record gives a row that says so."""
    from gate import memplan

    assert SLOTS.CAP_ENV == memplan.CAP_ENV
    monkeypatch.setenv("KLINEAGE_GPU_LOCK", str(tmp_path / "lock"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    assert SLOTS.visible_gpus(None) == ["4", "5"] and SLOTS.visible_gpus(1) == ["4"]
    with pytest.raises(ValueError):
        SLOTS.visible_gpus(3)
    assert SLOTS.visible_gpus(2, environ={}) == ["0", "1"]
    assert SLOTS.visible_gpus(None, environ={}, detected=lambda: 3) == ["0", "1", "2"]
    p = TIER.Problem("level1", tmp_path / "7_x.py", tmp_path / "start.py")
    args = argparse.Namespace(tier="device")
    script = ("import json, os, sys; out = sys.argv[sys.argv.index('--child-out') + 1]; "
              "json.dump({'op': 'level1/7_x', 'status': 'done', 'env': {k: os.environ.get(k) for k in "
              "('CUDA_VISIBLE_DEVICES', 'KLINEAGE_GATE_MEMORY', 'KLINEAGE_GPU_LOCK')}}, open(out, 'w'))")
    slot = SLOTS.Slot("5", 1, 42e9)
    captured = {}

    def fake_argv(p, args, out, child_out, settle=False):
        captured["settle"] = settle
        return [sys.executable, "-c", script, "--child-out", str(child_out)]

    monkeypatch.setattr(TIER, "child_argv", fake_argv)
    rec = TIER.problem_process(p, args, tmp_path, slot)
    assert rec["env"] == {"CUDA_VISIBLE_DEVICES": "5", "KLINEAGE_GATE_MEMORY": str(int(42e9)),
                          "KLINEAGE_GPU_LOCK": f"{tmp_path / 'lock'}.gpu5"}
    died = TIER.problem_process(p, args, tmp_path, slot, command=[sys.executable, "-c", "raise SystemExit(3)"])
    assert died["status"] == "harness error" and "code 3 without a record" in died["reason"]
    assert TIER.unfinished(died)
    stopped = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]
    assert TIER.problem_process(p, args, tmp_path, slot, command=stopped) is None  # a time limit: no record
    waiting = {"op": "level1/7_x", "status": "searched"}
    kept = TIER.problem_process(p, args, tmp_path, slot, settle=True, record=waiting,
                                command=[sys.executable, "-c", "raise SystemExit(1)"])
    assert kept["status"] == "searched" and "code 1" in kept["settle_error"]


def test_a_problems_own_process_runs_it_and_settles_it_from_the_same_command_line(tmp_path: Path,
                                                                                monkeypatch) -> None:
    """The child command line the device tier starts per problem (`child_argv`), run here at
    the interpret tier: the start kernel's gate in the child, its record back to the parent;
    then a record waiting for its fresh gates gets its control gated in a second child."""
    kb, starts = _checkout(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    problems, _ = TIER.pair_problems(kb / "KernelBench", starts)
    p = next(q for q in problems if q.key == "level1/7_Relu_scale")
    args = argparse.Namespace(kernelbench=str(kb), starts=str(starts), tier="interpret",
                              library=str(tmp_path / "no-library"), budget_steps=2, box=60.0,
                              box_asked=60.0, jobs=2, start_only=True)
    rec = TIER.problem_process(p, args, tmp_path / "run", SLOTS.Slot(None, 0, None))
    assert rec["status"] == "start only" and rec["start"]["ok"], rec
    waiting = {**rec, "status": "searched", "best": {"ok": False, "ms": None},
               "control": {"ok": None, "pending": True}}
    settled = TIER.problem_process(p, args, tmp_path / "run", SLOTS.Slot(None, 0, None), settle=True,
                                   record=waiting)
    assert settled["status"] == "done" and settled["control"]["ok"], settled


def test_a_best_kernel_waiting_for_its_fresh_gate_is_found_in_a_carried_run_folder(tmp_path: Path) -> None:
    best = tmp_path / "here" / "ops" / "level1__7_x" / "optimize" / "best.py"
    best.parent.mkdir(parents=True)
    best.write_text("# kernel\n")
    rec = {"best": {"pending": "/elsewhere/run/ops/level1__7_x/optimize/best.py"},
           "ablations": {"library-off": {"pending": "/elsewhere/run/ops/level1__7_x/library-off/best.py"}}}
    TIER.rebase_pending(rec, tmp_path / "here")
    assert rec["best"]["pending"] == str(best)
    assert rec["ablations"]["library-off"]["pending"].startswith("/elsewhere")  # not carried: as it was


def test_a_baseline_the_wall_cut_short_is_measured_again_not_a_compile_timeout(tmp_path: Path, monkeypatch) -> None:
    kb, starts = _checkout(tmp_path)
    problems, _ = TIER.pair_problems(kb / "KernelBench", starts)
    p = problems[0]
    records = {p.slug: {"op": p.key, "status": "done", "tier": "device", "bytes": 1e6}}
    given = []

    def fake(path, timeout, **kw):
        given.append((timeout, kw["env"].get("CUDA_VISIBLE_DEVICES")))
        return {"stage": "compile", "timeout_s": timeout, "compile_status": "timeout"}

    monkeypatch.setattr(TIER, "measure_baselines", fake)
    args = argparse.Namespace(baseline_jobs=1, baseline_timeout=100.0, baseline_wall=30.0,
                              no_compile=False)
    TIER.baselines_pass(problems, records, args, tmp_path, ["3"], None)
    base = records[p.slug]["baselines"]
    assert given[0][0] <= 30.0 and given[0][1] == "3"
    assert "skipped" in base and "compile_status" not in base  # a rerun measures it
    records[p.slug]["baselines"] = None
    records[p.slug].pop("baselines")
    args.baseline_wall = 500.0
    TIER.baselines_pass(problems, records, args, tmp_path, ["3"], None)
    assert records[p.slug]["baselines"]["compile_status"] == "timeout"  # its own 100 s: a timeout


def test_baselines_in_a_problems_slot_are_timed_on_its_gpu_and_not_again(tmp_path: Path, monkeypatch) -> None:
    """--baselines-in-slot at the device tier: each problem's baselines right after its run,
    pinned to the GPU its run had; the baselines pass then has nothing left to measure."""
    kb, starts = _checkout(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,7")
    ran, measured = [], []

    def fake_run(p, args, out, slot):
        ran.append((p.key, slot.gpu))
        return {"op": p.key, "level": p.level, "status": "done", "tier": "device", "start": {"ok": True}}

    def fake_measure(path, timeout, **kw):
        measured.append((Path(path).stem, kw["env"]["CUDA_VISIBLE_DEVICES"]))
        return {"stage": "done", "eager_ms": 1.0, "eager_tf32_ms": 1.0}

    monkeypatch.setattr(TIER, "run_in_slot", fake_run)
    monkeypatch.setattr(TIER, "measure_baselines", fake_measure)
    argv = ["--kernelbench", str(kb), "--starts", str(starts), "--tier", "device", "--out", str(tmp_path / "run"),
            "--commit", "c0ffee0", "--jobs", "2", "--baselines-in-slot"]
    assert TIER.main(argv) == 0
    assert sorted(g for _, g in ran) == ["6", "7"]  # spread over the visible GPUs
    assert sorted(measured) == sorted((key.split("/")[1], gpu) for key, gpu in ran)  # once each, on its GPU


def test_records_of_another_commit_are_kept_apart_and_run_again(tmp_path: Path, monkeypatch) -> None:
    kb, starts = _checkout(tmp_path)
    out = tmp_path / "run"
    TIER._write(out / "ops" / "level1__7_Relu_scale.json",
                {"op": "level1/7_Relu_scale", "status": "done", "tier": "interpret", "commit": "aaaaaaa",
                 "start": {"ok": True}})
    TIER._write(out / "ops" / "level1__8_Huge.json",
                {"op": "level1/8_Huge", "status": "done", "tier": "interpret", "commit": "bbbbbbb",
                 "start": {"ok": True}})
    argv = ["--kernelbench", str(kb), "--starts", str(starts), "--tier", "interpret", "--out", str(out)]
    assert TIER.main([*argv, "--tables-only", "--commit", "bbbbbbb"]) == 0
    result = json.loads((out / "kernelbench.json").read_text())
    rows = {r["op"]: r for r in result["rows"]}
    assert result["commit"] == "bbbbbbb"
    assert rows["level1/7_Relu_scale"]["status"].startswith("not run at bbbbbbb")
    assert rows["level1/8_Huge"]["status"] == "done"
    assert result["kept_apart"] == [{"op": "level1/7_Relu_scale", "commit": "aaaaaaa", "status": "done"}]
    assert "Kept apart" in (out / "kernelbench.md").read_text()
    ran = []

    def fake_run(p, args, where):
        ran.append(p.key)
        return {"op": p.key, "status": "done", "tier": "interpret", "start": {"ok": True}}

    monkeypatch.setattr(TIER, "run_problem", fake_run)
    assert TIER.main([*argv, "--commit", "bbbbbbb"]) == 0
    assert ran == ["level1/7_Relu_scale"]  # measured again at this commit, the other stands
    assert json.loads((out / "ops" / "level1__7_Relu_scale.json").read_text())["commit"] == "bbbbbbb"
    assert json.loads((out / "kernelbench.json").read_text())["kept_apart"] == []


def test_redo_unfinished_runs_again_only_what_did_not_finish(tmp_path: Path, monkeypatch) -> None:
    """--redo-unfinished over an earlier run's records: a finished record stands, one whose
    start failed or whose box --wall cut is run again and replaced, a problem without one runs."""
    kb, starts = _checkout(tmp_path)
    (kb / "KernelBench" / "level1" / "9_Third.py").write_text(PROBLEM)
    (starts / "level1" / "9_Third.py").write_text(START)
    (kb / "KernelBench" / "level1" / "10_Fourth.py").write_text(PROBLEM)
    (starts / "level1" / "10_Fourth.py").write_text(START)
    out = tmp_path / "run"
    before = {"level1__7_Relu_scale": "done", "level1__8_Huge": "start fails",
              "level1__9_Third": "done, box cut by --wall (40 of 100 s)"}
    for slug, status in before.items():
        TIER._write(out / "ops" / f"{slug}.json", {"op": slug, "status": status, "tier": "interpret",
                                                   "commit": "c0ffee0",
                                                   **({"best": {"ok": True}} if "cut" in status else {})})
    ran = []

    def fake_run(p, args, where):
        ran.append(p.key)
        return {"op": p.key, "status": "done", "tier": "interpret", "start": {"ok": True}}

    monkeypatch.setattr(TIER, "run_problem", fake_run)
    argv = ["--kernelbench", str(kb), "--starts", str(starts), "--tier", "interpret", "--out", str(out),
            "--commit", "c0ffee0"]
    assert TIER.main([*argv, "--redo-unfinished"]) == 0
    assert sorted(ran[:2]) == ["level1/10_Fourth", "level1/8_Huge"]  # no search yet: first
    assert ran[2:] == ["level1/9_Third"]
    statuses = {s: json.loads((out / "ops" / f"{s}.json").read_text())["status"] for s in before}
    assert set(statuses.values()) == {"done"}
    ran.clear()
    assert TIER.main(argv) == 0 and ran == []  # every problem has a record now
    assert TIER.unfinished({"status": "refused"}) and not TIER.unfinished({"status": "done"})


def test_a_searched_record_waits_for_its_fresh_gates_not_for_a_new_search() -> None:
    """With several problems at once on the device a record ends its search as "searched"
    (bench/heldout.py's settle gates it after every search): --redo-unfinished does not search
    it again, and a box --wall cut is named once it is done."""
    tier = _tier()
    assert not tier.unfinished({"status": "searched"}) and not tier.unfinished({"status": "done"})
    assert tier.unfinished({"status": "start fails"})
    rec = {"status": "done", "box_s": 40.0, "best": {"termination": "time-box"}}
    tier.name_cut(rec, 100.0)
    assert rec["status"] == "done, box cut by --wall (40 of 100 s)"
    whole = {"status": "done", "box_s": 100.0, "best": {"termination": "time-box"}}
    tier.name_cut(whole, 100.0)
    assert whole["status"] == "done"
    waiting = {"status": "searched", "box_s": 40.0, "best": {"termination": "time-box"}}
    tier.name_cut(waiting, 100.0)
    assert waiting["status"] == "searched"


def test_only_naming_no_start_kernel_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    kb, starts = _checkout(tmp_path)
    code = TIER.main(["--kernelbench", str(kb), "--starts", str(starts), "--only", "level1/7,level1/99",
                      "--stage", str(tmp_path / "dest")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "level1/99" in err and "level1/7," not in err
    assert not (tmp_path / "dest").exists()
    assert TIER.main(["--kernelbench", str(kb), "--starts", str(starts), "--only", "level1/7",
                      "--stage", str(tmp_path / "dest")]) == 0
    assert [p.name for p in (tmp_path / "dest" / "level1").iterdir()] == ["7_Relu_scale.py"]
