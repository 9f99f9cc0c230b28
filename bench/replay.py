"""Replay a recorded optimize run under the current search policy, without a GPU.

    python3 bench/replay.py RUN CASE [--library DIR] [--budget N] [--seed S]
        [--model PASS=FACTOR ...] [--json]

RUN is the folder of a run (`klineage optimize --out`, or `bench/heldout.py`'s
`OUT/ops/<op>/optimize`) holding its `lineage.json`; CASE the case it optimized. The run's
start (the lineage's root) is optimized again with the library (the shipped one unless
`--library`), and each candidate's gate is answered from the record: a text the run gated and
kept as a state gets its recorded verdict (time, kernel profile, autotuner picks); a text it
never kept gets a passing verdict at the best time so far, times FACTOR of each `--model
PASS=FACTOR` whose pass it makes appear (`lineage.moves.feature_appears` against the start:
1/FACTOR of the time, e.g. a step measured 1.12x apart). So it answers "which moves would the
policy gate now, in which order, and how far would the recorded figures take it" from a run's
lineage; a text the run rejected is not recorded, and passes here.

Prints each gated candidate in order (its card, where, whether the record knew its text, its
time) and the best; `--json` prints one object.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def recorded(lineage: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(the root state's source, source -> recorded verdict JSON of every timed state)."""
    nodes = [n for n in lineage.get("nodes", []) if str(n.get("id", "")).startswith("s:")]
    if not nodes:
        raise ValueError("the lineage holds no state")
    targets = {e.get("target") for e in lineage.get("edges", lineage.get("links", []))}
    roots = [n for n in nodes if n["id"] not in targets] or nodes[:1]
    known = {n["source"]: n["verdict"] for n in nodes
             if isinstance(n.get("verdict"), dict) and (n["verdict"].get("timing") or {}).get("candidate_ms")}
    return roots[0]["source"], known


def replay(run_dir: Path, case: str, *, library: str | None = None, budget: int = 12,
           seed: int = 0, model: dict[str, float] | None = None) -> dict[str, Any]:
    """The replayed run: its gated candidates in order and its best (see the module doc)."""
    import kir
    from gate import Tier, Timing, Verdict
    from gate.verdict import VariantTiming
    from lineage.moves import feature_appears
    from lineage.optimize import optimize
    from lineage.shipped import open_library
    from passes.rewriter import DeterministicRewriter

    lineage = json.loads((run_dir / "lineage.json").read_text())
    start, known = recorded(lineage)
    start_ir = kir.parse(start, "triton")
    best = [min((v["timing"]["candidate_ms"] for v in known.values()), default=1.0)]
    gated: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []

    def gate(source: str, language: Any, case_: Any, tier: Any, **kw: Any) -> Any:
        if source in known:
            verdict = Verdict.from_json(known[source])
            ms, seen = verdict.timing.candidate_ms, True
        else:
            factor = 1.0
            for name, f in (model or {}).items():
                if feature_appears(name, start_ir, kir.parse(source, "triton")):
                    factor *= f
            ms, seen = best[0] / factor, False
            verdict = Verdict(True, Tier.DEVICE, "timing", timing=Timing(
                ms, 1.0, (VariantTiming("default", ms, 1.0, (), ()),)))
        best[0] = min(best[0], ms)
        row = pending.pop(0) if pending else {"card": "(start)"}
        gated.append({**row, "known": seen, "ms": ms})
        return verdict

    def progress(event: str, data: Any) -> None:
        if event == "gate":
            pending.append({"card": data.get("card"), "anchor": data.get("anchor")})

    lib, _ = open_library(library)
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "start.py"
        target.write_text(start)
        result = optimize(target, case, lib, tier="device", out=Path(tmp) / "out",
                          budget_steps=budget, check_fn=gate, rewriter=DeterministicRewriter(),
                          seed=seed, progress=progress)
    return {"run": str(run_dir), "case": case, "budget": budget, "model": model or {},
            "gated": gated, "best_ms": result.best_ms,
            "best_cards": [s.card for s in result.applied]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("case")
    ap.add_argument("--library", default=None)
    ap.add_argument("--budget", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", action="append", default=[], metavar="PASS=FACTOR")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        model = {k: float(v) for k, v in (m.split("=", 1) for m in args.model)}
        if any(f <= 0 for f in model.values()):
            raise ValueError("a factor must be positive")
    except ValueError as exc:
        print(f"replay: --model takes PASS=FACTOR with a positive factor ({exc})", file=sys.stderr)
        return 2
    run = Path(args.run)
    if not (run / "lineage.json").is_file():
        print(f"replay: {run} holds no lineage.json", file=sys.stderr)
        return 2
    try:
        out = replay(run, args.case, library=args.library, budget=args.budget, seed=args.seed,
                     model=model)
    except (ValueError, json.JSONDecodeError) as exc:
        print(f"replay: {run}/lineage.json: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 — a bad case or library: one line
        from kir.errors import KLineageError

        if isinstance(exc, KLineageError):
            print(f"replay: {exc}", file=sys.stderr)
            return 2
        raise
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    for i, g in enumerate(out["gated"]):
        print(f"{i:2d} {g['card'] or '':45s} {'recorded' if g['known'] else 'modelled':9s} "
              f"{g['ms']:.4f} ms  {g.get('anchor') or ''}")
    print(f"best {out['best_ms']} ms: {', '.join(out['best_cards'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
