"""A/B of kernel variants of one operator, timed in one process against its reference.

    python3 bench/ab_probe.py DIR OP[,OP...] [--cases ROOT] [--out OUTDIR] [--split]

DIR holds variant files named `<OP>__<variant>.py`, each a module with the case's `run(...)`:
a run's best state (`lineage.json`'s state of role `best`), the same with one rewrite applied,
the same under another configuration list, an expert called through a `run` of the case's
signature. For each OP (a case folder under ROOT, default `bench/styles`), the case's inputs
are drawn once at its first shape and every variant is timed with `triton.testing.do_bench`
(median, L2 flushed) in this process, after the reference: the figures compare with each
other, not across processes. Each row has the variant's ms, its relative error against the
reference and what each of its autotuners picked. On a machine without a GPU it only checks
each variant at the case's small shape (Triton's interpreter) and times nothing.

With --split each row (the reference's too) also says where its time goes: `kernel_ms`, the
GPU time of the kernels one call launches (torch.profiler, summed over the call's kernels,
averaged over 50 calls, L2 warm), and `graph_ms`, one call of a CUDA graph of twenty calls
replayed (the host's issue time gone); both by bench/kernel_time.py. `ms` well above
`kernel_ms` is time the host adds; `graph_ms` near `kernel_ms` says the host, not the kernel,
makes the difference.

Writes one record per OP (`{"case": "<OP> A/B", "timings": {variant: {...}}}`, the form
`bench/store.py ingest` reads) to OUTDIR/<OP>.json, and prints each as a line of JSON.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _picks(module: Any) -> dict[str, str]:
    """Each autotuner of `module` with the configuration it picked (a string, as Triton prints it)."""
    return {name: str(obj.best_config) for name, obj in vars(module).items()
            if getattr(obj, "best_config", None) is not None}


def _split(fn: Any) -> dict[str, Any]:
    """`kernel_ms`: the kernels' GPU time, L2 warm, per call of 50; `graph_ms`: one call of a
    graph of 20 (bench/kernel_time.py)."""
    from bench import kernel_time  # noqa: PLC0415

    out: dict[str, Any] = {"kernel_ms": (kernel_time.kernel_us(fn, 50) or 0.0) / 1000.0}
    try:
        out["graph_ms"] = kernel_time.graph_ms(fn, calls=20)
    except Exception as exc:  # noqa: BLE001 — a call a graph cannot hold (a host read) has none
        out["graph_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    return out


def probe(folder: Path, op: str, cases: Path, split: bool = False) -> dict[str, Any]:
    """The record of one operator: its reference's ms and each variant's row."""
    import gate

    case = gate.load_case(cases / op)
    mod = case.module()
    gpu = os.environ.get("TRITON_INTERPRET") != "1"
    shapes = mod.SHAPES if gpu else getattr(mod, "SMALL_SHAPES", mod.SHAPES)
    shape = dict(next(iter(shapes.values())))
    inputs = mod.make_inputs(shape, 1, "cuda" if gpu else "cpu")
    ref = mod.reference(*inputs)
    bench = None
    if gpu:
        from triton.testing import do_bench as bench
    timings: dict[str, Any] = {"reference": {"ms": bench(lambda: mod.reference(*inputs),
                                                         return_mode="median") if bench else None}}
    if bench and split:
        timings["reference"].update(_split(lambda: mod.reference(*inputs)))
    for path in sorted(folder.glob(f"{op}__*.py")):
        variant = path.stem.split("__", 1)[1]
        try:
            spec = importlib.util.spec_from_file_location(f"ab_{op}_{variant}".replace("-", "_"), path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            out = module.run(*inputs)
            err = float((out.float() - ref.float()).norm() / ref.float().norm())
            ms = bench(lambda m=module: m.run(*inputs), return_mode="median") if bench else None
            timings[variant] = {"ms": ms, "rel_err": err, "picks": _picks(module)}
            if bench and split:
                timings[variant].update(_split(lambda m=module: m.run(*inputs)))
        except Exception as exc:  # noqa: BLE001 — a variant that fails is a row, not the end
            timings[variant] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
    return {"case": f"{op} A/B", "shape": shape, "timings": timings}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("ops")
    ap.add_argument("--cases", default=str(ROOT / "bench/styles"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--split", action="store_true",
                    help="also time each row's kernels alone (profiler) and from a CUDA graph")
    args = ap.parse_args(argv)
    folder, cases = Path(args.folder), Path(args.cases)
    if not folder.is_dir():
        print(f"ab_probe: {folder}: no such folder", file=sys.stderr)
        return 2
    ops = [op for op in args.ops.split(",") if op]
    missing = [op for op in ops if not (cases / op / "case.py").is_file()]
    if not ops or missing:
        print(f"ab_probe: no case folder under {cases} for {', '.join(missing) or 'an empty list'}",
              file=sys.stderr)
        return 2
    for op in ops:
        record = {**probe(folder, op, cases, args.split), "command": " ".join(["python3", *sys.argv])}
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / f"{op}.json").write_text(json.dumps(record, indent=1) + "\n")
        print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
