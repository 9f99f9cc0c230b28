"""How steady the device gate's timings are: a case's Triton expert gated again and again,
alone and with other gates running beside it.

    python3 bench/timing_probe.py [--cases topk,conv2d] [--repeat 3] [--parallel 3]
                                  [--out FILE.json] [--md FILE.md]

For each case, gates the expert `--repeat` times one after another, then `--parallel` times at
once (threads, each gate its own worker process, as admission and the roundtrip run them), all
at the device tier without the verdict cache. Reports the candidate's and the reference's
median times per mode, their spread (max / min), the expert's time recorded in its device
lineage, and the seconds the gates spent waiting for the GPU lock and for their parent's
output comparisons. Kernels of a few microseconds show whether host-side work (the parent's
comparisons, other gates' compilers) leaks into the measurement. Progress goes to stderr.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _lineage_expert_ms(case: str) -> float | None:
    path = ROOT / "bench" / "results" / "lineages" / "device" / case / "lineage.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    for node in data.get("nodes", []):
        if node.get("type") == "state" and "expert" in (node.get("roles") or []):
            return (node.get("timing") or {}).get("candidate_ms")
    return None


def _gate(case: str, expert: Path) -> dict[str, Any]:
    import gate

    t0 = time.perf_counter()
    verdict = gate.check_file(expert, case, gate.Tier.DEVICE, cache=False, timeout=300)
    phases = dict(verdict.phases)
    timing = verdict.timing
    return {"ok": verdict.ok, "reason": verdict.reason,
            "candidate_ms": timing.candidate_ms if timing else None,
            "reference_ms": timing.reference_ms if timing else None,
            "gpu_lock_wait_s": phases.get("gpu lock wait", 0.0),
            "compare_wait_s": phases.get("parent compare wait", 0.0),
            "compare_s": phases.get("compare (parent)", 0.0),
            "wall_s": round(time.perf_counter() - t0, 2)}


def _summary(runs: list[dict[str, Any]], key: str) -> dict[str, float] | None:
    values = [r[key] for r in runs if r.get(key)]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "spread": max(values) / min(values)}


def probe(case: str, repeat: int, parallel: int) -> dict[str, Any]:
    from gate.cases import load_case

    expert = next(p for p, lang in load_case(case).expert_paths() if lang == "triton")
    alone = []
    for i in range(repeat):
        alone.append(_gate(case, expert))
        print(f"[probe] {case} alone {i}: {alone[-1]}", file=sys.stderr, flush=True)
    with ThreadPoolExecutor(parallel) as pool:
        together = list(pool.map(lambda _: _gate(case, expert), range(parallel)))
    for i, r in enumerate(together):
        print(f"[probe] {case} side by side {i}: {r}", file=sys.stderr, flush=True)
    return {"case": case, "expert": str(expert.relative_to(ROOT)),
            "lineage_expert_ms": _lineage_expert_ms(case),
            "modes": {name: {"runs": runs, "candidate_ms": _summary(runs, "candidate_ms"),
                             "reference_ms": _summary(runs, "reference_ms")}
                      for name, runs in (("alone", alone), (f"{parallel} side by side", together))}}


def table(records: list[dict[str, Any]], label: str) -> str:
    lines = [f"| code | case | mode | expert ms (median) | spread | reference ms (median) | "
             f"lineage's expert ms | gates passed |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for rec in records:
        for mode, m in rec["modes"].items():
            cand, ref = m["candidate_ms"] or {}, m["reference_ms"] or {}
            ok = sum(1 for r in m["runs"] if r["ok"])
            lineage = f"{rec['lineage_expert_ms']:.4g}" if rec["lineage_expert_ms"] else "—"
            nan = float("nan")
            lines.append(f"| {label} | {rec['case']} | {mode} | {cand.get('median', nan):.4g} | "
                         f"{cand.get('spread', nan):.2f} | {ref.get('median', nan):.4g} | "
                         f"{lineage} | {ok}/{len(m['runs'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="topk,conv2d")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=3)
    ap.add_argument("--label", default="this", help="names the code measured in the table")
    ap.add_argument("--out", default="")
    ap.add_argument("--md", default="")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.parallel < 1:
        print("timing_probe: --repeat and --parallel must be >= 1", file=sys.stderr)
        return 2
    records = [probe(c, args.repeat, args.parallel) for c in args.cases.split(",") if c]
    text = table(records, args.label)
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    if args.md:
        Path(args.md).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
