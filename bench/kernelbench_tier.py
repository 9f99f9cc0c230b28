"""KernelBench tier: the problems of a KernelBench checkout that have a start kernel here, each
run as the held-out tier runs an operator, reported with KernelBench's own metrics.

    python3 bench/kernelbench_tier.py --kernelbench DIR [--starts bench/kernelbench]
        [--tier device|interpret] [--only NAME|level1/N,...] [--shard K/N] [--budget-steps 12] [--box 300]
        [--wall S] [--settle-wall S] [--settle-jobs N] [--jobs N] [--gpus N] [--gpu-memory GB] [--host-memory GB]
        [--baselines-in-slot] [--library DIR]
        [--out DIR] [--fresh | --redo-unfinished] [--commit SHA | --any-commit]
        [--tables-only] [--start-only] [--no-baselines | --baselines-only] [--no-compile]
        [--baseline-jobs 4] [--baseline-timeout 150] [--baseline-wall 600]
    python3 bench/kernelbench_tier.py --kernelbench DIR --stage DEST

DIR (or $KERNELBENCH_DIR) is a KernelBench checkout (its root or its `KernelBench` folder, the
one holding level1/, level2/ ...). A start kernel is a plain Triton module filed under STARTS
by the problem's level and file name (STARTS/level1/1_Square_matrix_multiplication_.py for
DIR/level1/1_Square_matrix_multiplication_.py), with `run(*inputs, *params, *buffers)` as
docs/INTERFACES.md gives a problem file's inputs. The benchmark's files stay where DIR is:
`--stage DEST` copies only the problem files that have a start kernel into DEST (an ignored
folder of the repository, `.kb`, carries them to a GPU machine) and exits.

Per problem (`bench/heldout.py`'s `bench_operator`): the start kernel gated at --tier, an
optimize run of --budget-steps candidates within --box seconds (its best gated again, fresh),
and the control (the start kernel under a plain autotune list of the same budget); with
--start-only, the start kernel's gate alone. A problem file the loader refuses, or the gate at
the run's tier, is a row with its one-line reason, not the end of the run.

Device tier, after the gates (a pass of its own: `baselines_pass`), the problem's Model timed
as a user would run it instead of a kernel, each by `triton.testing.do_bench` (median, L2
flushed), in a child process per problem (`--baseline-jobs` at once): eager PyTorch with the
process's defaults (fp32 matmuls in full precision), eager with TF32 allowed, and
`torch.compile(mode="max-autotune-no-cudagraphs")`. The children share the GPU lock as a gate's
worker does (`time_baselines`: timings exclusive), so their figures are sound beside gates; each
child is given `--baseline-timeout` seconds (a compile over it is stopped, its process group
with it, and recorded as a timeout; what was measured before stays) and none runs past
`--baseline-wall`. A kernel's ratio to compile is the gate's x/ref (kernel and reference timed
in one worker) times eager over compile (both timed in the child).

At the device tier each problem runs in a process of its own (`problem_process`), pinned to
one GPU of the machine (`--gpus N`, default every visible one: `gpuslots`, one memory pool per
GPU; each GPU has its own GPU lock and memory ledger, so timed sections exclude only the gates
of their GPU). With --gpu-memory (GB per GPU), the problems run largest first (the smaller ones
filling the room around them: `gpuslots.schedule`), each placed where what its gate holds at
the least fits (`gate_memory`: the fewest input sets a gate keeps,
the rest waiting in host memory) and granted up to what it would keep at the most; its gates
plan their sets for at most the grant (`gate.memplan.CAP_ENV`), so several problems share a GPU
where they fit and the largest take turns. A gate granted its least parks its sets in host memory
(`gate.memplan.host_bytes`): the problems so granted start while what they park fits in
--host-memory (GB for the machine; default 80% of its memory). A problem --wall leaves unstarted is a row that says
so (a rerun runs it), and one whose box --wall cut says that in its status. The fresh gates
(each best again, the control) run after every search, --settle-jobs problems at a time per
GPU, none after --settle-wall. With --baselines-in-slot, a problem's baselines are timed right
after its search in its own slot (the GPU lock makes the timings exclusive beside the other
searches) where they end before --settle-wall (without it: where --wall is not reached), so
the baselines pass has only the rest to do.

Every record names the commit it measured (--commit, $KLINEAGE_COMMIT or the checkout's HEAD);
records of another commit are kept apart: not in the tables' figures (their rows say so, and
`kept_apart` lists them), and run again by a rerun (`--any-commit` counts them as this run's). Each row carries its FLOPs, bytes
and FLOPs per byte at the real sizes (`problem_work`): compute-bound problems are those at or
above the held-out tier's threshold, and the tables give KernelBench's metrics over them apart.

The gate itself times the reference with TF32 allowed too (fp32 problems, in its worker,
`Timing.reference_tf32_ms`), and under torch.compile where KLINEAGE_GATE_COMPILE=1 is set (a
compile per gate: meant for --start-only runs); where it did, the ratio is the gate's own.

Tables (OUT/kernelbench.json and .md): per problem start, best, control, eager, eager-TF32 and
torch.compile ms and the ratios, and which kernels the gate flagged as computing in lower
precision than the fp32 reference; then KernelBench's metrics (`kernelbench_metrics`): fast_p at
p = 0, 1, 1.5, 2 (the fraction of all problems whose kernel is correct and faster than the
baseline by more than p) and the geometric-mean speedup over the correct ones, for start, best
and control against each baseline. Records are OUT/ops/<problem>.json; a rerun continues
(--fresh redoes). At --tier interpret nothing is timed: the tables say pass/fail.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "bench"):  # the packages, and bench/heldout.py as `heldout`
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

STARTS = ROOT / "bench" / "kernelbench"
FAST_P = (0.0, 1.0, 1.5, 2.0)
BASELINES = ("eager", "eager_tf32", "compile")
KERNELS = ("start", "best", "control")
COMPILE_MODE = "max-autotune-no-cudagraphs"


def _heldout() -> Any:
    """bench/heldout.py (the per-operator steps and table helpers)."""
    import heldout

    return heldout


# -- pairing ----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class Problem:
    """One problem with a start kernel: `key` is "<level>/<file stem>"."""

    level: str
    problem: Path
    start: Path

    @property
    def key(self) -> str:
        return f"{self.level}/{self.problem.stem}"

    @property
    def slug(self) -> str:
        return self.key.replace("/", "__")


def problem_root(directory: Path) -> Path:
    """The folder holding a checkout's level folders: `directory` itself, or its `KernelBench`
    subfolder (the repository's layout). Raises `BadInputError` when neither has a level folder."""
    from kir.errors import BadInputError

    for root in (directory, directory / "KernelBench"):
        if any(p.is_dir() and p.name.startswith("level") for p in (root.iterdir() if root.is_dir() else ())):
            return root
    raise BadInputError(f"{directory}: not a KernelBench checkout (no level1/, level2/ ... in it "
                        f"or in its KernelBench/ folder)")


def pair_problems(root: Path, starts: Path, only: Iterable[str] = ()) -> tuple[list[Problem], list[str]]:
    """(problems with both a start kernel under `starts` and a problem file under `root`, the
    start kernels whose problem file is missing, as keys), sorted by level and problem number.
    `only` keeps the problems named (`names`)."""
    wanted = set(only)
    found: list[Problem] = []
    missing: list[str] = []
    for start in sorted(starts.glob("level*/*.py")):
        level = start.parent.name
        problem = root / level / start.name
        entry = Problem(level, problem, start)
        if wanted and not (names(entry) & wanted):
            continue
        (found.append(entry) if problem.is_file() else missing.append(entry.key))
    found.sort(key=lambda p: (p.level, _number(p.problem.stem), p.problem.stem))
    return found, missing


def names(entry: Problem) -> set[str]:
    """What `--only` may call a problem: its key (level1/3_Batched_matrix_multiplication), its
    file stem, or its level and number (level1/3)."""
    return {entry.key, entry.start.stem, f"{entry.level}/{_number(entry.start.stem)}"}


def unknown_names(starts: Path, only: Iterable[str]) -> list[str]:
    """The names in `only` that call no start kernel under `starts`."""
    known = set().union(*(names(Problem(p.parent.name, p, p)) for p in starts.glob("level*/*.py")))
    return [name for name in only if name not in known]


def _number(stem: str) -> int:
    head = stem.split("_", 1)[0]
    return int(head) if head.isdigit() else 1 << 30


def stage(problems: Sequence[Problem], dest: Path) -> list[Path]:
    """Copy the problem files of `problems` into dest/<level>/ (what a GPU run carries)."""
    written = []
    for p in problems:
        target = dest / p.level / p.problem.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p.problem, target)
        written.append(target)
    return written


