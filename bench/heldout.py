"""Held-out tier benchmark: the library against the start kernel, the vendor reference and a
no-library autotune control, on operators that contributed no lineage.

    python3 bench/heldout.py [DIR_OR_CASE ...] [--tier device|interpret]
        [--library DIR (default: the shipped library)] [--budget-steps 12]
        [--box 300] [--wall S] [--only mm1024,attn_gqa] [--jobs N] [--out DIR]
        [--results OUT/heldout] [--fresh] [--tables-only [--records DIR ...]]
        [--gems-only] [--ablation library-off,lookahead-off,priors-off,around-off,bundles-off]
        [--from-partial [--no-control]] [--executor local|ray [--ray-address ADDRESS]]

DIR_OR_CASE: case folders, KernelBench problem files, or folders holding them (default
bench/heldout); every case with a start kernel (`START` of a case module; `<stem>_triton.py`
beside a problem file) is an operator. Per operator, in this process (`--jobs` operators at
once; device-tier gates time one at a time under the GPU lock; with `--executor ray` every gate
of every run, start and control included, is a job on the Ray cluster, one GPU per device job):

1. start: the start kernel gated at --tier (fresh, uncached): at the device tier its time and
   the reference's, measured by the gate in the same worker process;
2. best: `lineage.optimize.optimize` with --library and --budget-steps gated candidates,
   stopped at the operator's --box (seconds; the time-box of optimize); at the device tier the
   best kernel is then gated once more, fresh (`regate`): the search kept it as the fastest of
   the candidates it timed, so its own figure is biased low, and the tables use the fresh one;
3. control: `lineage.control.autotune_control(start, max_configs=budget)`: the start kernel under
   a generic `@triton.autotune` list of at most --budget-steps configurations (the same budget of
   candidates, timed by the autotuner), no library, gated once;
4. device tier only, after every gate has finished: FlagGems' Triton operators as a second
   reference (the case's reference run under `flag_gems.use_gems()`, timed with
   `triton.testing.do_bench` beside the torch reference timed the same way), when `import
   flag_gems` works (else the column says why); and the achieved bandwidth of start, best and
   reference (the case's `bytes_moved`) against a measured copy of the same number of bytes.
   `--gems-only` (device) measures the FlagGems reference of every operator alone, no gates,
   into OUT/gems.json; the tables take a folder's gems.json where a record has no FlagGems
   time. The column is FlagGems' speed over torch's, both timed in one process (x/ref).

5. each --ablation (a comma list, or the option repeated): the optimize run again with one
   part of the search turned off (`ABLATIONS`): library-off (no card: the sweeps of the
   start's own tunables alone, the control's list first), lookahead-off (the best state only
   is expanded), priors-off (every move starts from the same prior), around-off (a structural
   step gated at its state's configuration alone, not under a list around it), bundles-off (no
   card offered with the steps its evidence ran with, `lineage.bundles`). The ablated
   runs start with the full search (step 2), each with the same budget and a box ending at the
   same time, and share its start and control gates; each best kernel is gated again fresh at
   the device tier like the best's. Each is a column (x/ref, and best over it) of the tables; at the
   interpret tier, pass/fail and the candidates gated.

Each operator's record is written to OUT/ops/<operator>.json when it ends; a rerun skips
operators that have one (--fresh redoes them), so a run cut by --wall is continued by the same
command. A run whose process was killed before its record was written (a call's time limit)
still has its optimize run's saved lineage: --from-partial records it from there (start = the
root state's verdict, best = the fastest state the run kept) and gates only the control.

--wall S is a deadline for the whole command, S seconds after it started (a GPU rented with a
hard time limit); the last WALL_RESERVE_S of it are kept for writing the records and tables.
Before that point: every gate this module runs (start, fresh gates, control) has its time limit
cut to end there; each search's box ends `lineage.optimize.BOX_GRACE_S` (how long its last gate
may run past its box) earlier, and an operator with no such box left does not start; the
FlagGems and bandwidth columns are measured only while time is left (a rerun measures the
rest). A fresh gate the deadline leaves undone (not started, or stopped by its cut limit) is
recorded as not done, not as a verdict: its entry stays `pending` (a best keeps its file), the
record keeps status "searched" with a `reason` naming what waits, and the tables give that best
no x/ref (`best ms` "not gated"; the rows under "Not done"). A rerun of the same command gates
an earlier run's waiting records first, before any new search. Within a search, optimize's own
gates end near its box, except the start's sweep, which it gates whatever the box: that one has
only the gate's own time limit.

With `--jobs` above 1 at the device tier, the fresh gates of steps 2, 3 and 5 (each best gated
again, the control) wait until every operator's searches have ended and then run one at a time
on a quiet machine: an end-to-end time whose host part is large (a kernel that launches per
group, a small problem) read 1.7x slower when it was gated beside other operators' searches
compiling on every core, with its kernel times unchanged. A record cut before that phase (or
whose fresh gates --wall left undone) says "searched" and keeps each best's file for a rerun of
the same command to gate.

The tables (per operator: times, ratios to the reference, each of one gate's kernel and
reference times, cards applied; per family: geometric
means; the library against the control over compute-bound operators, flops / bytes_moved >=
COMPUTE_BOUND) go to RESULTS.json and RESULTS.md from every record under OUT/ops (with
--records, also from earlier runs' folders; each row names its run). At --tier interpret (a
CPU smoke run) nothing is timed: the tables say pass/fail and the cards applied.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_LIBRARY = None  # the shipped library (lineage.shipped), unpacked when first asked for
COMPUTE_BOUND = 64.0
"""flops / bytes_moved at or above which an operator counts as compute-bound."""
ABLATIONS = {"library-off": {"library": None}, "lookahead-off": {"lookahead": False},
             "priors-off": {"priors": False}, "around-off": {"around": False},
             "bundles-off": {"bundles": False}}
"""Ablation name -> what it changes in the optimize run (library None: an empty library)."""
WALL_RESERVE_S = 30.0
"""Seconds at the end of --wall that no gate is given: a gate's worker start-up (its time limit
starts after it), then writing the records and the tables."""
_PRINT = threading.Lock()


def say(op: str, text: str) -> None:
    with _PRINT:
        print(f"[{time.strftime('%H:%M:%S')}] {op}: {text}", file=sys.stderr, flush=True)


def slug(case: Any) -> str:
    return case.ref.replace("/", "__").removesuffix(".py")


def operators(paths: Sequence[str], only: set[str], tier: str = "device") -> list[Any]:
    """The cases with a start kernel under `paths`, filtered by name or ref in `only`. A file
    that does not load (and, at the interpret tier, a problem file with no interpret-tier
    sizes) is reported on stderr with its one-line reason and left out."""
    from gate.cases import scan_cases

    cases, refused = scan_cases([Path(p) if Path(p).exists() else ROOT / p for p in paths])
    for path, reason in refused:
        say(path.name, f"not an operator: {reason}")
    cases = [c for c in cases if c.start_path() is not None and c.start_path().is_file()]
    if tier == "interpret":
        unsized = {c.ref: why for c in cases if (why := getattr(c.small_shapes, "reason", lambda: None)())}
        for ref, why in unsized.items():
            say(ref, f"not an operator at the interpret tier: {why}")
        cases = [c for c in cases if c.ref not in unsized]
    if only:
        cases = [c for c in cases if c.name in only or c.ref in only]
        missing = only - {c.name for c in cases} - {c.ref for c in cases}
        if missing:
            raise SystemExit(f"heldout: no operator named {', '.join(sorted(missing))}")
    return cases


def family(case: Any) -> str:
    if case.problem:
        return "kernelbench"
    return str(getattr(case.module(), "FAMILY", "other"))


def intensity(case: Any) -> float | None:
    """flops / bytes_moved of the first device shape, when the case defines both."""
    module = case.module()
    if not (hasattr(module, "flops") and hasattr(module, "bytes_moved")):
        return None
    shape = dict(next(iter(case.shapes.values())))
    return float(module.flops(shape)) / max(float(module.bytes_moved(shape)), 1.0)


def _check(args: argparse.Namespace, source: str, case: Any, path: Path,
           timeout: float | None = None) -> Any:
    """One fresh gate of a Triton module, through the run's executor when it has one
    (`timeout`: the gate's time limit, None for its default)."""
    import gate

    check = args.gates.check if getattr(args, "gates", None) is not None else gate.check
    return check(source, "triton", case, args.tier, path=path, cache=False, timeout=timeout)


def _check_file(args: argparse.Namespace, case: Any, path: Path,
                timeout: float | None = None) -> Any:
    """One fresh gate of a kernel file: a CUDA kernel (`kir.embedded.cuda_unit`: a `.cu` with
    its host module, that host module, or a host holding its source) as CUDA, else as Triton."""
    import gate
    from kir.embedded import cuda_unit

    unit = cuda_unit(path)
    if unit is None:
        return _check(args, path.read_text(), case, path, timeout)
    check = args.gates.check if getattr(args, "gates", None) is not None else gate.check
    return check(unit.source, "cuda", case, args.tier, path=unit.source_path,
                 host=unit.host_path, cache=False, timeout=timeout)


def _left(args: argparse.Namespace) -> float | None:
    """Seconds a gate may still take under --wall: to its deadline (`wall_deadline`, a
    `time.monotonic()` value) less WALL_RESERVE_S; None without --wall."""
    deadline = getattr(args, "wall_deadline", None)
    return None if deadline is None else deadline - WALL_RESERVE_S - time.monotonic()


def _in_time(args: argparse.Namespace) -> bool:
    """Whether --wall leaves a gate any time (`_left`); True without --wall."""
    left = _left(args)
    return left is None or left > 0


def _control_not_gated() -> dict[str, Any]:
    """The control entry of a record whose control gate --wall's deadline left undone."""
    return {"ok": None, "ms": None, "pending": True,
            "reason": "not gated: the --wall deadline came first"}


def _walled(args: argparse.Namespace, gate_fn: Callable[[float | None], Any]) -> Any | None:
    """`gate_fn(timeout)`: one gate, its time limit cut to what --wall leaves (`_left`). None
    where the deadline left it no time, or stopped it (a timeout under a limit the wall cut):
    the gate is not done, which is not a verdict on the kernel."""
    from gate.check import DEFAULT_TIMEOUT_S
    from gate.verdict import Tier

    left = _left(args)
    if left is None:
        return gate_fn(None)
    if left <= 0:
        return None
    default = DEFAULT_TIMEOUT_S.get(Tier(args.tier), max(DEFAULT_TIMEOUT_S.values()))
    verdict = gate_fn(min(left, default))
    kind = getattr(verdict.failure_kind, "value", verdict.failure_kind)
    return None if kind == "timeout" and left < default else verdict


def _verdict_summary(verdict: Any) -> dict[str, Any]:
    """Pass/fail, the two times (and the reference's with TF32 allowed, fp32 cases), the
    verdict's flags (a lower-precision result among them), and per variant the GPU time of each of the kernel's own
    kernels and what its autotuners picked (a time well above its kernels' sum is host time in
    `run`: a sync, a `.tolist()`; a pick that differs between two gates of one text explains
    why their times differ)."""
    timing = verdict.timing
    variants = {v.variant: {"kernels": dict(v.kernels),
                            "picks": {name: dict(cfg) for name, cfg in v.picks}}
                for v in (timing.variants if timing else ())}
    return {"ok": verdict.ok, "failure_kind": getattr(verdict.failure_kind, "value", verdict.failure_kind),
            "reason": verdict.reason,
            "ms": timing.candidate_ms if timing else None,
            "reference_ms": timing.reference_ms if timing else None,
            "reference_tf32_ms": timing.reference_tf32_ms if timing else None,
            "reference_compile_ms": timing.reference_compile_ms if timing else None,
            "flags": list(verdict.flags),
            **({"variants": variants} if variants else {})}


def _record(case: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The fields every operator record starts with."""
    start_path = case.start_path()
    return {"op": case.name, "ref": case.ref, "family": family(case), "tier": args.tier,
            "start_file": str(start_path.relative_to(ROOT)) if start_path.is_relative_to(ROOT)
            else str(start_path), "intensity": intensity(case)}


def bench_operator(case: Any, args: argparse.Namespace, out: Path) -> dict[str, Any] | None:
    """Gate the start kernel, optimize it (beside each ablation), gate the control (module
    docstring, steps 1-3 and 5). None where --wall's deadline came before the start's gate
    ended (nothing to record: a rerun starts the operator)."""
    name = case.name
    started = time.monotonic()
    deadline = started + args.box
    start_path = case.start_path()
    rec = _record(case, args)
    say(name, f"gating the start kernel ({start_path.name}) at {args.tier}")
    start = _walled(args, lambda limit: _check_file(args, case, start_path, limit))
    if start is None:
        say(name, "not started: the --wall deadline came before its start gate ended")
        return None
    rec["start"] = _verdict_summary(start)
    rec["reference_ms"] = rec["start"]["reference_ms"]
    if not start.ok:
        say(name, f"start kernel fails: {start.reason}")
        rec["status"] = "start fails"
        return rec

    ablations = list(getattr(args, "ablation", None) or ())
    say(name, f"optimize: budget {args.budget_steps}, box {args.box:.0f}s"
              + (f", beside {', '.join(ablations)}" if ablations else ""))
    op_dir = out / "ops" / slug(case)

    def progress(event: str, data: dict[str, Any]) -> None:
        if event == "kept" or (event == "rejected" and data.get("stage") != "materialize"):
            say(name, f"  {event} {data.get('card', '')} {data.get('reason', '') or ''}".rstrip())

    # the full search and each ablation run at once, each its own box from the same moment:
    # the columns of one row share the start's and the control's gates and the GPU's conditions
    with ThreadPoolExecutor(1 + len(ablations)) as pool:
        runs = [pool.submit(search, case, args, op_dir / "optimize", deadline, None, progress,
                            start),
                *(pool.submit(search, case, args, op_dir / a, deadline, a, None, start)
                  for a in ablations)]
        best, *ablated = [r.result() for r in runs]
    rec["cards"] = best.pop("cards", [])
    rec["best"] = {**best, "state": "the lineage state with role best"} if best.get("ok") else best
    say(name, f"best: {rec['best'].get('ms')} ms, cards {', '.join(rec['cards']) or 'none'}")
    if ablations:
        rec["ablations"] = dict(zip(ablations, ablated))

    rec["wall_s"] = round(time.monotonic() - started, 1)
    if _deferred(args):
        rec["control"] = {"ok": None, "ms": None, "pending": True,
                          "reason": "not gated yet (it waits until every search has ended)"}
        rec["status"] = "searched"
        return rec
    settle(case, rec, args)
    return rec


def _deferred(args: argparse.Namespace) -> bool:
    """Whether the fresh gates wait until every operator's searches have ended (module
    docstring): device tier, several operators at once."""
    return args.tier == "device" and getattr(args, "jobs", 1) > 1 and \
        not getattr(args, "from_partial", False)


def settle(case: Any, rec: dict[str, Any], args: argparse.Namespace) -> None:
    """The fresh gates `rec` waits for: each best kernel of the search and its ablations
    gated again (its file then removed: the lineage's best state is the record), and the
    control. Each gate runs within --wall (`_walled`); one the deadline leaves undone keeps
    its entry pending (a best keeps its file), and the record stays "searched" with a `reason`
    naming what is not done, for a rerun of the same command to gate."""
    undone: list[str] = []
    entries = [("best", rec.get("best") or {}), *(rec.get("ablations") or {}).items()]
    for label, entry in entries:
        path = Path(entry.get("pending") or "")
        if not (entry.get("pending") and path.is_file()):
            entry.pop("pending", None)
            continue
        verdict = _walled(args, lambda limit, path=path: _check_file(args, case, path, limit))
        if verdict is None:
            undone.append(label)
            continue
        del entry["pending"]
        entry["regate"] = _verdict_summary(verdict)
        say(case.name, f"{label} gated again: {entry['regate'].get('ms')} ms "
                       f"({entry['regate'].get('reason') or 'ok'})")
        path.unlink(missing_ok=True)
    if not rec.get("control") or rec["control"].get("pending"):
        ctrl = control(case, case.start_path(), args)
        if ctrl is None:
            undone.append("control")
            rec["control"] = _control_not_gated()
        else:
            rec["control"] = ctrl
            say(case.name, f"control: {ctrl.get('ms')} ms ({ctrl.get('reason') or 'ok'})")
    if undone:
        rec["status"] = "searched"
        rec["reason"] = (f"not gated fresh by the --wall deadline: {', '.join(undone)} "
                         "(a rerun of the same command gates them)")
        say(case.name, rec["reason"])
        return
    rec.pop("reason", None)
    rec["status"] = "done"


def search(case: Any, args: argparse.Namespace, out_dir: Path, deadline: float,
           ablation: str | None = None, progress: Any = None,
           start: Any = None) -> dict[str, Any]:
    """One optimize run of the start kernel into `out_dir`, stopped at `deadline`, with
    `ablation` (`ABLATIONS`) turned off where given; at the device tier its best kernel gated
    again, fresh (`regate`: the search kept the fastest of many timed candidates, so its own
    figure is biased low). A Triton start's verdict `start` (the row's gate of the same
    text) is the run's start gate: the columns of a row start from one measurement. The
    entry: ok, ms, reference_ms, termination, gated, cards."""
    import gate
    from lineage.optimize import optimize
    from lineage.skills import Library

    text = case.start_path().read_text()

    def check(source: str, language: str, the_case: Any, tier: Any, **kw: Any) -> Any:
        if start is not None and language == "triton" and source == text:
            return start
        gates = getattr(args, "gates", None)
        return (gates.check if gates is not None else gate.check)(source, language, the_case,
                                                                   tier, **kw)

    change = dict(ABLATIONS[ablation]) if ablation else {}
    library = change.pop("library", args.library)
    if library is None:
        library = Library.open(out_dir / "empty-library", create=True)
    try:
        gates = getattr(args, "gates", None)  # a cluster's gates build their own extensions
        result = optimize(case.start_path(), case, library, budget_steps=args.budget_steps,
                          tier=args.tier, out=out_dir, progress=progress, deadline=deadline,
                          executor=gates, check_fn=check,
                          prebuild_fn=gate.prebuild if gates is None else None, **change)
        best = result.best_verdict
        entry: dict[str, Any] = {"ok": bool(best.get("ok")), "ms": result.best_ms,
                                 "reference_ms": (best.get("timing") or {}).get("reference_ms"),
                                 "termination": result.termination, "gated": result.gated,
                                 "cards": [s.card for s in result.applied]}
        if args.tier == "device" and entry["ok"] and result.applied:
            entry["pending"] = str(result.best_path)  # gated again by `settle`
        else:
            # results are data: the best kernel is the lineage's state with role "best"
            Path(result.best_path).unlink(missing_ok=True)
    except Exception as exc:  # a failed run is a cell of the table, not the end of the benchmark
        entry = {"ok": False, "ms": None, "error": f"{type(exc).__name__}: {exc}", "cards": []}
    if ablation:
        say(case.name, f"{ablation}: {entry.get('ms')} ms")
    return entry


def _ablation_ratio(rec: dict[str, Any], ablation: str) -> float | None:
    """Reference time over the ablated run's best kernel (its fresh gate where it passed);
    None while its fresh gate is owed (`pending`: --wall came first)."""
    entry = (rec.get("ablations") or {}).get(ablation) or {}
    if entry.get("pending"):
        return None
    entry = entry["regate"] if (entry.get("regate") or {}).get("ok") else entry
    ref = entry.get("reference_ms") or rec.get("reference_ms")
    return ref / entry["ms"] if entry.get("ms") and ref else None


def from_partial(case: Any, args: argparse.Namespace, out: Path) -> dict[str, Any] | None:
    """The record of an operator whose optimize run was cut before it finished (its process
    killed by a call's time limit): start and best read from the run's saved lineage (the root
    state's verdict, and the fastest state the run kept: stepping stones and rejected
    candidates are not kept), the control gated now (where --wall's deadline left it undone,
    the status says so and the record is not written). None when there is no saved lineage."""
    import ast

    path = out / "ops" / slug(case) / "optimize" / "lineage.json"
    if not path.is_file():
        return None
    from lineage.graph import Lineage

    lin = Lineage.load(path)

    def timed(sid: str) -> dict[str, Any] | None:
        verdict = lin.node(sid).get("verdict")
        verdict = ast.literal_eval(verdict) if isinstance(verdict, str) else verdict
        timing = (verdict or {}).get("timing") or {}
        if not (verdict or {}).get("ok") or not timing.get("candidate_ms"):
            return None
        return {"ok": True, "failure_kind": None, "reason": None, "ms": timing["candidate_ms"],
                "reference_ms": timing.get("reference_ms")}

    roots = [s for s in lin.roles("root") if timed(s)]
    kept = [(timed(s), s) for s in lin.states()
            if timed(s) and "stone" not in (lin.node(s).get("roles") or [])]
    if not roots or not kept:
        return None
    best, best_id = min(kept, key=lambda item: item[0]["ms"])
    cards = [t.get("card") or t.get("pass") for t in _path_to(lin, roots[0], best_id)]
    start_path = case.start_path()
    rec = {**_record(case, args), "start": timed(roots[0]),
           "reference_ms": timed(roots[0])["reference_ms"],
           "best": {**best, "termination": "cut (partial lineage)", "gated": None, "path": None},
           "cards": cards, "status": "partial"}
    rec["control"] = control(case, start_path, args) if not args.no_control else \
        {"ok": None, "ms": None, "reason": "not measured (--no-control)"}
    if rec["control"] is None:  # a row of the tables, not a record: a rerun gates the control
        rec["control"] = _control_not_gated()
        rec["status"] = "partial, control not gated"
        rec["reason"] = "the --wall deadline came first (a rerun of the same command gates it)"
    say(case.name, f"from the partial lineage: best {best['ms']} ms; control {rec['control'].get('ms')} ms")
    return rec


def _path_to(lin: Any, source: str, target: str) -> list[dict[str, Any]]:
    """The transitions (node data) along the lineage's path from `source` to `target`."""
    import networkx as nx

    try:
        nodes = nx.shortest_path(lin.graph, source, target)
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        return []
    return [lin.graph.nodes[n] for n in nodes if lin.graph.nodes[n].get("type") == "transition"]


def control(case: Any, start_path: Path, args: argparse.Namespace) -> dict[str, Any] | None:
    """The start kernel under the generic autotune list, gated once (step 3); None where
    --wall's deadline left the gate undone (`_walled`)."""
    from kir.embedded import cuda_unit

    if cuda_unit(start_path) is not None:
        return {"ok": None, "ms": None,
                "reason": "no control for CUDA (the control is a Triton autotune list)"}
    try:
        from lineage.control import autotune_control
    except ImportError as exc:
        return {"ok": False, "ms": None, "reason": f"lineage.control unavailable: {exc}"}
    try:
        source = autotune_control(start_path.read_text(), max_configs=args.budget_steps)
    except Exception as exc:  # the control could not be built: say so in the table
        return {"ok": False, "ms": None, "reason": f"no control: {type(exc).__name__}: {exc}"}
    verdict = _walled(args, lambda limit: _check(args, source, case, start_path, limit))
    if verdict is None:
        return None
    summary = _verdict_summary(verdict)
    summary["configs"] = source.count("triton.Config(")
    return summary


def measure_extras(cases: Sequence[Any], records: dict[str, dict[str, Any]],
                   in_time: Callable[[], bool] = lambda: True) -> None:
    """Device tier, after the gates: FlagGems and bandwidth columns (step 4), for each
    operator while `in_time()` (--wall; one left out has no column and a rerun measures it)."""
    if not in_time():
        say("heldout", "FlagGems and bandwidth not measured: --wall reached (a rerun measures them)")
        return
    import torch
    from triton.testing import do_bench

    flag_gems, gems_error = _import_gems()
    copy_cache: dict[int, float] = {}

    def copy_ms(nbytes: int) -> float:
        if nbytes not in copy_cache:
            src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            # the median, as every other time here (the mean took one outlier: a 6 MB copy
            # measured 0.076 ms, 0.08 TB/s, on an H100, h100x4-1543bbb)
            copy_cache[nbytes] = float(do_bench(lambda: dst.copy_(src), warmup=25, rep=100,
                                                return_mode="median"))
        return copy_cache[nbytes]

    for case in cases:
        rec = records.get(slug(case))
        if rec is None or rec.get("status") != "done":
            continue
        if not in_time():
            say(case.name, "FlagGems and bandwidth not measured: --wall reached (a rerun measures them)")
            continue
        module = case.module()
        shape = dict(next(iter(case.shapes.values())))
        inputs = module.make_inputs(shape, 1234, "cuda")
        if hasattr(module, "bytes_moved"):
            nbytes = float(module.bytes_moved(shape))
            copy = copy_ms(int(nbytes))
            rec["bandwidth"] = {"bytes": nbytes, "copy_ms": copy,
                                "copy_tbs": nbytes / copy * 1e-9,
                                **{f"{k}_of_copy": (copy / _measured(rec, k)["ms"])
                                   if _measured(rec, k).get("ms") else None
                                   for k in ("start", "best", "control")},
                                "reference_of_copy": copy / rec["reference_ms"] if rec.get("reference_ms") else None}
        rec["flag_gems"] = _gems(flag_gems, gems_error, module, inputs)
        say(case.name, f"flag_gems: {rec['flag_gems']}")


def _import_gems() -> tuple[Any, str | None]:
    """(the flag_gems module, None), or (None, why it does not import): the column then says why."""
    try:
        import flag_gems
    except Exception as exc:  # noqa: BLE001
        return None, f"import flag_gems failed: {type(exc).__name__}: {exc}"
    return flag_gems, None


def _gems(flag_gems: Any, error: str | None, module: Any, inputs: Sequence[Any]) -> dict[str, Any]:
    """FlagGems' operators as a second reference: the case's reference under
    `flag_gems.use_gems()` and plainly, both timed by `do_bench` here, and the error between."""
    from triton.testing import do_bench

    if flag_gems is None:
        return {"ms": None, "reason": error}
    try:
        ref_out = module.reference(*inputs)
        torch_ms = float(do_bench(lambda: module.reference(*inputs), warmup=25, rep=100,
                                  return_mode="median"))
        with flag_gems.use_gems():
            gems_out = module.reference(*inputs)
            gems_ms = float(do_bench(lambda: module.reference(*inputs), warmup=25, rep=100,
                                     return_mode="median"))
        return {"ms": gems_ms, "torch_ms_same_timer": torch_ms,
                "rel_err": _rel_err(gems_out, ref_out), "vs_torch": torch_ms / gems_ms}
    except Exception as exc:  # noqa: BLE001 — an operator FlagGems lacks: the cell says why
        return {"ms": None, "reason": f"{type(exc).__name__}: {exc}"[:300]}


def measure_gems(cases: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """--gems-only: the FlagGems reference of every operator on this GPU, no gates."""
    import torch

    flag_gems, error = _import_gems()
    out: dict[str, dict[str, Any]] = {}
    for case in cases:
        module = case.module()
        shape = dict(next(iter(case.shapes.values())))
        inputs = module.make_inputs(shape, 1234, "cuda")
        out[slug(case)] = {**_gems(flag_gems, error, module, inputs),
                           "gpu": torch.cuda.get_device_name(0)}
        say(case.name, f"flag_gems: {out[slug(case)]}")
    return out


def _rel_err(out: Any, ref: Any) -> float:
    import torch

    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    worst = 0.0
    for o, r in zip(outs, refs):
        if isinstance(r, torch.Tensor) and r.is_floating_point():
            worst = max(worst, float((o.double() - r.double()).norm() / r.double().norm().clamp_min(1e-30)))
    return worst


def _control_cell(ctrl: dict[str, Any]) -> str:
    """The control column at the interpret tier: pass, FAIL with why, or n/a (no control for
    the operator: `ok` None)."""
    if ctrl.get("ok"):
        return "pass"
    head = "n/a" if ctrl.get("ok") is None and ctrl.get("reason") else "FAIL"
    return f"{head}: {str(ctrl.get('reason'))[:80]}"


def _ablation_cell(entry: dict[str, Any]) -> str:
    """An ablated run at the interpret tier: pass or FAIL, and the candidates it gated."""
    if not entry:
        return "-"
    return f"{'pass' if entry.get('ok') else 'FAIL'} ({entry.get('gated', 0)} gated)"


def _regated(rec: dict[str, Any]) -> bool:
    """Whether the record's best kernel was gated again after the search and passed."""
    again = (rec.get("best") or {}).get("regate") or {}
    return bool(again.get("ok") and again.get("ms"))


def _measured(rec: dict[str, Any], key: str) -> dict[str, Any]:
    """The measurement of `key` (start, best, control) the tables use. For best: the fresh gate
    of the best kernel after the search (`regate`) where the record has one that passed, else
    the search's own figure (the fastest of the candidates it timed, biased low)."""
    entry = rec.get(key) or {}
    return entry["regate"] if key == "best" and _regated(rec) else entry


def _ratio(rec: dict[str, Any], key: str) -> float | None:
    """Reference time over the kernel's, both from the same gate (one worker process) where
    the measurement has its reference, else against the start gate's reference."""
    entry = _measured(rec, key)
    ms = entry.get("ms")
    ref = entry.get("reference_ms") or rec.get("reference_ms")
    return ref / ms if ms and ref else None


def _geomean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def build_tables(records: Sequence[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """The JSON result: per-operator rows and per-family geometric means. A best whose fresh
    gate is owed (`pending`: --wall came first) has no x/ref (`best_from` "not gated"): the
    search's own figure is biased low, and the record's `status` and `reason` say what waits."""
    rows = []
    for rec in sorted(records, key=lambda r: (r["family"], r["op"])):
        owed = bool((rec.get("best") or {}).get("pending"))
        best_vs_ref = None if owed else _ratio(rec, "best")
        control_vs_ref = _ratio(rec, "control")
        ablated = {f"{a}_vs_ref": _ablation_ratio(rec, a) for a in ABLATIONS}
        rows.append({**rec, "start_vs_ref": _ratio(rec, "start"), "best_vs_ref": best_vs_ref,
                     "control_vs_ref": control_vs_ref, **ablated,
                     **{f"best_vs_{a}": best_vs_ref / v if best_vs_ref and v else None
                        for a, v in ((k[:-7], v) for k, v in ablated.items())},
                     "best_from": "not gated" if owed else "regate" if _regated(rec) else "search",
                     "best_vs_control": best_vs_ref / control_vs_ref
                     if best_vs_ref and control_vs_ref else None,
                     "compute_bound": (rec.get("intensity") or 0.0) >= COMPUTE_BOUND})
    families: dict[str, dict[str, Any]] = {}
    for fam in sorted({r["family"] for r in rows}):
        mine = [r for r in rows if r["family"] == fam]
        families[fam] = {k: _geomean([r[k] for r in mine])
                         for k in ("start_vs_ref", "best_vs_ref", "control_vs_ref", "best_vs_control",
                                   *(f"best_vs_{a}" for a in ABLATIONS))}
        families[fam]["operators"] = len(mine)
    compute = [r["best_vs_control"] for r in rows if r["compute_bound"] and r["best_vs_control"]]
    return {"tier": args.tier, "library": args.library, "budget_steps": args.budget_steps,
            "box_s": args.box, "command": "python3 bench/heldout.py " + " ".join(sys.argv[1:]),
            "gpu": _gpu_name() if args.tier == "device" else None,
            "rows": rows, "families": families,
            "runs": sorted({str(r.get("records")) for r in rows if r.get("records")}),
            "control": {"compute_bound_geomean_best_vs_control": _geomean(compute),
                        "compute_bound_min_best_vs_control": min(compute) if compute else None,
                        "compute_bound_operators": len(compute)}}


def _gpu_name() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:
        return None


def _fmt(v: Any, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def markdown(result: dict[str, Any], title: str = "Held-out tier",
             readme: str = "bench/results/heldout/README.md") -> str:
    runs = result.get("runs") or []
    setting = (f"records of {len(runs)} runs (column `run`: each run's command, budget and box are in "
               f"its folder's log and in {readme})" if len(runs) > 1 else
               f"budget {result['budget_steps']} gated candidates, box {result['box_s']:.0f} s per operator")
    lines = [f"# {title} ({result['tier']})", "",
             f"Library `{result['library']}`, {setting}. `x/ref` is the reference's time over the "
             f"kernel's (above 1: faster than the reference). Command: `{result['command']}`.", ""]
    if result["tier"] == "device":
        lines += ["Each x/ref is of one gate: the kernel and the reference timed in the same worker "
                  "process. `best ms` is the best kernel gated once more, fresh, after the search "
                  "(like the start and the control); `search ms` is the figure the search kept it "
                  "with (the fastest of the candidates it timed, so biased low). A row whose `best "
                  "ms` is `search` predates the fresh gate: its best x/ref is the search's; one "
                  "whose `best ms` is `not gated` waits for its fresh gate (see below), and has "
                  "no best x/ref.", "",
                  "| family | operator | start ms | best ms | search ms | control ms | reference ms "
                  "| FlagGems x/ref | start x/ref | best x/ref | control x/ref | best / control "
                  "| of copy BW | cards | run |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in result["rows"]:
            bw = (r.get("bandwidth") or {}).get("best_of_copy")
            gems = r.get("flag_gems") or {}
            lines.append(
                f"| {r['family']} | {r['op']} | {_fmt(r['start'].get('ms'), '.4f')} "
                f"| {_fmt(_measured(r, 'best').get('ms'), '.4f') if r['best_from'] == 'regate' else r['best_from']} "
                f"| {_fmt((r.get('best') or {}).get('ms'), '.4f')} | {_fmt((r.get('control') or {}).get('ms'), '.4f')} "
                f"| {_fmt(r.get('reference_ms'), '.4f')} | {_fmt(gems.get('vs_torch'))} "
                f"| {_fmt(r['start_vs_ref'])} | {_fmt(r['best_vs_ref'])} | {_fmt(r['control_vs_ref'])} "
                f"| {_fmt(r['best_vs_control'])} | {_fmt(bw, '.2f')} | {', '.join(r.get('cards') or []) or '-'} "
                f"| {r.get('records', '-')} |")
        lines += ["", "| family | operators | start x/ref | best x/ref | control x/ref | best / control |",
                  "|---|---|---|---|---|---|"]
        for fam, g in result["families"].items():
            lines.append(f"| {fam} | {g['operators']} | {_fmt(g['start_vs_ref'])} | {_fmt(g['best_vs_ref'])} "
                         f"| {_fmt(g['control_vs_ref'])} | {_fmt(g['best_vs_control'])} |")
        lines += _ablation_table(result)
        c = result["control"]
        lines += ["", f"Compute-bound operators (flops/byte >= {COMPUTE_BOUND:g}): library over control "
                  f"geomean {_fmt(c['compute_bound_geomean_best_vs_control'])}, worst "
                  f"{_fmt(c['compute_bound_min_best_vs_control'])} ({c['compute_bound_operators']} operators)."]
        borrowed = {r["op"]: (r.get("flag_gems") or {}).get("from") for r in result["rows"]
                    if (r.get("flag_gems") or {}).get("ms")
                    and (r.get("flag_gems") or {}).get("from") not in (None, r.get("records"))}
        if borrowed:
            lines += ["", "FlagGems column from another folder than the row's run: "
                      + ", ".join(f"{k} ({v})" for k, v in borrowed.items()) + "."]
        reasons = {r['op']: (r.get('flag_gems') or {}).get('reason')
                   for r in result["rows"] if not (r.get('flag_gems') or {}).get('ms')}
        skipped = {k: v for k, v in reasons.items() if v}
        if skipped:
            lines += ["", "FlagGems column skipped: " + "; ".join(f"{k}: {v}" for k, v in skipped.items())]
    else:
        names = [a for a in ABLATIONS if any(a in (r.get("ablations") or {}) for r in result["rows"])]
        lines += ["| family | operator | start | optimize | best ok | control | cards |"
                  + "".join(f" {a} |" for a in names), "|---|---|---|---|---|---|---|" + "---|" * len(names)]
        for r in result["rows"]:
            best = r.get("best") or {}
            ctrl = r.get("control") or {}
            ablated = [(r.get("ablations") or {}).get(a) or {} for a in names]
            lines.append(f"| {r['family']} | {r['op']} | {'pass' if r['start']['ok'] else 'FAIL'} "
                         f"| {best.get('termination', best.get('error', '-'))} | {'pass' if best.get('ok') else 'FAIL'} "
                         f"| {_control_cell(ctrl)} "
                         f"| {', '.join(r.get('cards') or []) or '-'} |"
                         + "".join(f" {_ablation_cell(e)} |" for e in ablated))
    undone = [r for r in result["rows"] if r.get("status") != "done" and r.get("reason")]
    if undone:
        lines += ["", "Not done: " + "; ".join(f"{r['op']} ({r['status']}): {r['reason']}"
                                              for r in undone)]
    return "\n".join(lines) + "\n"


def _ablation_table(result: dict[str, Any]) -> list[str]:
    """Per operator, x/ref of each ablated run and the best over it (rows that ran one)."""
    names = [a for a in ABLATIONS if any(r.get(f"{a}_vs_ref") for r in result["rows"])]
    if not names:
        return []
    lines = ["", "Ablations (the same budget and box; `best / X` above 1: the part X turns off "
             "paid): " + ", ".join(f"{a}: {ABLATIONS[a]}" for a in names) + ".", "",
             "| operator | best x/ref | " + " | ".join(f"{a} x/ref | best / {a}" for a in names) + " |",
             "|---|---|" + "---|---|" * len(names)]
    for r in result["rows"]:
        if any(r.get(f"{a}_vs_ref") for a in names):
            lines.append(f"| {r['op']} | {_fmt(r['best_vs_ref'])} | " + " | ".join(
                f"{_fmt(r.get(f'{a}_vs_ref'))} | {_fmt(r.get(f'best_vs_{a}'))}" for a in names) + " |")
    lines.append("| geomean | | " + " | ".join(
        f"- | {_fmt(_geomean([r.get(f'best_vs_{a}') for r in result['rows']]))}" for a in names) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", default=["bench/heldout"])
    ap.add_argument("--tier", choices=["device", "interpret"], default="device")
    ap.add_argument("--library", default=DEFAULT_LIBRARY)
    ap.add_argument("--budget-steps", type=int, default=12)
    ap.add_argument("--box", type=float, default=300.0, help="seconds per operator")
    ap.add_argument("--wall", type=float, default=None,
                    help="deadline for the whole command, in seconds: gates cut to it, undone "
                         "fresh gates recorded as not done, tables written before it")
    ap.add_argument("--only", default="", help="comma-separated operator names or refs")
    ap.add_argument("--jobs", type=int, default=1, help="operators at once")
    from gate.executor import add_executor_arguments

    add_executor_arguments(ap)
    ap.add_argument("--out", default=None, help="records folder (default bench/results/heldout-<tier>)")
    ap.add_argument("--results", default=None,
                    help="tables path without suffix (default OUT/heldout; bench/results/heldout.md "
                         "is generated from the store: bench/store.py ingest OUT/heldout.json)")
    ap.add_argument("--fresh", action="store_true", help="redo operators that have a record")
    ap.add_argument("--tables-only", action="store_true", help="rewrite the tables from the records")
    ap.add_argument("--from-partial", action="store_true",
                    help="operators without a record whose optimize run was cut: record start and "
                         "best from the run's saved lineage and gate only the control")
    ap.add_argument("--no-control", action="store_true",
                    help="with --from-partial: record the control as not measured")
    ap.add_argument("--gems-only", action="store_true",
                    help="device: time FlagGems' operators as the second reference of every "
                         "operator (no gates) into OUT/gems.json, then rewrite the tables")
    ap.add_argument("--ablation", action="append", default=[],
                    help="also run the search with these parts off (comma list, repeatable: "
                         f"{', '.join(ABLATIONS)}): a column each")
    ap.add_argument("--records", action="append", default=[], metavar="DIR",
                    help="with --tables-only: also read the records of these earlier runs' folders "
                         "(in order; a later folder's, then OUT's, record of an operator wins); "
                         "each row names the folder its record came from")
    args = ap.parse_args(argv)
    began = time.monotonic()
    args.wall_deadline = None if args.wall is None else began + args.wall
    args.ablation = list(dict.fromkeys(a for given in args.ablation for a in given.split(",") if a))
    unknown = [a for a in args.ablation if a not in ABLATIONS]
    if unknown:
        print(f"heldout: unknown --ablation {', '.join(unknown)} (one of {', '.join(ABLATIONS)})",
              file=sys.stderr)
        return 2
    if args.gems_only and args.tier != "device":
        print("heldout: --gems-only needs --tier device", file=sys.stderr)
        return 2
    args.tables_only = args.tables_only or args.gems_only
    if args.budget_steps < 1 or args.jobs < 1 or args.box <= 0:
        print("heldout: --budget-steps, --jobs and --box must be positive", file=sys.stderr)
        return 2
    out = Path(args.out or ROOT / f"bench/results/heldout-{args.tier}")
    # The tables under bench/results are generated from the store: a run's tables stay in its
    # folder until `python3 bench/store.py ingest OUT/heldout.json` adds them.
    results = Path(args.results) if args.results else out / "heldout"
    if args.library is None:
        from lineage.shipped import shipped_library_path

        args.library = str(shipped_library_path())
    if not Path(args.library).exists() and (ROOT / args.library).exists():
        args.library = str(ROOT / args.library)
    from kir.errors import BadInputError

    try:
        cases = operators(args.paths, {s for s in args.only.split(",") if s}, args.tier)
    except BadInputError as exc:
        print(f"heldout: {exc}", file=sys.stderr)
        return 2
    (out / "ops").mkdir(parents=True, exist_ok=True)
    records: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}  # operator -> the records folder its record came from
    gems_seen: dict[str, dict[str, Any]] = {}  # operator -> the latest record's FlagGems time
    for folder in args.records if args.tables_only else []:
        for path in sorted(Path(folder, "ops").glob("*.json")):
            records[path.stem] = json.loads(path.read_text())
            origin[path.stem] = Path(folder).name
            gems = records[path.stem].get("flag_gems") or {}
            if gems.get("ms"):
                gems_seen[path.stem] = {**gems, "from": gems.get("from", Path(folder).name)}
    if args.gems_only:
        _write(out / "gems.json", measure_gems(cases))
    todo = []
    for case in cases:
        path = out / "ops" / f"{slug(case)}.json"
        if path.is_file() and not args.fresh:
            records[slug(case)] = json.loads(path.read_text())
            origin[slug(case)] = out.name
        elif not args.tables_only:
            todo.append(case)
    # FlagGems' time does not depend on the run's kernels: where the latest record of an
    # operator has none (FlagGems did not import there), an earlier record's fills the column,
    # naming its folder; so do a folder's FlagGems measurements (--gems-only).
    for op, entry in gems_seen.items():
        if op in records and not (records[op].get("flag_gems") or {}).get("ms"):
            records[op]["flag_gems"] = entry
    for folder in [*(args.records if args.tables_only else []), str(out)]:
        gems = Path(folder, "gems.json")
        for op, entry in (json.loads(gems.read_text()) if gems.is_file() else {}).items():
            if op in records and not (records[op].get("flag_gems") or {}).get("ms"):
                records[op]["flag_gems"] = {**entry, "from": Path(folder).name}
    say("heldout", f"{len(cases)} operators, {len(cases) - len(todo)} with a record, {len(todo)} to run")

    def one(case: Any) -> None:
        from lineage.optimize import BOX_GRACE_S

        left = _left(args)
        # a search's last gate may run BOX_GRACE_S past its box: its box ends that much earlier
        if left is not None and left <= (0 if args.from_partial else BOX_GRACE_S):
            say(case.name, "not started: --wall reached (rerun the command to continue)")
            return
        if args.from_partial:
            rec = from_partial(case, args, out)
            if rec is not None:
                records[slug(case)] = rec
                origin[slug(case)] = out.name
                if not rec["control"].get("pending"):
                    _write(out / "ops" / f"{slug(case)}.json", rec)
            else:
                say(case.name, "no partial lineage to finish from")
            return
        box = args.box if left is None else min(args.box, left - BOX_GRACE_S)
        rec = bench_operator(case, argparse.Namespace(**{**vars(args), "box": max(box, 1.0)}), out)
        if rec is None:
            return
        records[slug(case)] = rec
        origin[slug(case)] = out.name
        _write(out / "ops" / f"{slug(case)}.json", rec)

    waiting = [c for c in cases if slug(c) in records and records[slug(c)].get("status") == "searched"
               and slug(c) not in {slug(t) for t in todo}] if not args.tables_only else []
    gates = None
    if todo and args.executor != "local":  # every gate of every run a job on the cluster
        from gate.executor import executor_from_args

        gates = executor_from_args(args)
    args.gates = gates

    def settle_waiting(cases: Sequence[Any]) -> None:
        """The fresh gates, one at a time, where no search compiles beside them."""
        for case in cases:
            rec = records.get(slug(case))
            if rec is not None and rec.get("status") == "searched":
                settle(case, rec, args)
                _write(out / "ops" / f"{slug(case)}.json", rec)

    try:
        settle_waiting(waiting)  # an earlier run's first, so that each rerun gets further
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(one, todo))
        settle_waiting(todo)
    finally:
        if gates is not None:
            gates.close()
    unmeasured = [c for c in cases if slug(c) in records and "flag_gems" not in records[slug(c)]]
    if args.tier == "device" and unmeasured and not args.tables_only:
        measure_extras(unmeasured, records, lambda: _in_time(args))
        for case in unmeasured:
            _write(out / "ops" / f"{slug(case)}.json", records[slug(case)])
    result = build_tables([{**rec, "records": origin.get(key, out.name)} for key, rec in records.items()],
                          args)
    _write(results.with_suffix(".json"), result)
    style = results.name == "styles"  # the style tier's tables (bench/styles)
    results.with_suffix(".md").write_text(
        markdown(result, "Style tier", "bench/results/styles/README.md") if style else markdown(result))
    left = len(cases) - len(records)
    say("heldout", f"wrote {results.with_suffix('.json')} and .md ({len(records)} operators"
                   + (f"; {left} not run yet: rerun the same command" if left else "") + ")")
    return 0


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
