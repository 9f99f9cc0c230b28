"""How far a tile-configuration sweep alone can take each dot-loop start kernel of a case folder.

    python3 bench/gemm_probe.py --out probe.json [--cases bench/heldout] [--only a,b] [--grid N]
        [--variants plain,grouped,tma,tma-grouped,persistent,persistent-flat] [--points 0,4,12] [--host] [--dry]

On a GPU machine. For every case under `--cases` whose start kernel reduces with `tl.dot` in a
loop (found by role, `passes.triton.roles`), two variants of the start kernel are written with
the project's own rewrites: "plain" (the start kernel autotuned over a wide grid of joint tile /
warp / stage configurations, `sweep_edit`, untied first where one constexpr serves several
roles) and "grouped" (the same after the `grouped-ordering` rule); "tma" reads the dot loop's
tiles (and the output tile) through tensor descriptors, "tma-grouped" then groups; "persistent"
composes the rewrites into the expert's structure (grouped order, a persistent grid, then
descriptors built once per program), "persistent-flat" puts the descriptors first so that the
persistent tile loop over descriptor loads is flattened into the K loop (declarations that read
nothing a tile computes stay before the loop). `--dry` (any machine) only writes the variants and reports each one's structure. Each variant is imported, its
autotuner times every configuration (Triton's `do_bench`, L2 flushed), and then the variant's
`run` and the case's reference are timed with `triton.testing.do_bench` (median) in this process.
Writes per case and variant: each configuration's time, the best configuration and best / the
reference. `--host` adds each variant's host time per `run` call (and the reference's): calls
issued back to back without a synchronization, and the functions that take it (cProfile). A
`run` whose host work outlasts the L2 flush `do_bench` issues before it is timed with that work
in it. This is a measurement of the configuration space, not an optimization run: no
verdict is taken and nothing is kept. It answers whether a case's gap to the vendor library is a
configuration the sweep does not propose, or a limit of the kernel's structure.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# (m, n, k, warps, stages): a wide grid for H100-class GPUs, large and small tiles, deep pipelines.
WIDE = (
    (128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (256, 128, 64, 8, 3), (256, 128, 64, 8, 4),
    (128, 128, 64, 4, 4), (128, 128, 64, 8, 4), (128, 128, 64, 4, 5), (128, 128, 128, 8, 3),
    (64, 256, 64, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (64, 128, 64, 4, 5),
    (64, 64, 64, 4, 4), (128, 256, 32, 8, 4), (64, 128, 32, 4, 6), (128, 128, 32, 4, 5),
)


def _load(source: str, where: Path, stem: str):
    path = where / f"{stem}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A variant is the project's rewrites applied in order: (pass, detail key of the site, options).
GROUPED = ("grouped-ordering", None, {})
TMA = ("tma-descriptors", "operands", {})
RECIPES: dict[str, tuple[tuple[str, str | None, dict], ...]] = {
    "plain": (),
    "grouped": (GROUPED,),
    "tma": (TMA,),
    "tma-grouped": (TMA, GROUPED),
    # descriptors after the persistent loop: built once per program, the loop not flattened
    "persistent": (GROUPED, ("persistent-grid", "role", {}), TMA),
    # descriptors first: the loop over descriptor loads is flattened, declarations kept before it
    "persistent-flat": (GROUPED, TMA, ("persistent-grid", "role", {})),
}


def _rule(ir, pass_name: str, detail_key: str | None = None, options: dict | None = None):
    """`ir` after the pass's first open site (with `detail_key` in its detail), or a reason."""
    from passes import get_pass

    p = get_pass(pass_name)(**(options or {}))
    sites = [s for s in p.sites(ir) if not s.present and (detail_key is None or detail_key in s.detail)]
    if not sites:
        return f"no open {pass_name} site"
    made = p.optimize(ir, sites[0])
    return made.ir if hasattr(made, "ir") and made.ir is not None else f"{pass_name}: {made}"


def composed(source: str, name: str):
    """The start kernel `source` after variant `name`'s rewrites (`RECIPES`), or a reason."""
    import kir

    ir = kir.parse(source, language="triton")
    for pass_name, key, options in RECIPES[name]:
        ir = _rule(ir, pass_name, key, options)
        if isinstance(ir, str):
            break
    return ir


def variants(source: str, grid: int | list[int], names: list[str]) -> dict[str, tuple[str, str] | str]:
    """name -> (source, tuned kernel) or a refusal reason; names are keys of `RECIPES`. `grid`:
    the first `grid` points of `WIDE`, or a list of their indices."""
    import kir
    from lineage.transfer import untied_for
    from passes.triton.roles import SweepRefusal, joint_config, sweep_edit

    configs = [{"m": m, "n": n, "k": k, "group": 8, "num_warps": w, "num_stages": s}
               for m, n, k, w, s in (WIDE[:grid] if isinstance(grid, int) else [WIDE[i] for i in grid])]
    out: dict[str, tuple[str, str] | str] = {}
    bases = {}
    for name in names:
        ir = composed(source, name)
        if isinstance(ir, str):
            out[name] = ir
        else:
            bases[name] = ir
    for name, ir in bases.items():
        dots = [k for k, cfg in joint_config(ir).items() if cfg.dot]
        if not dots:
            out[name] = "no dot-loop kernel"
            continue
        kernel = dots[0]
        work = untied_for(ir, kernel, configs)
        made = sweep_edit(work, kernel, configs)
        if isinstance(made, SweepRefusal):
            out[name] = f"sweep refused: {made.reason}"
            continue
        edits, _ = made
        new = work.apply(kir.Edit(kir.Span(e.start, e.end), e.text) for e in edits)
        out[name] = (new.text, kernel)
    return out


