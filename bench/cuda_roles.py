"""Which CUDA roles and role-based forward rules fire on each kernel, and whether each rule's
output passes the gate.

    python3 bench/cuda_roles.py [DIR ...] --out OUT [--tier static|emulate|device] [--rules R,...]
        [--jobs N] [--json]

DIR: kernel folders holding a `case.py` and a CUDA start (a `.cu` with its host `.py`, or a
host module holding its source); default: every folder of bench/styles/cuda. For each kernel:
the roles `passes.cuda.recognize` finds (stagings by form, GEMM micro-kernels with their tiles,
reduction trees, stride loops, the launch block, refusals with reasons), then each rule
(`row-cache`, `warp-shuffle-reduce`, `cp-async-pipeline`, `vectorize-global`, `launch-bounds`,
`pragma-unroll`, `mma-micro-kernel`; --rules: some of them, and `row-registers`, `launch-threads`,
`restrict-readonly`, `gemm-schedule`, with options, in the order given)
applied at every open site it takes (its refusals kept), and the result gated at --tier
against the folder's case (static: NVRTC for sm_90a; emulate: the CPU emulation at the case's
small shapes; device: the GPU, where the start is timed too and each output's time is set
against it and against a copy of the case's `bytes_moved` timed in this process); "all of the
above" gates the start with every rule that passed alone applied one after another. --jobs:
gates of one kernel at once (builds side by side; at the device tier each timed section takes
the GPU's lock, `gate.gpulock`, and so does the copy). Writes
OUT/cuda_roles.json and OUT/cuda_roles.md; --json prints the JSON. Progress goes to stderr.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RULES = ("row-cache", "warp-shuffle-reduce", "cp-async-pipeline", "vectorize-global",
         "launch-bounds", "pragma-unroll", "mma-micro-kernel")
MORE_RULES = ("row-registers", "launch-threads", "restrict-readonly", "gemm-schedule")
"""Role-based rules --rules may also name (not in the default list)."""
MAX_SITES = 8


def _start(folder: Path) -> Path | None:
    """The CUDA start of a kernel folder: its `.cu`, else a host module holding the source."""
    from kir.embedded import cuda_unit  # noqa: PLC0415

    cus = sorted(folder.glob("*.cu"))
    if cus:
        return cus[0]
    for p in sorted(folder.glob("*.py")):
        if p.name != "case.py" and cuda_unit(p) is not None:
            return p
    return None


def _apply(name: str, ir: Any, ctx: Any) -> tuple[Any, int, list[str]]:
    """The IR after the rule acted at each open site it takes, the count, its refusals."""
    from passes import Applied, get_pass  # noqa: PLC0415
    from passes.base import parse_pass_spec  # noqa: PLC0415

    base, options = parse_pass_spec(name)
    the_pass = get_pass(base).from_options(options)
    applied, refusals = 0, []
    for _ in range(MAX_SITES):
        taken = False
        for site in [s for s in the_pass.sites(ir) if not s.present]:
            result = the_pass.optimize(ir, site, ctx)
            if isinstance(result, Applied):
                ir, applied, taken = result.ir, applied + 1, True
                break
            why = getattr(result, "reason", None) or getattr(result, "error", "")
            if why not in refusals:
                refusals.append(why)
        if not taken:
            break
    return ir, applied, refusals


def kernel_report(folder: Path, tier: str, rule_names: tuple[str, ...] = RULES,
                  jobs: int = 1) -> dict[str, Any]:
    """Roles, rules (`rule_names`, in that order) and verdicts of one kernel folder; `jobs`
    gates at once (each gate is its own process: builds run side by side, the device tier's
    timed sections take the GPU's lock one at a time)."""
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    import gate  # noqa: PLC0415
    import kir  # noqa: PLC0415
    from kir.embedded import cuda_unit  # noqa: PLC0415
    from passes import PassContext  # noqa: PLC0415
    from passes.cuda import recognize  # noqa: PLC0415

    start = _start(folder)
    if start is None:
        return {"kernel": folder.name, "error": "no CUDA start in the folder"}
    unit = cuda_unit(start)
    ir = kir.parse(unit.source, "cuda", path=unit.source_path)  # the host beside it: launches
    roles = recognize.roles(ir)
    launch = recognize.launch_block(ir, host=unit.host_path.read_text())
    roles["launch"] = {"block": list(launch.dims) if launch.dims else None, "from": launch.where,
                       "reason": launch.reason}
    facts: dict[str, Any] = {"arch": "sm_90"}
    if launch.threads:
        facts["block_threads"] = launch.threads
    ctx = PassContext(facts=facts)

    def check(text: str) -> dict[str, Any]:
        return _verdict(gate.check(text, "cuda", folder, tier, path=unit.source_path,
                                   host=unit.host_path, cache=False))

    def combine(names: list[str]) -> tuple[Any, int]:
        combined, total = ir, 0
        for name in names:
            combined, more, _ = _apply(name, combined, ctx)
            total += more
        return combined, total

    rules: dict[str, dict[str, Any]] = {}
    outputs: dict[str, Any] = {}
    for name in rule_names:
        new_ir, count, refusals = _apply(name, ir, ctx)
        rules[name] = {"applied": count, "refusals": refusals}
        if count:
            outputs[name] = new_ir
    applied = [n for n in rule_names if n in outputs]
    # the start, each rule's output and (guessing every rule passes alone) all of them at once
    combined, total = combine(applied)
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        start_job = pool.submit(check, ir.text) if tier == "device" else None
        pending = {n: pool.submit(check, outputs[n].text) for n in applied}
        all_job = pool.submit(check, combined.text) if total and len(applied) > 1 else None
        for name in applied:
            rules[name]["verdict"] = pending[name].result()
            print(f"[cuda_roles] {folder.name} {name}: applied {rules[name]['applied']}, gate "
                  + ("ok" if rules[name]["verdict"]["ok"] else rules[name]["verdict"]["reason"][:80]),
                  file=sys.stderr)
        start_verdict = start_job.result() if start_job is not None else None
        passed = [n for n in applied if rules[n]["verdict"]["ok"]]
        if passed != applied:  # the rules that passed alone, one after another
            combined, total = combine(passed)
            all_job = pool.submit(check, combined.text) if total and len(passed) > 1 else None
        if all_job is not None:
            rules["all of the above"] = {"applied": total, "refusals": [],
                                         "verdict": all_job.result()}
    for name in rule_names:
        if not rules[name]["applied"]:
            print(f"[cuda_roles] {folder.name} {name}: applied 0", file=sys.stderr)
    return {"kernel": folder.name, "start": str(start.relative_to(ROOT) if start.is_relative_to(ROOT)
                                                   else start), "roles": _summary(roles),
            "rules": rules, "start_verdict": start_verdict,
            "bandwidth": _copy_bandwidth(folder) if tier == "device" else None}


def _copy_bandwidth(folder: Path) -> dict[str, Any] | None:
    """A device copy of the case's `bytes_moved` (half read, half written) timed in this process
    the way bench/heldout.py times it: the bandwidth a memory-bound kernel is set against."""
    import importlib.util  # noqa: PLC0415

    import torch  # noqa: PLC0415
    from triton.testing import do_bench  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location(f"case_{folder.name}", folder / "case.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "bytes_moved"):
        return None
    nbytes = int(module.bytes_moved(dict(next(iter(module.SHAPES.values())))))
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    from gate import gpulock  # noqa: PLC0415

    with gpulock.for_current_device(torch).exclusive():  # no gate's kernels run meanwhile
        ms = float(do_bench(lambda: dst.copy_(src), warmup=25, rep=100, return_mode="median"))
    return {"bytes": nbytes, "copy_ms": ms, "copy_tbs": nbytes / ms * 1e-9}


def _verdict(verdict: Any) -> dict[str, Any]:
    """The verdict's outcome, and at the device tier the candidate's and the reference's ms."""
    out: dict[str, Any] = {"ok": bool(verdict.ok), "stage": str(verdict.stage),
                           "reason": str(verdict.reason or "")[:300]}
    timing = getattr(verdict, "timing", None)
    if timing is not None:
        out["ms"] = timing.candidate_ms
        out["reference_ms"] = timing.reference_ms
    return out


def _summary(roles: dict[str, Any]) -> dict[str, Any]:
    return {
        "launch": roles["launch"],
        "stagings": [f"{s['array']}:{s['form']}" + (" (converts)" if s.get("converted") else "")
                     for s in roles["stagings"]],
        "micro_kernels": [{"block_tile": m["block_tile"], "thread_tile": m["thread_tile"],
                           "layouts": [m["a"]["layout"], m["b"]["layout"]],
                           "element": m["element"], "warp_tile": m["warp_tile"]}
                          for m in roles["micro_kernels"]],
        "reduction_trees": [f"{t['form']} {'+'.join(c['op'] for c in t['combines'])} over "
                            f"{t['extent']}" for t in roles["reduction_trees"]],
        "stride_loops": [s["kind"] for s in roles["stride_loops"]],
        "row_reductions": [f"{r['op']} ({r['combine']})" for r in roles["row_reductions"]],
        "refusals": [f"{r['role']}: {r['reason']}" for r in roles["refusals"]],
    }


def _outcome(verdict: dict[str, Any], start: dict[str, Any] | None,
             bandwidth: dict[str, Any] | None = None) -> str:
    if not verdict["ok"]:
        return "FAIL: " + verdict["reason"][:60]
    if start and start.get("ms") and verdict.get("ms"):
        copy = f", {bandwidth['copy_ms'] / verdict['ms']:.2f} of copy" if bandwidth else ""
        return f"ok, {verdict['ms']:.4g} ms, {start['ms'] / verdict['ms']:.2f}x the start{copy}"
    return "ok"


def _markdown(rows: list[dict[str, Any]], tier: str) -> str:
    lines = [f"# CUDA roles and role-based rules on each kernel (gate tier: {tier})", "",
             "| kernel | launch block | roles | rules applied (gate) | refusals |",
             "|---|---|---|---|---|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['kernel']} | | {row['error']} | | |")
            continue
        r = row["roles"]
        roles = []
        roles += [f"staging {s}" for s in r["stagings"]]
        roles += [f"micro-kernel {m['block_tile']} thread {m['thread_tile']} {m['element']}"
                  for m in r["micro_kernels"]]
        roles += [f"tree {t}" for t in r["reduction_trees"]]
        roles += [f"{k}-stride loop" for k in r["stride_loops"]]
        bandwidth = row.get("bandwidth")
        applied = [f"{n} x{e['applied']} ({_outcome(e['verdict'], row.get('start_verdict'), bandwidth)})"
                   for n, e in row["rules"].items() if e["applied"]]
        start = row.get("start_verdict") or {}
        if bandwidth and start.get("ms"):
            applied.insert(0, f"start {start['ms']:.4g} ms, {bandwidth['copy_ms'] / start['ms']:.2f} "
                              f"of copy ({bandwidth['copy_tbs']:.2f} TB/s)")
        refused = sorted({f"{n}: {why}" for n, e in row["rules"].items() if not e["applied"]
                          for why in e["refusals"][:1]} | set(r["refusals"][:2]))
        block = r["launch"]["block"] or r["launch"]["reason"]
        lines.append(f"| {row['kernel']} | {block} | {'; '.join(roles) or '-'} | "
                     f"{'; '.join(applied) or '-'} | {'; '.join(refused) or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="*", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tier", default="static", choices=("static", "emulate", "device"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--jobs", type=int, default=1,
                        help="gates of one kernel at once (each its own process; default 1)")
    parser.add_argument("--rules", default="",
                        help="comma-separated rules to apply, each a name or a spec such as "
                             "'vectorize-global{ahead=1}' (default: all)")
    args = parser.parse_args(argv)
    rules = tuple(r for r in args.rules.split(",") if r) or RULES
    if args.jobs < 1:
        print("error: --jobs must be positive", file=sys.stderr)
        return 2
    unknown = sorted({r.split("{")[0] for r in rules} - set(RULES) - set(MORE_RULES))
    if unknown:
        print(f"error: unknown rule {unknown[0]} (one of {', '.join(RULES + MORE_RULES)})", file=sys.stderr)
        return 2
    dirs = args.dirs or sorted(p for p in (ROOT / "bench" / "styles" / "cuda").iterdir() if p.is_dir())
    for d in dirs:
        if not (d / "case.py").is_file():
            print(f"error: {d}: no case.py in the kernel folder", file=sys.stderr)
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for d in dirs:  # written after each kernel: a run cut short keeps what it measured
        rows.append(kernel_report(d.resolve(), args.tier, rules, args.jobs))
        data = {"tier": args.tier, "kernels": rows}
        (args.out / "cuda_roles.json").write_text(json.dumps(data, indent=1) + "\n")
        (args.out / "cuda_roles.md").write_text(_markdown(rows, args.tier))
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        print(_markdown(rows, args.tier))
    return 0


if __name__ == "__main__":
    sys.exit(main())
