"""What one device gate costs on large problems, by phase, against the GPU work in it.

    python3 bench/gate_cost.py --kernelbench DIR [--starts bench/kernelbench] [--count 5]
        [--only NAME,...] [--compare parent,worker] [--out DIR]

Takes the KernelBench tier's problems (`bench/kernelbench_tier.py`: a checkout given by
--kernelbench or $KERNELBENCH_DIR, start kernels under --starts), ranks them by the bytes of
their inputs and Model tensors at the real size, and gates the start kernel of the --count
largest at the device tier, fresh (no verdict cache), one at a time. Per problem it prints the
end-to-end wall time of `gate.check_file`, each phase the verdict records (`Verdict.phases`:
the worker's phases, the parent's comparisons, the waits), the GPU work (`gpu_s`: seconds the
worker spent in timed runs of the reference and the candidate, `Timing.timed_s`, plus its
autotuners' timing of configurations) and the rest (`overhead_s` = end-to-end - gpu_s), then
whether it meets the budget: end-to-end <= `WALL_BUDGET_S` and overhead <= `OVERHEAD_FIXED_S` +
`OVERHEAD_SHARE` x gpu_s. `--compare` gates each problem once per comparison mode
(`KLINEAGE_GATE_COMPARE`: `parent`, outputs sent whole and compared with numpy, the way before
held references and the default; `worker`, compared on the GPU against held references,
opt-in), a row each, named `problem [mode]`: the before / after table. OUT/gate_cost.json holds the rows. Exit code 0 when every gate passed
and met the budget, 1 otherwise, 2 for bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
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


def gate_once(start: Path, case: Any) -> dict[str, Any]:
    """Gate `start` on `case` at the device tier, fresh, and measure it (`cost`)."""
    import gate

    t0 = time.perf_counter()
    verdict = gate.check_file(start, case, "device", cache=False)
    wall = time.perf_counter() - t0
    timed = verdict.timing.timed_s if verdict.timing else 0.0
    return {"ok": verdict.ok, "reason": verdict.reason, **cost(verdict.phases, wall, timed),
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


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The per-phase table: one row per problem, the phases in the order first seen."""
    names: list[str] = []
    for r in rows:
        names += [n for n in r.get("phases", {}) if n not in names]
    head = ["problem", "GB", "ok", "wall s", "gpu s", "overhead s", "allowed s", "budget", *names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["op"], f"{r.get('bytes', 0) / 1e9:.2f}", "pass" if r.get("ok") else "FAIL",
                 f"{r.get('wall_s', 0):.1f}", f"{r.get('gpu_s', 0):.1f}", f"{r.get('overhead_s', 0):.1f}",
                 f"{r.get('overhead_allowed_s', 0):.1f}", "met" if r.get("within_budget") else "MISSED",
                 *[f"{r.get('phases', {}).get(n, 0.0):.2f}" if n in r.get("phases", {}) else "-" for n in names]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    import os

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", default=os.environ.get("KERNELBENCH_DIR"))
    ap.add_argument("--starts", default=str(ROOT / "bench" / "kernelbench"))
    ap.add_argument("--count", type=int, default=5, help="the largest problems gated")
    ap.add_argument("--only", default="", help="comma-separated problems instead of the largest")
    ap.add_argument("--out", default=None, help="folder for gate_cost.json (default: none written)")
    ap.add_argument("--compare", default="", help="comparison modes, comma-separated (parent, "
                                                  "worker); default: the gate's own")
    args = ap.parse_args(argv)
    modes = [m for m in args.compare.split(",") if m]
    import gate
    from kir.errors import BadInputError

    tier = _tier()
    if not args.kernelbench or args.count < 1:
        print("gate_cost: give --kernelbench DIR (or KERNELBENCH_DIR) and a positive --count", file=sys.stderr)
        return 2
    if any(m not in ("parent", "worker") for m in modes):
        print(f"gate_cost: --compare takes parent and worker, not {args.compare}", file=sys.stderr)
        return 2
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
    rows = []
    for nbytes, p, case in chosen:
        for mode in modes or [None]:
            name = p.key if mode is None else f"{p.key} [{mode}]"
            if mode is not None:
                os.environ["KLINEAGE_GATE_COMPARE"] = mode
            print(f"[{time.strftime('%H:%M:%S')}] {name}: {nbytes / 1e9:.2f} GB, gating at the "
                  f"device tier", file=sys.stderr, flush=True)
            row = {"op": name, "bytes": nbytes, **gate_once(p.start, case)}
            print(f"[{time.strftime('%H:%M:%S')}] {name}: {json.dumps(row)}", file=sys.stderr, flush=True)
            rows.append(row)
    print(table(rows), end="")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gate_cost.json").write_text(json.dumps({"rows": rows, "wall_budget_s": WALL_BUDGET_S,
                                                        "overhead_fixed_s": OVERHEAD_FIXED_S,
                                                        "overhead_share": OVERHEAD_SHARE}, indent=1) + "\n")
        (out / "gate_cost.md").write_text(table(rows))
    return 0 if all(r["ok"] and r["within_budget"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