def host_time(fn, calls: int = 200) -> dict:
    """Host microseconds per `fn()` issued back to back (no synchronization between calls), and
    the ten functions with the most own time under cProfile."""
    import cProfile
    import io
    import pstats

    import torch

    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    us = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(10)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()][-10:]
    return {"host_us": round(us, 2), "profile": lines}


def probe_case(case, grid: int, where: Path, names: list[str], host: bool = False) -> dict:
    import torch
    import triton.testing

    rec: dict = {"op": case.name, "ref": case.ref, "variants": {}}
    module = case.module()
    shape = dict(next(iter(case.shapes.values())))
    inputs = module.make_inputs(shape, 1234, "cuda")
    torch.cuda.synchronize()
    rec["shape"] = shape
    rec["reference_ms"] = triton.testing.do_bench(lambda: module.reference(*inputs), warmup=25, rep=100,
                                                  return_mode="median")
    if host:
        rec["reference_host"] = host_time(lambda: module.reference(*inputs))
    start = case.start_path().read_text()
    for vname, made in variants(start, grid, names).items():
        if isinstance(made, str):
            rec["variants"][vname] = {"refused": made}
            continue
        text, kernel = made
        t0 = time.monotonic()
        try:
            mod = _load(text, where, f"probe_{case.name}_{vname}")
            out = mod.run(*inputs)
            ref = module.reference(*inputs)
            err = float((out.float() - ref.float()).abs().max())
            ms = triton.testing.do_bench(lambda: mod.run(*inputs), warmup=25, rep=100, return_mode="median")
            host_rec = host_time(lambda: mod.run(*inputs)) if host else None
        except Exception as exc:  # one variant's failure is a row, not the end of the probe
            rec["variants"][vname] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
            continue
        tuner = getattr(mod, kernel)
        timings = getattr(tuner, "configs_timings", None) or {}
        table = sorted(((str(c), (t[0] if isinstance(t, (list, tuple)) else t)) for c, t in timings.items()),
                       key=lambda p: p[1])
        best_cfg = str(getattr(tuner, "best_config", ""))
        rec["variants"][vname] = {"ms": ms, "x_ref": rec["reference_ms"] / ms, "max_abs_err": err,
                                  "best_config": best_cfg, "configs": table, "seconds": round(time.monotonic() - t0, 1)}
        if host_rec:
            rec["variants"][vname]["host"] = host_rec
        print(f"{case.name:14s} {vname:8s} {ms:.4f} ms  x/ref {rec['reference_ms'] / ms:.3f}  {best_cfg}", flush=True)
    return rec


def dry_case(case, grid: int, names: list[str]) -> dict:
    """The variants of a case's start kernel written (no GPU, nothing run): per variant the
    refusal, or the structure it has (a persistent tile loop, flattened, a descriptor store)."""
    rec: dict = {"op": case.name, "ref": case.ref, "variants": {}}
    for vname, made in variants(case.start_path().read_text(), grid, names).items():
        if isinstance(made, str):
            rec["variants"][vname] = {"refused": made}
            continue
        text = made[0]
        rec["variants"][vname] = {"persistent": "tl.num_programs(0)" in text,
                                  "flattened": "flatten=True" in text,
                                  "descriptor_loads": text.count("_desc.load(["),
                                  "descriptor_store": "_desc.store([" in text}
        print(f"{case.name:14s} {vname:18s} {rec['variants'][vname]}", flush=True)
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default="bench/heldout")
    ap.add_argument("--only", default="")
    ap.add_argument("--grid", type=int, default=len(WIDE))
    ap.add_argument("--points", default="", help="indices into WIDE (overrides --grid)")
    ap.add_argument("--variants", default="plain,grouped")
    ap.add_argument("--dry", action="store_true", help="write the variants only (no GPU)")
    ap.add_argument("--host", action="store_true", help="also time each run call's host work")
    args = ap.parse_args()
    import gate
    import kir
    from gate.cases import find_cases
    from passes.triton.roles import joint_config

    found = [gate.load_case(p) for p in find_cases([ROOT / args.cases])]
    only = {s for s in args.only.split(",") if s}
    grid = [int(i) for i in args.points.split(",")] if args.points else args.grid
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in found:
            if only and case.name not in only:
                continue
            start = case.start_path()
            if start is None or not start.is_file():
                continue
            cfgs = joint_config(kir.parse(start.read_text(), language="triton"))
            if not any(c.dot for c in cfgs.values()):
                continue
            try:
                probe = dry_case if args.dry else functools.partial(probe_case, where=Path(tmp), host=args.host)
                records.append(probe(case, grid, names=args.variants.split(",")))
            except Exception as exc:
                records.append({"op": case.name, "error": f"{type(exc).__name__}: {exc}"[:400]})
            Path(args.out).write_text(json.dumps(records, indent=1))
    for r in records:
        row = {v: round(d.get("x_ref", 0), 3) for v, d in r.get("variants", {}).items() if "x_ref" in d}
        print(r["op"], row, r.get("error", ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