# -- KernelBench's metrics ------------------------------------------------------------------

def kernelbench_metrics(results: Sequence[tuple[bool, float | None, float | None]],
                        thresholds: Sequence[float] = FAST_P) -> dict[str, Any]:
    """KernelBench's metrics over `results`, one (correct, kernel ms, baseline ms) per problem.

    fast_p: the fraction of *all* problems whose kernel is correct and whose speedup (baseline
    ms / kernel ms) is greater than p; a problem without both times counts as not fast.
    geomean_speedup: the geometric mean of the speedups of the correct problems with both times
    (None when there is none). `n` counts every problem, `correct` the correct ones."""
    speedups = [b / k for ok, k, b in results if ok and k and b and k > 0 and b > 0]
    n = len(results)
    return {"n": n, "correct": sum(1 for ok, _, _ in results if ok), "timed": len(speedups),
            "fast_p": {f"{p:g}": (sum(1 for s in speedups if s > p) / n) if n else None
                       for p in thresholds},
            "geomean_speedup": math.exp(sum(math.log(s) for s in speedups) / len(speedups))
            if speedups else None}


# -- baselines ----------------------------------------------------------------------------------

def _load_problem(path: Path) -> dict[str, Any]:
    """The problem file executed as a module (KernelBench's own way of running it)."""
    import runpy

    return runpy.run_path(str(path), run_name="kernelbench_problem")


def _rel_err(out: Any, ref: Any) -> float:
    import torch

    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    worst = 0.0
    for o, r in zip(outs, refs):
        if isinstance(r, torch.Tensor) and r.is_floating_point():  # fp32 norms: an estimate
            worst = max(worst, float((o.float() - r.float()).norm() / r.float().norm().clamp_min(1e-30)))
    return worst


def _inductor_benchmark_lock(lock: Any) -> bool:
    """Route torch.compile's autotuning measurements through `lock.exclusive` where this
    torch lets a harness do so (`set_gpu_benchmark_lock_context`); False where it does not."""
    try:
        from torch._inductor.runtime import benchmarking
    except ImportError:
        return False
    setter = getattr(benchmarking, "set_gpu_benchmark_lock_context", None)
    if setter is None:
        return False
    setter(lock.exclusive)
    return True


def time_baselines(model: Any, inputs: Sequence[Any], lock: Any, bench: Any,
                   compile_fn: Any = None, write: Any = None,
                   compile_benchmarks_locked: bool = False) -> dict[str, Any]:
    """Eager, eager-TF32 and (with `compile_fn`, which wraps a module) compiled times of
    `model(*inputs)`, each by `bench(fn) -> ms`, on the GPU `lock` (a `gate.gpulock` lock)
    belongs to, shared as a gate's worker shares it: untimed runs (the reference output) hold
    the shared lock, and the three timings are taken one after another in one hold of the
    exclusive lock, so the figures are sound beside concurrent gates and never disturb theirs.
    The compile (the compiled model's first call, which also autotunes it) comes first and
    holds the shared lock throughout, unless `compile_benchmarks_locked` (its autotuning
    measurements take the exclusive lock themselves): then it holds none. One exclusive hold
    per problem, after its compile, keeps processes compiling side by side from waiting on
    each other's compiles more than once. `write(out)` is called with the figures so far
    before each step ("stage" names it) and at the end ("stage": "done")."""
    import contextlib

    import torch

    out: dict[str, Any] = {}
    write = write or (lambda _: None)

    def step(name: str) -> None:
        out["stage"] = name
        write(dict(out))

    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    compiled = None
    try:
        step("reference")
        with lock.shared(), torch.no_grad():
            ref = model(*inputs)
        if compile_fn is not None:
            step("compile")
            try:
                wrapped = compile_fn(model)
                t0 = time.perf_counter()
                held = contextlib.nullcontext() if compile_benchmarks_locked else lock.shared()
                with held, torch.no_grad():
                    result = wrapped(*inputs)
                out["compile_s"] = round(time.perf_counter() - t0, 1)
                out["compile_err"] = _rel_err(result, ref)
                compiled = wrapped
            except Exception as exc:  # noqa: BLE001 — a model torch.compile fails on: a cell says why
                out["compile_status"] = "error"
                out["compile_error"] = f"{type(exc).__name__}: {exc}"[:300]
        step("timing")
        with lock.exclusive(), torch.no_grad():
            out["eager_ms"] = float(bench(lambda: model(*inputs)))
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
            out["eager_tf32_err"] = _rel_err(model(*inputs), ref)
            out["eager_tf32_ms"] = float(bench(lambda: model(*inputs)))
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
            if compiled is not None:
                out["compile_ms"] = float(bench(lambda: compiled(*inputs)))
                out["compile_status"] = "ok"
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    step("done")
    return out


def baseline_child(path: Path, out_file: Path, compile_model: bool = True, seed: int = 1234) -> int:
    """The baselines of one problem in this process (meant to be a child of the harness:
    `--baseline-child`), on its GPU, its figures written to `out_file` as they come."""
    facts: dict[str, Any] = {}

    def write(data: Mapping[str, Any]) -> None:
        _write(out_file, {**facts, **data})

    try:
        import torch
        from triton.testing import do_bench

        from gate import gpulock

        facts["gpu"] = torch.cuda.get_device_name(0)
        lock = gpulock.for_current_device(torch)
        locked = compile_model and _inductor_benchmark_lock(lock)
        facts["compile_lock"] = ("autotuning measurements exclusive" if locked
                                 else "compile under the shared lock")
        ns = _load_problem(path)
        torch.manual_seed(seed)
        with torch.device("cuda"):  # drawn on the GPU, as the gate draws a problem's inputs
            inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in ns["get_inputs"]()]
            model = ns["Model"](*ns["get_init_inputs"]()).cuda()
        time_baselines(
            model, inputs, lock, lambda fn: do_bench(fn, warmup=25, rep=100, return_mode="median"),
            (lambda m: torch.compile(m, mode=COMPILE_MODE)) if compile_model else None, write, locked)
    except Exception as exc:  # noqa: BLE001 — the row says why
        write({"stage": "done", "error": " ".join(f"{type(exc).__name__}: {exc}".split())[:300]})
    return 0


