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
        f = v["facts"]
        lines.append(f"  facts: {len(f['compiles'])} compiles for {f['target']}, max registers "
                     f"{f['max_registers']}, max shared {f['max_shared_bytes']} B, spills "
                     f"{'yes' if f['spills'] else 'no'}, instructions: "
                     f"{', '.join(f['instruction_classes']) or '-'}")
    if "correctness" in v:
        c = v["correctness"]
        lines.append(f"  correctness: seeds {c['seeds']}, max relative error {c['max_rel_err']}")
    if "timing" in v:
        t = v["timing"]
        lines.append(f"  timing: candidate {t['candidate_ms']:.4f} ms, reference {t['reference_ms']:.4f} ms, "
                     f"speedup {t['speedup']}")
    lines += [f"  flag: {flag}" for flag in v.get("flags", [])]
    if getattr(verdict, "cached", False):
        lines.append("  (cached verdict)")
    return "\n".join(lines)


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
@click.option("--case", "case", required=True, help="Case: a name under experts/, a case folder or its case.py, or a KernelBench problem file (see `klineage cases`).")
@click.option("--tier", type=click.Choice(["static", "interpret", "device", "auto"]), default="auto",
              show_default=True, help="How far to gate (auto: device on a GPU, else interpret).")
@click.option("--timeout", type=click.FloatRange(0, None, min_open=True), default=None,
              help="Seconds the candidate may run (default 300).")
@click.option("--no-cache", is_flag=True, help="Recompute even when a verdict is cached.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
def command(kernel: str, case: str, tier: str, timeout: float | None, no_cache: bool, as_json: bool) -> None:
    """Gate KERNEL (a Triton .py, or a CUDA .cu with its host .py beside it) against a case.

    Exit code 0 when the kernel passes, 1 when it is rejected, 2 for bad input.

    JSON: {"ok", "tier", "stage", "failure_kind", "reason", "facts": {"target",
    "max_registers", "max_shared_bytes", "spills", "instruction_classes", "compiles": [{"kernel",
    "config", "registers", "shared_bytes", "local_bytes", "spill_stores", "spill_loads",
    "instructions", "sass", "compile_s"}]}, "correctness": {"seeds", "max_rel_err", "results":
    [{"variant", "seed", "phase", "rel_err"}]}, "timing": {"candidate_ms", "reference_ms",
    "speedup", "variants": [...]}, "flags": [...], "phases": {"spawn": s, "start-up": s, ...},
    "cached": bool}; facts, correctness and timing are absent where the tier did not reach them;
    phases (wall seconds of the gate's phases, in run order) where a worker ran now (a cached
    verdict, "cached": true, has none); failure_kind and reason are null when ok.
    """
    import gate

    kernel_text(kernel)  # a missing, blank or non-text file is bad input, not a rejection
    verdict = gate.check_file(kernel, case, tier, timeout=timeout, cache=not no_cache)
    if as_json:
        emit_json(verdict_json(verdict))
    else:
        click.echo(_summary(verdict))
    sys.exit(0 if verdict.ok else 1)
