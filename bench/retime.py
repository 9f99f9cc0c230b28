"""Gate a held-out run's best kernel again, several times, to see how far one run's figure moves.

    python3 bench/retime.py RECORD_DIR OP [OP ...] [--gates 5] [--out FILE]

RECORD_DIR is a folder of `bench/heldout.py` records (`ops/<op>.json` and
`ops/<op>/optimize/lineage.json`). For each operator the best state of the run's lineage is
written to a temporary module and gated at the device tier `--gates` times, without the verdict
cache: each gate is a fresh worker process that imports the kernel (an autotuned kernel tunes
again) and times it and the reference the way every table figure was timed (`gate.worker`:
do_bench median with the L2 flush, the GPU lead and the GPU lock). The operator's figure is the
median over gates of reference / kernel, with the smallest and largest gate's ratio beside it
(what one run of the benchmark could have reported) and each gate's autotuner picks. Writes
FILE.json and FILE.md (default: RECORD_DIR/retime). A GPU is needed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "bench"):  # the project, and heldout.py beside this script
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))


def best_source(record_dir: Path, op: str) -> tuple[str, str]:
    """(case ref, best kernel source) of operator `op`'s record in `record_dir`."""
    from lineage.graph import Lineage

    matches = sorted((record_dir / "ops").glob(f"*{op}.json"))
    exact = [m for m in matches if m.stem.split("__")[-1] == op]
    if len(exact) != 1:
        raise SystemExit(f"retime: no single record of {op!r} in {record_dir}/ops")
    record = json.loads(exact[0].read_text())
    lin = Lineage.load(exact[0].with_suffix("") / "optimize" / "lineage.json")
    best = list(lin.roles("best"))
    if len(best) != 1:
        raise SystemExit(f"retime: the lineage of {op!r} has {len(best)} best states")
    return record["ref"], lin.node(best[0])["source"]


def gate_once(case_ref: str, kernel_path: Path, tier: str = "device") -> dict[str, Any]:
    """One gate of the kernel (no cache), summarized as the held-out tables summarize theirs
    (`heldout._verdict_summary`: times, each variant's kernel times and autotuner picks) with
    the ratio; `ok` false with the reason where it fails or has no timing (the interpret tier)."""
    import gate
    from heldout import _verdict_summary

    out = _verdict_summary(gate.check_file(kernel_path, gate.load_case(case_ref), tier=tier,
                                           cache=False))
    if out["ok"] and not (out["ms"] and out["reference_ms"]):
        return {**out, "ok": False, "reason": f"no timing at the {tier} tier"}
    return {**out, "ratio": out["reference_ms"] / out["ms"]} if out["ok"] else out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("record_dir", nargs="?")
    ap.add_argument("ops", nargs="*")
    ap.add_argument("--gates", type=int, default=5)
    ap.add_argument("--out")
    ap.add_argument("--tier", default="device", help="gate tier (interpret: a CPU smoke run)")
    args = ap.parse_args(argv)
    if not args.record_dir or not args.ops:
        ap.error("RECORD_DIR and at least one OP are needed")
    record_dir = Path(args.record_dir)
    out = Path(args.out) if args.out else record_dir / "retime"
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for op in args.ops:
            case_ref, source = best_source(record_dir, op)
            path = Path(tmp) / f"{op}_best.py"
            path.write_text(source)
            runs = []
            for i in range(args.gates):
                runs.append(gate_once(case_ref, path, args.tier))
                print(f"retime: {op} gate {i + 1}/{args.gates}: {runs[-1]}", file=sys.stderr)
            good = [r["ratio"] for r in runs if r.get("ok")]
            results[op] = {"case": case_ref, "processes": runs,
                           "ratio": statistics.median(good) if good else None,
                           "min": min(good) if good else None, "max": max(good) if good else None}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(
        {"record_dir": str(record_dir), "gates": args.gates,
         "command": "python3 bench/retime.py " + " ".join(sys.argv[1:]), "ops": results},
        indent=1) + "\n")
    lines = [f"# Re-timed best kernels of `{record_dir}`", "",
             f"`python3 bench/retime.py {' '.join(sys.argv[1:])}`: {args.gates} device gates "
             "per operator (no verdict cache; each a fresh worker process, its autotuners tuning "
             "again); x/ref is reference / kernel time.", "",
             "| operator | kernel ms (median) | reference ms (median) | x/ref median of gates "
             "| smallest | largest |", "|---|---:|---:|---:|---:|---:|"]
    for op, r in results.items():
        ok = [p for p in r["processes"] if p.get("ok")]
        if not ok:
            lines.append(f"| {op} | - | - | failed: {r['processes'][0].get('reason')} | | |")
            continue
        k = statistics.median(p["ms"] for p in ok)
        ref = statistics.median(p["reference_ms"] for p in ok)
        lines.append(f"| {op} | {k:.4f} | {ref:.4f} | {r['ratio']:.3f} | {r['min']:.3f} "
                     f"| {r['max']:.3f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