def measure_baselines(path: Path, timeout: float, compile_model: bool = True,
                      threads: int | None = None, command: Sequence[str] | None = None,
                      env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A problem's baselines (`time_baselines`) measured by a child process given `timeout`
    seconds in all; the child and every process it started (torch.compile's compile workers)
    are stopped when it runs over. The entry holds what the child measured before that, and
    says where it was stopped: `compile_status` "timeout" when in the compile, else `error`.
    `threads` bounds torch.compile's compile workers (several children at once share the
    CPU); `env` is the child's environment (default this process's: `gpuslots.slot_env` pins
    it to a GPU); `command` replaces the child's command line (tests)."""
    import signal
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kb-baseline-") as tmp:
        out_file = Path(tmp) / "baselines.json"
        cmd = list(command) if command else [
            sys.executable, str(Path(__file__).resolve()), "--baseline-child", str(path),
            "--child-out", str(out_file), *([] if compile_model else ["--no-compile"])]
        env = {**(os.environ if env is None else env), "KB_BASELINE_OUT": str(out_file),
               **({"TORCHINDUCTOR_COMPILE_THREADS": str(threads)} if threads else {})}
        t0 = time.monotonic()
        # stderr to a file: a process that outlived the group cannot hold this call on a pipe
        with open(Path(tmp) / "stderr.txt", "w+") as err_file:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_file, env=env,
                                    start_new_session=True)  # its own group: stopped whole
            try:
                proc.wait(timeout=timeout)
                stopped = False
            except subprocess.TimeoutExpired:
                stopped = True
            with contextlib.suppress(ProcessLookupError, PermissionError):  # what it left running too
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            err_file.seek(0)
            err = err_file.read()
        try:
            out = json.loads(out_file.read_text())
        except (OSError, json.JSONDecodeError):
            out = {}
    out["wall_s"] = round(time.monotonic() - t0, 1)
    if stopped:
        out["timeout_s"] = timeout
        if out.get("stage") == "compile":
            out["compile_status"] = "timeout"
            out["compile_error"] = f"torch.compile did not finish within the {timeout:.0f} s given"
        else:
            out["error"] = f"stopped after {timeout:.0f} s at {out.get('stage') or 'start-up'}"
    elif out.get("stage") != "done" and "error" not in out:
        tail = (err or "").strip().splitlines()
        out["error"] = f"the baseline process ended with code {proc.returncode}" + (
            f": {tail[-1][:240]}" if tail else "")
    return out


# -- tables ---------------------------------------------------------------------------------------

def _kernel_entry(rec: Mapping[str, Any], kernel: str) -> dict[str, Any]:
    """The measurement of start / best / control the tables use (heldout's choice: the best's
    fresh gate where it passed)."""
    return _heldout()._measured(dict(rec), kernel)


def kernel_vs(rec: Mapping[str, Any], kernel: str, baseline: str) -> tuple[bool, float | None, float | None]:
    """(correct, kernel ms, baseline ms on the gate's clock) of one record: eager is the gate's
    own reference time, eager-TF32 and compile the gate's reference with TF32 allowed or under
    torch.compile where the gate timed them (KLINEAGE_GATE_COMPILE=1 for the latter), else where
    the start's gate timed them (scaled by this gate's reference over the start gate's);
    otherwise they are scaled by eager's time measured beside them by the harness."""
    entry = _kernel_entry(rec, kernel)
    ok = bool(entry.get("ok"))
    ms = entry.get("ms")
    ref = entry.get("reference_ms") or rec.get("reference_ms")
    base = rec.get("baselines") or {}
    if baseline == "eager" or not ref:
        return ok, ms, ref
    field = f"reference_{baseline.removeprefix('eager_')}_ms"
    own = entry.get(field)  # the gate's own, if timed
    if own:
        return ok, ms, own
    start = rec.get("start") or {}
    if start.get(field) and start.get("reference_ms"):
        return ok, ms, ref * start[field] / start["reference_ms"]
    other, eager = base.get(f"{baseline}_ms"), base.get("eager_ms")
    return ok, ms, (ref * other / eager) if other and eager else None


def lower_precision(entry: Mapping[str, Any]) -> bool:
    """Whether a gate's summary carries the verdict's lower-precision flag (the kernel computed
    in lower precision than the fp32 reference: its speedup is partly precision)."""
    return any(str(f).startswith("lower precision") for f in entry.get("flags") or ())


