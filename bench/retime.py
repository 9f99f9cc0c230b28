"""Time a held-out run's best kernel against its reference again, in several fresh processes.

    python3 bench/retime.py RECORD_DIR OP [OP ...] [--processes 5] [--rounds 7] [--out FILE]

RECORD_DIR is a folder of `bench/heldout.py` records (`ops/<op>.json` and
`ops/<op>/optimize/lineage.json`). For each operator the best state of the run's lineage is
written to a temporary module and timed in `--processes` fresh worker processes; each process
imports the case, builds the default shape's inputs, checks the kernel's output against the
reference once (the case's tolerance), lets an autotuned kernel tune on its first call, then
takes `--rounds` alternating pairs of `triton.testing.do_bench` medians (kernel, reference;
L2 flushed by do_bench). A process's ratio is the median over its rounds of reference / kernel;
the operator's figure is the median over processes, with the smallest and largest process
ratio beside it (what one run of the benchmark could have reported). Writes FILE.json and
FILE.md (default: RECORD_DIR/retime). A GPU is needed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def best_source(record_dir: Path, op: str) -> tuple[str, str]:
    """(case ref, best kernel source) of operator `op`'s record in `record_dir`."""
    matches = sorted((record_dir / "ops").glob(f"*{op}.json"))
    exact = [m for m in matches if m.stem.split("__")[-1] == op]
    if len(exact) != 1:
        raise SystemExit(f"retime: no single record of {op!r} in {record_dir}/ops")
    record = json.loads(exact[0].read_text())
    lineage = json.loads((exact[0].with_suffix("") / "optimize" / "lineage.json").read_text())
    best = [n for n in lineage["nodes"] if n["type"] == "state" and "best" in (n["roles"] or [])]
    if len(best) != 1:
        raise SystemExit(f"retime: the lineage of {op!r} has {len(best)} best states")
    return record["ref"], best[0]["source"]


def worker(case_ref: str, kernel_path: str, rounds: int) -> dict[str, Any]:
    """One process's measurement (run with `--worker`)."""
    import importlib.util

    import torch
    from triton.testing import do_bench

    from gate.cases import load_case

    case = load_case(case_ref)
    mod = case.module()
    shape = dict(next(iter(case.device_shapes.values())))
    inputs = mod.make_inputs(shape, 0, "cuda")
    spec = importlib.util.spec_from_file_location("retimed_kernel", kernel_path)
    kernel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernel)
    out = kernel.run(*inputs)
    ref = mod.reference(*inputs)
    torch.cuda.synchronize()
    err = float((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-12))
    tol = case.tolerance_for(shape["dtype"])
    if not err <= tol:
        return {"ok": False, "reason": f"relative error {err:.3g} > {tol}"}
    pairs = []
    for _ in range(rounds):
        k_ms = do_bench(lambda: kernel.run(*inputs), return_mode="median")
        r_ms = do_bench(lambda: mod.reference(*inputs), return_mode="median")
        pairs.append((k_ms, r_ms))
    ratios = [r / k for k, r in pairs]
    return {"ok": True, "rel_err": err, "kernel_ms": statistics.median(k for k, _ in pairs),
            "reference_ms": statistics.median(r for _, r in pairs),
            "ratio": statistics.median(ratios), "round_ratios": ratios}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("record_dir", nargs="?")
    ap.add_argument("ops", nargs="*")
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out")
    ap.add_argument("--worker", nargs=3, metavar=("CASE", "KERNEL", "ROUNDS"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], int(args.worker[2]))))
        return 0
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
            for i in range(args.processes):
                print(f"retime: {op} process {i + 1}/{args.processes}", file=sys.stderr)
                proc = subprocess.run([sys.executable, __file__, "--worker", case_ref, str(path),
                                       str(args.rounds)], capture_output=True, text=True,
                                      cwd=ROOT, env=dict(os.environ), timeout=600)
                line = proc.stdout.strip().splitlines()[-1:] if proc.returncode == 0 else []
                runs.append(json.loads(line[0]) if line else
                            {"ok": False, "reason": proc.stderr.strip().splitlines()[-1:]})
            good = [r["ratio"] for r in runs if r.get("ok")]
            results[op] = {"case": case_ref, "processes": runs,
                           "ratio": statistics.median(good) if good else None,
                           "min": min(good) if good else None, "max": max(good) if good else None}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(
        {"record_dir": str(record_dir), "processes": args.processes, "rounds": args.rounds,
         "command": "python3 bench/retime.py " + " ".join(sys.argv[1:]), "ops": results},
        indent=1) + "\n")
    lines = [f"# Re-timed best kernels of `{record_dir}`", "",
             f"`python3 bench/retime.py {' '.join(sys.argv[1:])}`: {args.processes} fresh "
             f"processes per operator, {args.rounds} alternating do_bench pairs (kernel, "
             "reference) in each; x/ref is reference / kernel time.", "",
             "| operator | kernel ms (median) | reference ms (median) | x/ref median of processes "
             "| smallest | largest |", "|---|---:|---:|---:|---:|---:|"]
    for op, r in results.items():
        ok = [p for p in r["processes"] if p.get("ok")]
        if not ok:
            lines.append(f"| {op} | - | - | failed: {r['processes'][0].get('reason')} | | |")
            continue
        k = statistics.median(p["kernel_ms"] for p in ok)
        ref = statistics.median(p["reference_ms"] for p in ok)
        lines.append(f"| {op} | {k:.4f} | {ref:.4f} | {r['ratio']:.3f} | {r['min']:.3f} "
                     f"| {r['max']:.3f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
