"""What one device gate costs on large problems, by phase, against the GPU work in it.

    python3 bench/gate_cost.py --kernelbench DIR [--starts bench/kernelbench] [--count 5]
        [--only NAME,...] [--mode before,after] [--gate-timeout S] [--out DIR]

Takes the KernelBench tier's problems (`bench/kernelbench_tier.py`: a checkout given by
--kernelbench or $KERNELBENCH_DIR, start kernels under --starts), ranks them by the bytes of
their inputs and Model tensors at the real size (measured on the loaded problem, on the meta
device), and gates the start kernel of the --count largest at the device tier, fresh (no
verdict cache), one at a time. Per problem it prints the end-to-end wall time of
`gate.check_file`, each phase the verdict records (`Verdict.phases`: the worker's phases and
the parts of its start-up, the parent's comparisons, the waits), the GPU work (`gpu_s`: seconds
the worker spent in timed runs of the reference and the candidate, `Timing.timed_s`, plus its
autotuners' timing of configurations) and the rest (`overhead_s` = end-to-end - gpu_s), then
whether it meets the budget: end-to-end <= `WALL_BUDGET_S` and overhead <= `OVERHEAD_FIXED_S` +
`OVERHEAD_SHARE` x gpu_s.

`--mode` gates every problem once per mode (`MODES`: the gate's settings, as environment
variables), all problems of one mode in a row: `before` is the gate as it was (whole outputs
compared in the parent, the job's number of input sets, each worker started for its job),
`after` the gate's defaults (references held and compared on the GPU, fp32 ones in one pass
by `gate.fusedcompare`, input sets sized to the device's memory, the next worker started
while a gate runs), `unfused` the defaults with every held comparison done by torch ops
(`KLINEAGE_GATE_FUSED=0`); each mode starts its first
worker before its first gate (`gate.prestart`; a worker's start-up is paid once per run, and
its seconds are reported as the mode's `run_start_s`, apart from the gates) and, unless
--reuse-compiled, compiles with a fresh Triton cache (as a run's new candidates do);
`parent` / `worker` choose the comparison alone (`--compare` is the same option);
`parked-host` is the defaults with what a plan lets wait kept as the lean plan first kept it
(every set and held reference copied to host memory by torch's pageable copies, a lean plan's
sampled outputs in host memory: no set drawn again, no room kept, no pinned staging);
`held-refs` is the defaults with every held reference kept (in the room, else in host memory)
instead of computed again where compared (`KLINEAGE_GATE_RECOMPUTE=0`).
`--gpu-memory GB` plans every gate for at most that much device memory (`gate.memplan.CAP_ENV`,
as the KernelBench tier's grant to a problem sharing a GPU does), so that the largest problems
take the plans they take beside another. A row per
problem and mode, named `problem [mode]`. OUT/gate_cost.json holds the rows (`bench/store.py
ingest` reads it), OUT/gate_cost.md the table. Exit code 0 when every gate passed and met the
budget, 1 otherwise, 2 for bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "bench"):  # the packages, and bench/kernelbench_tier.py
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

WALL_BUDGET_S = 30.0
OVERHEAD_FIXED_S = 5.0
OVERHEAD_SHARE = 0.2
_PARKED_HOST: dict[str, str | None] = {"KLINEAGE_GATE_REDRAW": "0", "KLINEAGE_GATE_ROOM": "0",
                                       "KLINEAGE_GATE_STAGING": "0", "KLINEAGE_GATE_SAMPLES": "host"}
_DEFAULT_PARKING = {name: None for name in (*_PARKED_HOST, "KLINEAGE_GATE_RECOMPUTE")}
MODES: dict[str, dict[str, str | None]] = {
    "before": {"KLINEAGE_GATE_COMPARE": "parent", "KLINEAGE_GATE_SETS": "job",
               "KLINEAGE_GATE_STANDBY": "0", "KLINEAGE_GATE_FUSED": "0", **_DEFAULT_PARKING},
    "after": {"KLINEAGE_GATE_COMPARE": None, "KLINEAGE_GATE_SETS": None,
              "KLINEAGE_GATE_STANDBY": None, "KLINEAGE_GATE_FUSED": None, **_DEFAULT_PARKING},
    "unfused": {"KLINEAGE_GATE_COMPARE": None, "KLINEAGE_GATE_SETS": None,
                "KLINEAGE_GATE_STANDBY": None, "KLINEAGE_GATE_FUSED": "0", **_DEFAULT_PARKING},
    "parent": {"KLINEAGE_GATE_COMPARE": "parent"},
    "worker": {"KLINEAGE_GATE_COMPARE": "worker"},
    "parked-host": {"KLINEAGE_GATE_COMPARE": None, "KLINEAGE_GATE_SETS": None,
                    "KLINEAGE_GATE_STANDBY": None, "KLINEAGE_GATE_FUSED": None, **_PARKED_HOST},
    "held-refs": {"KLINEAGE_GATE_COMPARE": None, "KLINEAGE_GATE_SETS": None,
                  "KLINEAGE_GATE_STANDBY": None, "KLINEAGE_GATE_FUSED": None, **_DEFAULT_PARKING,
                  "KLINEAGE_GATE_RECOMPUTE": "0"},
}
"""Gate settings per mode (environment variables; None: unset, the gate's default)."""
STARTUP_WAIT_S = 60.0
"""At most this long is waited for the run's first worker to start up (`gate.prestart`)."""
GPU_PHASES = ("autotune timing",)
"""Phases (besides `Timing.timed_s`) that are the candidate's own GPU work."""


def cost(phases: Sequence[tuple[str, float]] | Mapping[str, float], wall_s: float,
         timed_s: float) -> dict[str, Any]:
    """The cost of one gate: `wall_s` end to end, its `phases` (name -> seconds), `gpu_s` (the
    worker's timed runs plus the GPU_PHASES) and `overhead_s` (the rest), with whether it meets
    the budget of the module docstring."""
    table = dict(phases.items() if isinstance(phases, Mapping) else phases)
    gpu = timed_s + sum(table.get(p, 0.0) for p in GPU_PHASES)
    overhead = max(0.0, wall_s - gpu)
    allowed = OVERHEAD_FIXED_S + OVERHEAD_SHARE * gpu
    return {"wall_s": round(wall_s, 2), "gpu_s": round(gpu, 2), "overhead_s": round(overhead, 2),
            "overhead_allowed_s": round(allowed, 2),
            "within_budget": wall_s <= WALL_BUDGET_S and overhead <= allowed,
            "phases": {k: round(v, 2) for k, v in table.items()}}


def gate_once(start: Path, case: Any, timeout: float | None = None) -> dict[str, Any]:
    """Gate `start` on `case` at the device tier, fresh, and measure it (`cost`); `timeout`:
    the gate's time limit after its worker started (None: the gate's default)."""
    import gate

    t0 = time.perf_counter()
    verdict = gate.check_file(start, case, "device", cache=False, timeout=timeout)
    wall = time.perf_counter() - t0
    timed = verdict.timing.timed_s if verdict.timing else 0.0
    return {"ok": verdict.ok, "reason": verdict.reason, "flags": [f[:300] for f in verdict.flags],
            **cost(verdict.phases, wall, timed),
            "candidate_ms": verdict.timing.candidate_ms if verdict.timing else None,
            "reference_ms": verdict.timing.reference_ms if verdict.timing else None}


def _tier() -> Any:
    import kernelbench_tier

    return kernelbench_tier


def problem_bytes(case: Any) -> float:
    """Bytes of a problem's inputs and Model tensors at its first device shape (0 when unknown)."""
    module = case.module()
    shape = dict(next(iter(case.shapes.values())))
    return float(module.bytes_moved(shape)) if hasattr(module, "bytes_moved") else 0.0


def table(rows: Sequence[Mapping[str, Any]], parts: bool = False) -> str:
    """The per-phase table: one row per problem, the phases in the order first seen; with
    `parts`, the parts of phases (`phase: part`) instead of the phases."""
    names: list[str] = []
    for r in rows:
        names += [n for n in r.get("phases", {}) if n not in names and (": " in n) == parts]
    head = ["problem", "GB", "ok", "wall s", "gpu s", "overhead s", "allowed s", "budget", *names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["op"], f"{r.get('bytes', 0) / 1e9:.2f}", "pass" if r.get("ok") else "FAIL",
                 f"{r.get('wall_s', 0):.1f}", f"{r.get('gpu_s', 0):.1f}", f"{r.get('overhead_s', 0):.1f}",
                 f"{r.get('overhead_allowed_s', 0):.1f}", "met" if r.get("within_budget") else "MISSED",
                 *[f"{r.get('phases', {}).get(n, 0.0):.2f}" if n in r.get("phases", {}) else "-" for n in names]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def comparison(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line per problem gated in more than one mode: wall and overhead seconds by mode."""
    by_problem: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        by_problem.setdefault(str(r.get("problem", r["op"])), []).append(r)
    lines = []
    for problem, group in by_problem.items():
        if len(group) > 1:
            lines.append(f"{problem}: " + "; ".join(
                f"{r.get('mode')}: wall {r.get('wall_s', 0):.1f} s, overhead "
                f"{r.get('overhead_s', 0):.1f} s of {r.get('overhead_allowed_s', 0):.1f} allowed"
                f"{'' if r.get('ok') else ' (FAIL)'}" for r in group))
    return "\n".join(lines) + ("\n" if lines else "")


def apply_mode(mode: str, environ: Any = None) -> None:
    """Set the environment variables of `mode` (`MODES`) in `environ` (os.environ)."""
    import os

    environ = os.environ if environ is None else environ
    for name, value in MODES[mode].items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value


def _gpu_name() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except ImportError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    import os

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", default=os.environ.get("KERNELBENCH_DIR"))
    ap.add_argument("--starts", default=str(ROOT / "bench" / "kernelbench"))
    ap.add_argument("--count", type=int, default=5, help="the largest problems gated")
    ap.add_argument("--only", default="", help="comma-separated problems instead of the largest")
    ap.add_argument("--out", default=None, help="folder for gate_cost.json (default: none written)")
    ap.add_argument("--gate-timeout", type=float, default=None,
                    help="each gate's time limit in seconds after its worker started (a gate "
                         "over it is a failed row); default: the gate's own")
    ap.add_argument("--reuse-compiled", dest="fresh_compile", action="store_false",
                    help="keep Triton's compile cache across modes (default: a fresh one per mode)")
    ap.add_argument("--gpu-memory", type=float, default=None, metavar="GB",
                    help="device memory each gate plans for at most (default: what is free)")
    ap.add_argument("--mode", "--compare", dest="mode", default="",
                    help=f"gate settings, comma-separated ({', '.join(MODES)}); default: the "
                         f"gate's own")
    args = ap.parse_args(argv)
    modes = [m for m in args.mode.split(",") if m]
    import gate
    from kir.errors import BadInputError

    tier = _tier()
    if not args.kernelbench or args.count < 1:
        print("gate_cost: give --kernelbench DIR (or KERNELBENCH_DIR) and a positive --count", file=sys.stderr)
        return 2
    if any(m not in MODES for m in modes):
        print(f"gate_cost: --mode takes {', '.join(MODES)}, not {args.mode}", file=sys.stderr)
        return 2
    if args.gpu_memory is not None:
        if args.gpu_memory <= 0:
            print(f"gate_cost: --gpu-memory takes a positive number of GB, not {args.gpu_memory}",
                  file=sys.stderr)
            return 2
        from gate import memplan

        os.environ[memplan.CAP_ENV] = str(int(args.gpu_memory * 1e9))
    try:
        root = tier.problem_root(Path(args.kernelbench))
        problems, _ = tier.pair_problems(root, Path(args.starts), [s for s in args.only.split(",") if s])
        sized = []
        for p in problems:
            try:
                case = gate.load_case(p.problem)
            except BadInputError as exc:
                print(f"gate_cost: {p.key} skipped: {exc}", file=sys.stderr)
                continue
            sized.append((problem_bytes(case), p, case))
    except BadInputError as exc:
        print(f"gate_cost: {exc}", file=sys.stderr)
        return 2
    if not sized:
        print("gate_cost: no problem to gate", file=sys.stderr)
        return 2
    sized.sort(key=lambda item: -item[0])
    chosen = sized if args.only else sized[:args.count]
    print(f"[{time.strftime('%H:%M:%S')}] the {len(chosen)} largest problems: "
          + ", ".join(f"{p.key} ({n / 1e9:.2f} GB)" for n, p, _ in chosen), file=sys.stderr, flush=True)
    rows = []
    starts: dict[str, float] = {}
    for mode in modes or [None]:
        if mode is not None:
            apply_mode(mode)
        if args.fresh_compile:  # every mode compiles its kernels, as a run's new candidates do
            os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"gate-cost-{mode}-triton-")
        # the run's first worker, started before its first gate (a no-op where standby workers
        # are off): paid once per run, reported apart from the gates
        starts[mode or "default"] = round(gate.prestart("device", wait=STARTUP_WAIT_S,
                                                        case=chosen[0][2]), 2)
        print(f"[{time.strftime('%H:%M:%S')}] mode {mode}: run start-up {starts[mode or 'default']:.2f} s",
              file=sys.stderr, flush=True)
        for nbytes, p, case in chosen:
            name = p.key if mode is None else f"{p.key} [{mode}]"
            print(f"[{time.strftime('%H:%M:%S')}] {name}: {nbytes / 1e9:.2f} GB, gating at the "
                  f"device tier", file=sys.stderr, flush=True)
            try:
                measured = gate_once(p.start, case, args.gate_timeout)
            except Exception as exc:  # noqa: BLE001 — one problem's failure is its row
                measured = {"ok": False, "reason": f"{type(exc).__name__}: {exc}"[:500],
                            **cost({}, 0.0, 0.0)}
            row = {"op": name, "problem": p.key, "mode": mode or "default", "bytes": nbytes,
                   **measured}
            print(f"[{time.strftime('%H:%M:%S')}] {name}: {json.dumps(row)}", file=sys.stderr, flush=True)
            rows.append(row)
            if args.out:  # after every row: a run cut short keeps what it measured
                _write(Path(args.out), rows, argv, starts)
    print(table(rows), end="")
    print(comparison(rows), end="")
    print("\nParts of the phases:\n" + table(rows, parts=True), end="")
    return 0 if all(r["ok"] and r["within_budget"] for r in rows) else 1


def _write(out: Path, rows: Sequence[Mapping[str, Any]], argv: Sequence[str] | None,
           starts: Mapping[str, float]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    record = {"rows": list(rows), "wall_budget_s": WALL_BUDGET_S, "overhead_fixed_s": OVERHEAD_FIXED_S,
              "overhead_share": OVERHEAD_SHARE, "gpu": _gpu_name(), "run_start_s": dict(starts),
              "command": "python3 bench/gate_cost.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    tmp = out / "gate_cost.json.tmp"
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(out / "gate_cost.json")
    (out / "gate_cost.md").write_text(table(rows) + "\n" + comparison(rows)
                                      + "\nParts of the phases:\n\n" + table(rows, parts=True))


if __name__ == "__main__":
    sys.exit(main())
