"""`klineage gate KERNEL --case NAME`: run the compile / correctness / profile gate on a kernel."""
from __future__ import annotations

import sys

import click

from lineage.commands._common import emit_json, kernel_text


def _summary(verdict: object) -> str:
    v = verdict.to_json()  # type: ignore[attr-defined]
    head = f"{'OK' if v['ok'] else 'REJECTED'}  tier={v['tier']}  stage={v['stage']}"
    lines = [head]
    if not v["ok"]:
        lines.append(f"  {v['failure_kind']}: {v['reason']}")
    if "facts" in v:
        lines += _facts_lines(v["facts"])
    if "correctness" in v:
        c = v["correctness"]
        lines.append(f"  correctness: seeds {c['seeds']}, max relative error {c['max_rel_err']}")
    if "timing" in v:
        t = v["timing"]
        lines.append(f"  timing: candidate {t['candidate_ms']:.4f} ms, reference {t['reference_ms']:.4f} ms, "
                     f"speedup {t['speedup']}")
        shares = verdict.timing.kernel_shares()  # type: ignore[attr-defined]
        if shares:
            lines.append("  kernels (share of the candidate's GPU time): " + ", ".join(
                f"{name} {share:.0%}" for name, share in sorted(shares.items(), key=lambda x: -x[1])))
    lines += [f"  flag: {flag}" for flag in v.get("flags", [])]
    if getattr(verdict, "cached", False):
        lines.append("  (cached verdict)")
    return "\n".join(lines)


def _facts_lines(f: dict) -> list[str]:
    props = f.get("target_properties") or {}
    target = f["target"]
    if props:
        target += (f" ({props['sm_count']} SMs, {props['shared_memory_per_block_optin']} B shared "
                   f"memory per block)")
    lines = [f"  facts: {len(f['compiles'])} compiles for {target}, max registers "
             f"{f['max_registers']}, spills {'yes' if f['spills'] else 'no'}, instructions: "
             f"{', '.join(f['instruction_classes']) or '-'}"]
    known = [c for c in f["compiles"] if c.get("shared_bytes") is not None]
    if known:
        top = max(known, key=lambda c: c["shared_bytes"])
        lines.append(f"  shared memory: max {top['shared_bytes']} B per block ({top['kernel']}: "
                     f"static {top['static_shared_bytes']} B + dynamic "
                     f"{top['dynamic_shared_bytes']} B, {top['dynamic_shared_source']})")
    else:
        lines.append("  shared memory: unknown (no compile's dynamic shared memory is known)")
    if f.get("dynamic_shared_unknown"):
        lines.append("  shared memory: dynamic: unknown for "
                     + ", ".join(f["dynamic_shared_unknown"]))
    idle = sorted({c["kernel"] for c in f["compiles"]
                   if c.get("dynamic_shared_source") == "not_launched"})
    if idle:
        lines.append(f"  shared memory: dynamic: not launched on the target: {', '.join(idle)}")
    if f.get("over_shared_limit"):
        lines.append(f"  shared memory: {f['over_shared_limit']} compiles need more than the "
                     f"target's {props.get('shared_memory_per_block_optin')} B per block "
                     f"(they would not launch)")
    return lines


def verdict_json(verdict: object) -> dict:
    """The verdict's JSON with `"cached"`; a cached verdict carries no `"phases"`: they timed
    the run that made it, not this one."""
    data = verdict.to_json()  # type: ignore[attr-defined]
    data["cached"] = bool(getattr(verdict, "cached", False))
    if data["cached"]:
        data.pop("phases", None)
    return data


@click.command("gate")
@click.argument("kernel", type=click.Path(dir_okay=False))
@click.option("--case", "case", default=None, help="Case: a name under experts/, a case folder or its case.py, or a KernelBench problem file (see `klineage cases`). Default: the case beside the kernel (a case.py in its folder, or <stem>.py beside <stem>_triton.py).")
@click.option("--tier", type=click.Choice(["static", "interpret", "emulate", "device", "auto"]), default="auto",
              show_default=True, help="How far to gate (auto: device on a GPU, else interpret).")
@click.option("--timeout", type=click.FloatRange(0, None, min_open=True), default=None,
              help="Seconds the candidate may run (default 300).")
@click.option("--no-cache", is_flag=True, help="Recompute even when a verdict is cached.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
def command(kernel: str, case: str, tier: str, timeout: float | None, no_cache: bool, as_json: bool) -> None:
    """Gate KERNEL (a Triton .py; a CUDA .cu with its host .py beside it, or that host; or a
    Python host holding its CUDA source: a load_inline ModelNew, a CuPy RawKernel) against a case.

    Exit code 0 when the kernel passes, 1 when it is rejected, 2 for bad input.

    JSON: {"ok", "tier", "stage", "failure_kind", "reason", "facts": {"target",
    "target_properties": {"sm_count", "warp_size", "shared_memory_per_block_optin", ...},
    "max_registers", "max_shared_bytes", "dynamic_shared_unknown", "over_shared_limit", "spills",
    "instruction_classes", "compiles": [{"kernel", "config", "registers", "shared_bytes",
    "static_shared_bytes", "dynamic_shared_bytes", "dynamic_shared_source", "local_bytes",
    "spill_stores", "spill_loads", "instructions", "sass", "compile_s"}]}, "correctness":
    {"seeds", "max_rel_err", "results": [{"variant", "seed", "phase", "rel_err"}]}, "timing":
    {"candidate_ms", "reference_ms",
    "speedup", "variants": [{"variant", "candidate_ms", "reference_ms", "speedup", "kernels":
    {function name: GPU ms per call}}]}, "flags": [...], "phases": {"spawn": s, "start-up": s, ...},
    "cached": bool}; facts, correctness and timing are absent where the tier did not reach them;
    phases (wall seconds of the gate's phases, in run order) where a worker ran now (a cached
    verdict, "cached": true, has none); failure_kind and reason are null when ok. A compile's
    "shared_bytes" is static + dynamic; "dynamic_shared_bytes" is null where unknown (see
    docs/INTERFACES.md for "dynamic_shared_source"); "target_properties" are the device
    properties the static tier answered host code's queries with.
    """
    import gate

    kernel_text(kernel)  # a missing, blank or non-text file is bad input, not a rejection
    case = case or gate.case_beside(kernel)
    verdict = gate.check_file(kernel, case, tier, timeout=timeout, cache=not no_cache)
    if as_json:
        emit_json(verdict_json(verdict))
    else:
        click.echo(_summary(verdict))
    sys.exit(0 if verdict.ok else 1)