def build_tables(records: Sequence[Mapping[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """The JSON result: rows per problem (every problem of the run: refused and not started
    ones too), each with the baselines on the gate's clock (eager = the start gate's reference;
    eager-TF32 and compile as `kernel_vs` gives them for the start) and each kernel's ratio to
    each baseline; KernelBench's metrics per kernel and baseline over all problems
    (`metrics`) and over the compute-bound ones (`compute_bound`)."""
    rows = []
    for rec in sorted(records, key=lambda r: (r.get("level", ""), _number(r.get("op", "").rsplit("/", 1)[-1]))):
        row = dict(rec)
        for kernel in KERNELS:
            for baseline in BASELINES:
                ok, ms, base = kernel_vs(rec, kernel, baseline)
                row[f"{kernel}_x_{baseline}"] = base / ms if ok and ms and base else None
        for kernel in KERNELS:
            row[f"{kernel}_ms"] = _kernel_entry(rec, kernel).get("ms")
        for baseline in BASELINES:
            row[f"{baseline}_ms"] = kernel_vs(rec, "start", baseline)[2]
        row["compile_status"] = (rec.get("baselines") or {}).get("compile_status")
        row["lower_precision"] = [k for k in KERNELS if lower_precision(_kernel_entry(rec, k))]
        rows.append(row)
    bound = [r for r in records if r.get("compute_bound")]

    def table(subset: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return {kernel: {baseline: kernelbench_metrics([kernel_vs(r, kernel, baseline) for r in subset])
                         for baseline in BASELINES} for kernel in KERNELS}

    return {"tier": args.tier, "library": str(args.library), "budget_steps": args.budget_steps,
            "box_s": args.box, "command": "python3 bench/kernelbench_tier.py " + " ".join(sys.argv[1:]),
            "compile_mode": COMPILE_MODE, "rows": rows, "metrics": table(records),
            "compute_bound": {"problems": [r.get("op") for r in bound],
                              "unclassified": [r.get("op") for r in records if "compute_bound" not in r],
                              "threshold_flops_per_byte": _heldout().COMPUTE_BOUND,
                              "metrics": table(bound)},
            "status": {s: sum(1 for r in records if _status(r) == s)
                       for s in sorted({_status(r) for r in records})}}


def _status(rec: Mapping[str, Any]) -> str:
    """A record's status without its details ("done, box cut by --wall (...)" -> "box cut")."""
    text = str(rec.get("status") or "-")
    return "box cut by --wall" if "box cut" in text else text


def _fmt(v: Any, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def _metrics_lines(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    lines = ["| kernel | baseline | n | correct | fast_0 | fast_1 | fast_1.5 | fast_2 | geomean |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kernel, by_base in metrics.items():
        for baseline, m in by_base.items():
            fp = m["fast_p"]
            lines.append(f"| {kernel} | {baseline} | {m['n']} | {m['correct']} | {_fmt(fp['0'])} | {_fmt(fp['1'])} "
                         f"| {_fmt(fp['1.5'])} | {_fmt(fp['2'])} | {_fmt(m['geomean_speedup'])} |")
    return lines


def markdown(result: Mapping[str, Any]) -> str:
    lines = [f"# KernelBench tier ({result['tier']})", "",
             f"Library `{result['library']}`, budget {result['budget_steps']} gated candidates, box "
             f"{result['box_s']:.0f} s per problem"
             + (f", commit {result['commit']}" if result.get("commit") else "")
             + f". Command: `{result['command']}`.", ""]
    if result.get("kept_apart"):
        lines += ["Kept apart (records of another commit, not in these figures): "
                  + "; ".join(f"{r['op']} ({r.get('commit') or 'no commit'}: {r.get('status')})"
                              for r in result["kept_apart"]), ""]
    if result["tier"] != "device":
        lines += ["| problem | status | start | optimize | best ok | control | FLOP/B |",
                  "|---|---|---|---|---|---|---|"]
        for r in result["rows"]:
            best, ctrl = r.get("best") or {}, r.get("control") or {}
            start = r.get("start") or {}
            best_ok = "-" if not best else "pass" if best.get("ok") else "FAIL"
            ctrl_ok = "-" if not ctrl else "pass" if ctrl.get("ok") else "FAIL: " + str(ctrl.get("reason"))[:80]
            start_cell = "pass" if start.get("ok") else "-" if "not started" in str(r.get("status")) else \
                "FAIL: " + str(r.get("reason") or start.get("reason"))[:100]
            lines.append(f"| {r['op']} | {r.get('status', '-')} | {start_cell} "
                         f"| {best.get('termination', best.get('error', '-'))} | {best_ok} | {ctrl_ok} "
                         f"| {_fmt(r.get('intensity'), '.1f')} |")
        return "\n".join(lines) + "\n"
    lines += ["Times in ms, on the gate's clock: eager is the start gate's reference (timed in its "
              "worker, beside the kernel); eager-TF32 the same gate's reference with TF32 allowed; "
              "compile is eager scaled by compile over eager, both timed by the harness under the GPU "
              f"lock (`torch.compile(mode=\"{result['compile_mode']}\")`). CB: compute-bound "
              f"(FLOPs per byte >= {result['compute_bound']['threshold_flops_per_byte']:g}).", "",
              "| problem | status | CB | start | best | control | eager | eager-TF32 | compile | start x/eager "
              "| best x/eager | best x/tf32 | best x/compile | control x/eager | lower precision | cards |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        compile_cell = _fmt(r.get("compile_ms"), ".4f")
        if r.get("compile_status") and r["compile_status"] != "ok":
            compile_cell = r["compile_status"]
        cb = "-" if "compute_bound" not in r else "yes" if r["compute_bound"] else "no"
        lines.append(
            f"| {r['op']} | {r.get('status', '-')} | {cb} | {_fmt(_kernel_entry(r, 'start').get('ms'), '.4f')} "
            f"| {_fmt(_kernel_entry(r, 'best').get('ms'), '.4f')} | {_fmt(_kernel_entry(r, 'control').get('ms'), '.4f')} "
            f"| {_fmt(r.get('eager_ms'), '.4f')} | {_fmt(r.get('eager_tf32_ms'), '.4f')} "
            f"| {compile_cell} | {_fmt(r.get('start_x_eager'))} | {_fmt(r.get('best_x_eager'))} "
            f"| {_fmt(r.get('best_x_eager_tf32'))} | {_fmt(r.get('best_x_compile'))} "
            f"| {_fmt(r.get('control_x_eager'))} | {', '.join(r.get('lower_precision') or []) or '-'} "
            f"| {', '.join(r.get('cards') or []) or '-'} |")
    bound = result["compute_bound"]
    goal = bound["metrics"]["best"]["eager_tf32"]
    vs_compile = result["metrics"]["best"]["compile"]
    lines += ["", "Status: " + ", ".join(f"{n} {s}" for s, n in result["status"].items()) + ".", "",
              f"Best over eager-TF32, geometric mean over the {goal['timed']} compute-bound problems "
              f"timed ({len(bound['problems'])} compute-bound): {_fmt(goal['geomean_speedup'])}. "
              f"fast_1 against torch.compile: {_fmt(vs_compile['fast_p']['1'])} of {vs_compile['n']} problems.",
              "", "KernelBench's metrics over every problem of the run (refused and not started ones "
              "count as not fast): fast_p is the fraction of all problems whose kernel is correct and "
              "more than p times faster than the baseline; geomean over the correct ones timed.", ""]
    lines += _metrics_lines(result["metrics"])
    lines += ["", "Over the compute-bound problems: " + (", ".join(bound["problems"]) or "none") + ".", ""]
    lines += _metrics_lines(bound["metrics"])
    if bound["unclassified"]:
        lines += ["", "Not classified (no FLOP count): " + ", ".join(bound["unclassified"])]
    refused = [r for r in result["rows"] if r.get("status") == "refused"]
    if refused:
        lines += ["", "Refused by the loader: " + "; ".join(f"{r['op']}: {r['reason']}" for r in refused)]
    return "\n".join(lines) + "\n"


# -- the run ----------------------------------------------------------------------------------------

def problem_work(case: Any) -> dict[str, Any]:
    """FLOPs, bytes (inputs, Model tensors and outputs) and FLOPs per byte of one forward of a
    problem at its real sizes (`gate.kernelbench`'s `work`, on the meta device), and whether
    that makes it compute-bound (intensity at or above the held-out tier's `COMPUTE_BOUND`);
    `work_error` where the forward cannot be counted."""
    from kir.errors import BadInputError

    try:
        flops, bytes_in, bytes_out = case.module().work(dict(next(iter(case.shapes.values()))))
    except (BadInputError, AttributeError) as exc:
        return {"work_error": str(exc)}
    intensity = flops / max(bytes_in + bytes_out, 1.0)
    return {"flops": flops, "bytes": bytes_in + bytes_out, "bytes_in": bytes_in, "bytes_out": bytes_out,
            "intensity": round(intensity, 2), "compute_bound": intensity >= _heldout().COMPUTE_BOUND}


def problem_case(p: Any) -> Any:
    """The problem's case with the repository's start kernel as its start."""
    import gate

    return dataclasses.replace(gate.load_case(p.problem), start=str(p.start.resolve()))


def name_cut(rec: dict[str, Any], box_asked: float) -> None:
    """A done record whose search the box ended, where --wall made the box shorter than
    asked, says so in its status."""
    cut = (rec.get("best") or {}).get("termination") == "time-box"  # the box, not the budget
    box = rec.get("box_s")
    if rec.get("status") == "done" and cut and box is not None and box < box_asked:
        rec["status"] = f"done, box cut by --wall ({box:.0f} of {box_asked:.0f} s)"


def run_problem(p: Problem, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One problem's record: heldout's steps on the problem's case with the start kernel given;
    its status says when --wall cut its box."""
    from kir.errors import BadInputError

    heldout = _heldout()
    base = {"op": p.key, "level": p.level, "problem": str(p.problem), "tier": args.tier,
            "start_file": str(p.start.relative_to(ROOT)) if p.start.is_relative_to(ROOT) else str(p.start)}
    try:
        case = problem_case(p)
    except BadInputError as exc:
        heldout.say(p.key, f"refused: {exc}")
        return {**base, "status": "refused", "reason": str(exc), "start": {"ok": False}}
    base.update(problem_work(case))
    try:
        if args.start_only:
            heldout.say(p.key, f"gating the start kernel at {args.tier}")
            summary = heldout._verdict_summary(heldout._check_file(args, case, p.start))
            rec = {**heldout._record(case, args), "start": summary, "reference_ms": summary["reference_ms"],
                   "status": "start only"}
        else:
            rec = heldout.bench_operator(case, args, out)
            rec["box_s"] = round(args.box, 1)
            name_cut(rec, args.box_asked)
    except BadInputError as exc:  # e.g. no interpret-tier sizes: refused at this tier
        heldout.say(p.key, f"refused at {args.tier}: {exc}")
        return {**base, "status": "refused", "reason": str(exc), "start": {"ok": False}}
    return {**rec, **base, "ref": case.ref}


def unfinished(rec: Mapping[str, Any]) -> bool:
    """A record that --redo-unfinished runs again: any status but a finished run ("done"), or
    one whose search ended and whose fresh gates wait ("searched": only those are run)."""
    return str(rec.get("status")) not in ("done", "searched")


def not_started(p: Problem, status: str) -> dict[str, Any]:
    """The table's row of a problem without a record, `status` saying why (not written as a
    record: a rerun runs it)."""
    row = {"op": p.key, "level": p.level, "problem": str(p.problem), "status": status,
           "start": {"ok": False}}
    return with_work(p, row)


def with_work(p: Problem, rec: dict[str, Any]) -> dict[str, Any]:
    """`rec` with the problem's `problem_work` where it has none (a record of an earlier run)."""
    import gate
    from kir.errors import BadInputError

    if "compute_bound" in rec or "work_error" in rec or rec.get("status") == "refused":
        return rec
    try:
        return {**rec, **problem_work(gate.load_case(p.problem))}
    except BadInputError as exc:
        return {**rec, "work_error": str(exc)}


def _bytes_of(p: Problem) -> tuple[float, float]:
    """A problem's bytes at its real sizes, (inputs and Model tensors, outputs)
    (`problem_work`; zeros where it does not load or cannot be counted)."""
    import gate
    from kir.errors import BadInputError

    try:
        work = problem_work(gate.load_case(p.problem))
    except BadInputError:
        return 0.0, 0.0
    return float(work.get("bytes_in") or 0.0), float(work.get("bytes_out") or 0.0)


def gate_memory(bytes_in: float, bytes_out: float) -> Any:
    """What one problem's gate holds on the device (`gpuslots.GateMemory`), from the bytes of
    one input set and of its outputs: at the least (`gate.memplan.least_bytes`: a lean plan,
    every set and held reference waiting in host memory between its uses, the device holding
    the largest phase) with the host memory it then holds (`gate.memplan.host_bytes`), keeping
    its first sets and parking the others (`gate.memplan.parked_bytes`, less host memory), and
    at the most (`gate.memplan.gate_bytes`: every set a gate asks for). A gate granted anything
    between plans its sets for what it was granted (`gpuslots.slot_env`), so problems whose
    grants fit together never make one another's gates short."""
    import gpuslots

    from gate import memplan
    from gate.channel import Job

    pool = Job.__dataclass_fields__["refill_sets"].default
    set_bytes, out_bytes = int(bytes_in), int(bytes_out)
    fixed = memplan.fixed_sets(device=True)
    least = memplan.least_plan(seeds=GATE_SEEDS, pool=pool, fixed=fixed)
    kept = memplan.parked_plan(seeds=GATE_SEEDS, pool=pool, fixed=fixed)
    return gpuslots.GateMemory(
        least=float(memplan.least_bytes(set_bytes, out_bytes, pool=pool, fixed=fixed, held=True)),
        most=float(memplan.gate_bytes(set_bytes, out_bytes, seeds=GATE_SEEDS, pool=pool, fixed=fixed,
                                      held=True)),
        host=float(memplan.host_bytes(least, set_bytes, out_bytes, held=True)),
        parked=float(memplan.parked_bytes(set_bytes, out_bytes, pool=pool, fixed=fixed, held=True)),
        parked_host=float(memplan.host_bytes(kept, set_bytes, out_bytes, held=True)))


def host_memory(args: argparse.Namespace, total: float | None) -> float | None:
    """Host bytes the problems' gates may park together: --host-memory GB, else, where
    --gpu-memory bounds the device, `HOST_SHARE` of the machine's memory; None: no bound."""
    given = getattr(args, "host_memory", None)
    if given:
        return given * 1e9
    if total is None:
        return None
    try:
        return HOST_SHARE * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


HOST_SHARE = 0.8
"""The share of the machine's memory the gates may park sets in by default (the rest: the
processes themselves, their CUDA contexts, torch.compile's workers, the page cache)."""


def _walled_before(tables: Path, problems: Sequence[Problem]) -> set[str]:
    """The problems an earlier invocation's tables (`tables`) say --wall left unstarted (a
    later --tables-only or --baselines-only keeps saying so)."""
    try:
        rows = json.loads(tables.read_text()).get("rows") or []
    except (OSError, json.JSONDecodeError, AttributeError):
        return set()
    left = {r.get("op") for r in rows if str(r.get("status")).startswith("not started")}
    return {p.slug for p in problems if p.key in left}


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    tmp.replace(path)


def _shard(text: str) -> tuple[int, int]:
    """"K/N" -> (K, N), 0 <= K < N."""
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and int(k) < int(n)):
        raise ValueError(f"--shard {text!r}: give K/N with 0 <= K < N")
    return int(k), int(n)


GATE_SEEDS = 3
"""Correctness seeds a gate draws (`gate.check`)."""
SETS_HELD = 3
"""Copies of a problem's bytes (inputs, Model tensors, outputs) a baseline process is taken
to hold on the GPU (an input set, the eager and the compiled outputs)."""


def run_commit(args: argparse.Namespace) -> str | None:
    """The commit this run measures: --commit, else $KLINEAGE_COMMIT, else the repository's
    HEAD where it is a git checkout (a tree copied without its history has none: None)."""
    import subprocess

    for given in (getattr(args, "commit", None), os.environ.get("KLINEAGE_COMMIT")):
        if given and given.strip():
            return given.strip()[:12]
    try:
        head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (head.stdout.strip() or None) if head.returncode == 0 else None


def other_commit(rec: Mapping[str, Any], commit: str | None) -> str | None:
    """The commit `rec` was measured at when that is not `commit` ("unknown" for a record
    that does not say); None when it is, or when the run's commit is not known."""
    if not commit:
        return None
    at = rec.get("commit")
    if at and (str(at).startswith(commit) or commit.startswith(str(at))):
        return None
    return str(at or "unknown")


def _gpu_list(args: argparse.Namespace) -> list[str | None]:
    """The GPUs the run spreads its problems over (`gpuslots.visible_gpus`); one unpinned
    slot off the device tier."""
    import gpuslots

    if args.tier != "device":
        return [None]

    def detected() -> int:
        import torch

        return torch.cuda.device_count()

    return list(gpuslots.visible_gpus(args.gpus, detected=detected))


def child_argv(p: Problem, args: argparse.Namespace, out: Path, child_out: Path,
               settle: bool = False) -> list[str]:
    """The command line of the process that runs one problem (`problem_child`)."""
    return [sys.executable, str(Path(__file__).resolve()), "--kernelbench", str(args.kernelbench),
            "--starts", str(args.starts), "--tier", args.tier, "--library", str(args.library),
            "--budget-steps", str(args.budget_steps), "--box", f"{args.box:.3f}",
            "--box-asked", f"{args.box_asked:.3f}", "--jobs", str(args.jobs), "--out", str(out),
            "--problem-child", p.key, "--child-out", str(child_out),
            *(["--start-only"] if args.start_only else []), *(["--settle"] if settle else [])]


STOPPED_CODES = frozenset({-2, -9, -15, 130, 137, 143})
"""Exit codes of a process stopped by SIGINT, SIGKILL or SIGTERM (a run's time limit)."""


def problem_process(p: Problem, args: argparse.Namespace, out: Path, slot: Any,
                    settle: bool = False, record: Mapping[str, Any] | None = None,
                    command: Sequence[str] | None = None) -> dict[str, Any] | None:
    """One problem's record made by a process of its own (`problem_child`) in `slot`: pinned to
    the slot's GPU, its gates planning for at most the slot's grant (`gpuslots.slot_env`);
    with `settle`, the fresh gates `record` waits for. Its log goes to this process's
    stderr. A process that ends without a record gives one that says how it ended (a rerun
    with --redo-unfinished runs it again), or None where it was stopped by a signal (the run's
    time limit: an earlier record stands). `command` replaces the child's command (tests)."""
    import subprocess
    import tempfile

    import gpuslots

    with tempfile.TemporaryDirectory(prefix="kb-problem-") as tmp:
        child_out = Path(tmp) / "record.json"
        if record is not None:
            _write(child_out, record)
        cmd = list(command) if command else child_argv(p, args, out, child_out, settle)
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, env=gpuslots.slot_env(slot),
                              check=False)
        try:
            rec = json.loads(child_out.read_text())
        except (OSError, json.JSONDecodeError):
            rec = None
    ended = f"the problem's process ended with code {done.returncode}"
    if rec is None and done.returncode in STOPPED_CODES:
        return None  # stopped (the run's time limit): no record, any earlier one stands
    if rec is None:
        return {"op": p.key, "level": p.level, "problem": str(p.problem), "tier": args.tier,
                "status": "harness error", "start": {"ok": False}, "reason": f"{ended} without a record"}
    if settle and done.returncode != 0:  # the record as it was: still waiting for its gates
        rec["settle_error"] = ended
    return rec


def problem_child(args: argparse.Namespace) -> int:
    """`--problem-child KEY`: run one problem (or, with --settle, the fresh gates of the record
    at --child-out) in this process and write its record to --child-out."""
    heldout = _heldout()
    problems, _ = pair_problems(problem_root(Path(args.kernelbench)), Path(args.starts),
                                [args.problem_child])
    target = Path(args.child_out)
    if not problems:
        print(f"kernelbench_tier: no problem {args.problem_child}", file=sys.stderr)
        return 2
    p = problems[0]
    args.gates, args.ablation = None, []
    try:
        if args.settle:
            rec = rebase_pending(json.loads(target.read_text()), Path(args.out))
            heldout.settle(problem_case(p), rec, args)
            name_cut(rec, args.box_asked)
        else:
            rec = run_problem(p, args, Path(args.out))
    except Exception as exc:  # noqa: BLE001 — the row says why; the run goes on
        heldout.say(p.key, f"harness error: {type(exc).__name__}: {exc}")
        if args.settle:
            return 1
        rec = {"op": p.key, "level": p.level, "problem": str(p.problem), "tier": args.tier,
               "status": "harness error", "start": {"ok": False},
               "reason": " ".join(f"{type(exc).__name__}: {exc}".split())[:300]}
    _write(target, rec)
    return 0


def rebase_pending(rec: dict[str, Any], out: Path) -> dict[str, Any]:
    """`rec` with each kernel file waiting for its fresh gate (a "pending" path under an
    "ops" folder) found under `out`'s where it is no longer where it was written (a run's
    folder carried to another machine)."""
    entries = [rec.get("best") or {}, *(rec.get("ablations") or {}).values()]
    for entry in entries:
        path = entry.get("pending")
        if not path or Path(path).is_file() or "ops" not in Path(path).parts:
            continue
        parts = Path(path).parts
        moved = out.joinpath(*parts[len(parts) - parts[::-1].index("ops") - 1:])
        if moved.is_file():
            entry["pending"] = str(moved)
    return rec


def run_in_slot(p: Problem, args: argparse.Namespace, out: Path, slot: Any) -> dict[str, Any] | None:
    """One problem's record: at the device tier in a process of its own in `slot`
    (`problem_process`; None where it was stopped), elsewhere in this process (`run_problem`)."""
    if args.tier == "device":
        return problem_process(p, args, out, slot)
    return run_problem(p, args, out)


def settle_all(problems: Sequence[Problem], records: dict[str, dict[str, Any]],
               args: argparse.Namespace, out: Path, gpus: Sequence[str | None], total: float | None,
               began: float) -> None:
    """The fresh gates (each best again, the control) of every record whose search ended,
    now that no search runs beside them (bench/heldout.py's settle): --settle-jobs problems at
    a time per GPU (placed by the memory their gates hold, as the searches were); none starts
    --settle-wall seconds after the run began (its record keeps "searched", and
    --redo-unfinished gates it)."""
    import gpuslots

    heldout = _heldout()
    waiting = [p for p in problems if (records.get(p.slug) or {}).get("status") == "searched"]
    if not waiting:
        return
    needs = {p.slug: gate_memory(*_bytes_of(p)) for p in waiting} if total is not None else {}
    waiting.sort(key=lambda p: -needs[p.slug].least if needs else 0.0)
    zero = gpuslots.GateMemory(0.0, 0.0)

    def one(p: Problem, slot: Any) -> None:
        rec = records[p.slug]
        if args.tier == "device":
            rec = problem_process(p, args, out, slot, settle=True, record=rec) or rec
        else:
            heldout.settle(problem_case(p), rec, args)
            name_cut(rec, args.box_asked)
        records[p.slug] = rec
        _write(out / "ops" / f"{p.slug}.json", rec)

    def late() -> bool:
        return args.settle_wall is not None and time.monotonic() - began > args.settle_wall

    admission = gpuslots.Admission(gpus, total, host_memory(args, total))
    left = gpuslots.schedule(waiting, lambda q: needs.get(q.slug, zero), admission,
                             one, args.settle_jobs * len(gpus), stop=late)
    for p in left:
        heldout.say(p.key, "fresh gates not run: --settle-wall reached (--redo-unfinished runs them)")


def slot_baselines(p: Problem, args: argparse.Namespace, slot: Any, given: float,
                   beside: int) -> dict[str, Any]:
    """One problem's baselines (`measure_baselines`) in `slot` (pinned to its GPU), given
    `given` seconds, its compile's workers a share of the CPU among `beside` processes; a run
    the time given cut short (less than --baseline-timeout) is not a measurement: it says so,
    and a rerun measures it (a compile it cut is no timeout)."""
    import gpuslots

    threads = max(2, (os.cpu_count() or 2) // max(1, beside))  # one compile worker: minutes
    measured = measure_baselines(p.problem, given, compile_model=not args.no_compile,
                                 threads=threads, env=gpuslots.slot_env(slot))
    if measured.get("timeout_s") is not None and given < args.baseline_timeout:
        return {"skipped": f"not measured: the wall left it {given:.0f} of "
                           f"{args.baseline_timeout:.0f} s (rerun to measure)", "cut": measured}
    return measured


def baselines_pass(problems: Sequence[Problem], records: dict[str, dict[str, Any]],
                   args: argparse.Namespace, out: Path, gpus: Sequence[str | None],
                   total: float | None) -> None:
    """Device tier: the baselines of every problem with a record and none measured yet,
    `--baseline-jobs` child processes at once (`measure_baselines`), each pinned to a GPU
    of `gpus` with room for what it holds (`SETS_HELD` copies of the problem's bytes, out of
    `total` per GPU), each given `--baseline-timeout` seconds, none starting or running past
    `--baseline-wall` seconds after the pass began. A problem the wall leaves unmeasured, or
    cuts short, says so and is measured by a rerun (a compile the wall cut is no timeout)."""
    import gpuslots

    heldout = _heldout()
    todo = [p for p in problems if (rec := records.get(p.slug)) is not None
            and rec.get("status") not in ("refused", "harness error") and rec.get("tier") == "device"
            and ((rec.get("baselines") or {}).get("skipped") or "baselines" not in rec)]
    todo.sort(key=lambda p: float(records[p.slug].get("bytes") or 0.0))  # smallest first
    began = time.monotonic()
    heldout.say("kernelbench", f"baselines of {len(todo)} problems, {args.baseline_jobs} at once on "
                               f"{len(gpus)} GPU(s), {args.baseline_timeout:.0f} s each, wall "
                               f"{args.baseline_wall:.0f} s")

    def need(p: Problem) -> Any:
        held = SETS_HELD * float(records[p.slug].get("bytes") or 0.0)
        return gpuslots.GateMemory(held, held)

    def one(p: Problem, slot: Any) -> None:
        rec = records[p.slug]
        given = min(args.baseline_timeout, args.baseline_wall - (time.monotonic() - began))
        rec["baselines"] = slot_baselines(p, args, slot, given, args.baseline_jobs)
        heldout.say(p.key, f"baselines: {rec['baselines']}")
        _write(out / "ops" / f"{p.slug}.json", rec)

    def late() -> bool:
        return args.baseline_wall - (time.monotonic() - began) < min(args.baseline_timeout, 20.0)

    left = gpuslots.schedule(todo, need, gpuslots.Admission(gpus, total), one, args.baseline_jobs,
                             stop=late)
    for p in left:
        records[p.slug]["baselines"] = {"skipped": "not measured: --baseline-wall reached (rerun to measure)"}
        _write(out / "ops" / f"{p.slug}.json", records[p.slug])


def main(argv: Sequence[str] | None = None) -> int:
    heldout = _heldout()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", default=os.environ.get("KERNELBENCH_DIR"),
                    help="a KernelBench checkout (default $KERNELBENCH_DIR)")
    ap.add_argument("--starts", default=str(STARTS), help="start kernels, by level and problem file name")
    ap.add_argument("--stage", default=None, metavar="DEST",
                    help="copy the problem files that have a start kernel into DEST and exit")
    ap.add_argument("--tier", choices=["device", "interpret"], default="device")
    ap.add_argument("--library", default=heldout.DEFAULT_LIBRARY)
    ap.add_argument("--budget-steps", type=int, default=12)
    ap.add_argument("--box", type=float, default=300.0, help="seconds per problem")
    ap.add_argument("--wall", type=float, default=None,
                    help="no problem starts after this many seconds, and none's box runs past it")
    ap.add_argument("--settle-wall", type=float, default=None,
                    help="no fresh gate (best again, control) starts after this many seconds")
    ap.add_argument("--settle-jobs", type=int, default=1,
                    help="problems whose fresh gates run at once per GPU (after every search)")
    ap.add_argument("--baselines-in-slot", action="store_true",
                    help="device: time each problem's baselines right after its search, in its "
                         "slot (its GPU and memory), beside the other problems' searches")
    ap.add_argument("--only", default="",
                    help="comma-separated problems (level1/NAME, NAME or level1/NUMBER)")
    ap.add_argument("--shard", default=None, metavar="K/N",
                    help="run the K-th of N interleaved parts of the problems (several processes)")
    ap.add_argument("--jobs", type=int, default=1, help="problems at once (over every GPU)")
    ap.add_argument("--gpus", type=int, default=None,
                    help="device: spread the problems over this many GPUs (default: every visible one)")
    ap.add_argument("--gpu-memory", type=float, default=None, metavar="GB",
                    help="device memory per GPU the problems' gates may hold together "
                         "(gate_memory, gpuslots.Admission); the largest problems start first")
    ap.add_argument("--host-memory", type=float, default=None, metavar="GB",
                    help="with --gpu-memory: host memory the gates granted their least may park "
                         "sets in together (default 80%% of the machine's)")
    ap.add_argument("--commit", default=None,
                    help="the commit measured (default $KLINEAGE_COMMIT, else the checkout's HEAD); "
                         "records of another commit are kept apart and run again")
    ap.add_argument("--any-commit", action="store_true",
                    help="count records of other commits as this run's (each row names its commit)")
    ap.add_argument("--out", default=None, help="records and tables (default bench/results/kernelbench-<tier>)")
    ap.add_argument("--fresh", action="store_true", help="redo problems that have a record")
    ap.add_argument("--redo-unfinished", action="store_true",
                    help="also run again the problems whose record is not a finished run (a start "
                         "that failed, a box --wall cut, a refusal); a record stands until replaced")
    ap.add_argument("--tables-only", action="store_true", help="rewrite the tables from the records")
    ap.add_argument("--no-baselines", action="store_true", help="device: skip the baselines pass (not --baselines-in-slot)")
    ap.add_argument("--baselines-only", action="store_true",
                    help="device: the baselines pass alone, over the problems that have a record")
    ap.add_argument("--no-compile", action="store_true", help="device: time eager and eager-TF32 only")
    ap.add_argument("--baseline-jobs", type=int, default=4, help="baseline processes at once")
    ap.add_argument("--baseline-timeout", type=float, default=150.0,
                    help="seconds one problem's baselines (torch.compile included) may take")
    ap.add_argument("--baseline-wall", type=float, default=600.0,
                    help="seconds the baselines pass may take")
    ap.add_argument("--start-only", action="store_true",
                    help="gate the start kernels alone (no optimize run, no control); their records "
                         "stand until --fresh")
    ap.add_argument("--baseline-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--problem-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--settle", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--box-asked", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    from kir.errors import BadInputError

    if args.baseline_child:
        return baseline_child(Path(args.baseline_child), Path(args.child_out), not args.no_compile)
    if args.problem_child:
        args.box_asked = args.box if args.box_asked is None else args.box_asked
        return problem_child(args)
    if not args.kernelbench:
        print("kernelbench_tier: give --kernelbench DIR or set KERNELBENCH_DIR", file=sys.stderr)
        return 2
    if min(args.budget_steps, args.jobs, args.box, args.baseline_jobs, args.baseline_timeout,
           args.baseline_wall, args.gpus or 1, args.settle_jobs) <= 0:
        print("kernelbench_tier: --budget-steps, --jobs, --box, --gpus, --settle-jobs and the "
              "--baseline-* values must be positive", file=sys.stderr)
        return 2
    try:
        shard = _shard(args.shard) if args.shard else (0, 1)
        root = problem_root(Path(args.kernelbench))
    except (BadInputError, ValueError) as exc:
        print(f"kernelbench_tier: {exc}", file=sys.stderr)
        return 2
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = unknown_names(Path(args.starts), only)
    if unknown:
        print(f"kernelbench_tier: --only names no start kernel in {args.starts}: {', '.join(unknown)} "
              "(give level1/NAME, NAME or level1/NUMBER)", file=sys.stderr)
        return 2
    problems, missing = pair_problems(root, Path(args.starts), only)
    problems = problems[shard[0]::shard[1]]
    for key in missing:
        heldout.say(key, f"start kernel without a problem file in {root}: skipped")
    if not problems:
        print(f"kernelbench_tier: no problem in {root} has a start kernel in {args.starts}", file=sys.stderr)
        return 2
    if args.stage:
        written = stage(problems, Path(args.stage))
        heldout.say("kernelbench", f"copied {len(written)} problem files into {args.stage}")
        return 0
    try:
        gpus = _gpu_list(args)
    except ValueError as exc:
        print(f"kernelbench_tier: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out or ROOT / f"bench/results/kernelbench-{args.tier}")
    if args.library is None:  # heldout's default: the shipped library
        from lineage.shipped import shipped_library_path

        args.library = str(shipped_library_path())
    if not Path(args.library).exists() and (ROOT / args.library).exists():
        args.library = str(ROOT / args.library)
    args.gates, args.ablation, args.box_asked = None, [], args.box
    commit = None if args.any_commit else run_commit(args)
    measuring = not (args.tables_only or args.baselines_only)
    records: dict[str, dict[str, Any]] = {}
    apart: dict[str, dict[str, Any]] = {}  # records of another commit: not this run's figures
    todo = []
    for p in problems:
        path = out / "ops" / f"{p.slug}.json"
        if path.is_file() and not args.fresh:
            rec = json.loads(path.read_text())
            if other_commit(rec, commit):
                apart[p.slug] = rec
            else:
                records[p.slug] = rec
                if args.redo_unfinished and not unfinished(rec):
                    continue
        if measuring and (p.slug not in records or args.redo_unfinished):
            todo.append(p)
    heldout.say("kernelbench", f"{len(problems)} problems, {len(records)} with a record"
                               + (f" at {commit}" if commit else "")
                               + (f", {len(apart)} measured at another commit (kept apart)" if apart else "")
                               + f", {len(todo)} to run on {len(gpus)} GPU(s)")
    import gpuslots

    walled: set[str] = set()
    total = args.gpu_memory * 1e9 if args.gpu_memory else None
    needs: dict[str, Any] = {}
    if total is not None:  # the largest first: the small ones fill the room around them
        needs = {p.slug: gate_memory(*_bytes_of(p)) for p in todo}
        todo.sort(key=lambda p: -needs[p.slug].least)
    # problems without a search yet (never run, or their start failed) before reruns of a box
    # --wall cut: those rows have results already
    todo.sort(key=lambda p: bool((records.get(p.slug) or {}).get("best")))
    began = time.monotonic()
    in_slot = args.baselines_in_slot and args.tier == "device"

    def one(p: Problem, slot: Any) -> None:
        box = args.box if args.wall is None else min(args.box, args.wall - (time.monotonic() - began))
        if slot.gpu is not None or slot.grant is not None:
            heldout.say(p.key, f"on GPU {slot.gpu}" + (f", {slot.grant / 1e9:.1f} GB granted to its gates"
                                                       if slot.grant is not None else ""))
        rec = run_in_slot(p, argparse.Namespace(**{**vars(args), "box": max(box, 1.0)}), out, slot)
        if rec is None:
            heldout.say(p.key, "stopped before its record (a rerun runs it)")
            return
        rec.update({"commit": commit, "gpu_slot": slot.gpu,
                    "granted_gb": None if slot.grant is None else round(slot.grant / 1e9, 1)})
        if in_slot and rec.get("status") not in ("refused", "harness error") and baselines_fit():
            rec["baselines"] = slot_baselines(p, args, slot, args.baseline_timeout, args.jobs)
        records[p.slug] = rec
        apart.pop(p.slug, None)
        _write(out / "ops" / f"{p.slug}.json", rec)

    def walled_off() -> bool:
        return args.wall is not None and time.monotonic() - began > args.wall

    def baselines_fit() -> bool:  # in the slot: ending before the fresh gates' last start
        if args.settle_wall is not None:
            return time.monotonic() - began + args.baseline_timeout <= args.settle_wall
        return not walled_off()

    zero = gpuslots.GateMemory(0.0, 0.0)
    admission = gpuslots.Admission(gpus, total, host_memory(args, total))
    for p in gpuslots.schedule(todo, lambda q: needs.get(q.slug, zero), admission, one, args.jobs,
                               stop=walled_off):
        heldout.say(p.key, "not started: --wall reached (rerun the command to continue)")
        walled.add(p.slug)
    if measuring:
        settle_all(problems, records, args, out, gpus, total, began)
    if args.tier == "device" and not args.no_baselines and not args.tables_only:
        baselines_pass(problems, records, args, out, gpus, total)
    walled |= _walled_before(out / "kernelbench.json", problems)
    rows = [with_work(p, records[p.slug]) if p.slug in records else
            not_started(p, "not started (--wall)" if p.slug in walled else
                        f"not run at {commit} (a record of {apart[p.slug].get('commit') or 'another commit'} "
                        f"kept apart)" if p.slug in apart else "not run yet") for p in problems]
    result = build_tables(rows, args)
    result["commit"] = commit
    result["kept_apart"] = [{"op": rec.get("op"), "commit": rec.get("commit"), "status": rec.get("status")}
                            for rec in apart.values()]
    _write(out / "kernelbench.json", result)
    (out / "kernelbench.md").write_text(markdown(result))
    left = len(problems) - len(records)
    heldout.say("kernelbench", f"wrote {out / 'kernelbench.json'} and .md ({len(records)} problems"
                               + (f"; {left} not run yet: rerun the same command" if left else "") + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
