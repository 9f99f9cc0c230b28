"""`klineage bench`: the expert kernels against their vendor references, on the GPU.

Each expert of each selected case goes through the gate's device tier (correctness at three
seeds, then `do_bench` medians of expert and reference in one worker process). A case's
variants are its gate shapes (`SHAPES`) and its benchmark-only shapes (`BENCH_SHAPES`, e.g. a
paper's workload, too slow for every gate); each set is one gate run, so the gate shapes are
timed exactly as the gate times them. Every row gets two floors from the GPU's measured
ceilings: FLOPs over the bf16 matrix rate (cuBLAS at 8192^3) and bytes over the
device-to-device copy bandwidth; the floor is the larger one.

Every row says which back-end its reference ran: the one the case's REFERENCE_NAME names
("vendor"), or a fallback the case's reference announced with a warning starting "fallback:"
(the gate's flag `reference (<variant>): fallback: ...`). A fallback row, and every row of a
case whose module sets HEADLINE_EXCLUDED (why its figure is not a fair headline), stays in the
table and is left out of the headline geometric mean, with the reason.
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from kir.errors import BadInputError, KLineageError
from lineage.commands._common import emit_json, output_dir

# Used only when the ceilings cannot be measured (figures measured on this project's GPUs).
NOMINAL_CEILINGS = {"matrix_tflops": 790.0, "copy_tbs": 3.0}
# The gate's flag for a reference that announced a fallback (see the module docstring).
FALLBACK_FLAG = re.compile(r"^reference \([^)]*\): fallback: (?P<why>.*)$")


@dataclass(frozen=True, slots=True)
class BenchRow:
    """One (case, shape variant, expert) measurement. Times in ms; None where not reached.
    `bench_only`: the variant is one of the case's BENCH_SHAPES; `notes`: the verdict's flags
    (e.g. the reference's fallback from its named back-end); `reference_backend`: "vendor: NAME"
    or "fallback: WHY"; `excluded`: why the row is left out of the headline geometric mean
    (None: it counts)."""

    case: str
    variant: str
    expert: str
    language: str
    ok: bool
    expert_ms: float | None
    reference_ms: float | None
    speedup: float | None
    flop_floor_ms: float
    byte_floor_ms: float
    floor_ms: float
    fraction_of_floor: float | None
    reason: str | None
    shape: dict[str, Any] = field(default_factory=dict)
    bench_only: bool = False
    notes: tuple[str, ...] = ()
    reference_backend: str = ""
    excluded: str | None = None
    reference_tf32_ms: float | None = None
    """fp32 cases: the reference timed in the same worker with TF32 allowed (the baseline a user
    picks when fp32 precision is not needed); `speedup_tf32` is it over the expert's time."""
    speedup_tf32: float | None = None


def reference_backend(module: Any, notes: Sequence[str]) -> tuple[str, str | None]:
    """(reference_backend, excluded) of a case's rows from its verdict's flags: a fallback
    the reference announced, else the back-end REFERENCE_NAME names; excluded for a fallback or
    the case's HEADLINE_EXCLUDED."""
    fallback = next((m["why"] for n in notes if (m := FALLBACK_FLAG.match(n))), None)
    if fallback is not None:
        return f"fallback: {fallback}", f"its reference ran a fallback, not {module.REFERENCE_NAME}"
    declared = getattr(module, "HEADLINE_EXCLUDED", None)
    return f"vendor: {module.REFERENCE_NAME}", str(declared) if declared else None


def _gpu_visible() -> bool:
    """A CUDA GPU torch can use (KLINEAGE_GATE_NO_GPU=1 hides it, as it does from the gate)."""
    if os.environ.get("KLINEAGE_GATE_NO_GPU") == "1":
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def measure_ceilings() -> dict[str, float]:
    """bf16 dense matrix rate (TFLOP/s, cuBLAS 8192^3 on random data) and copy bandwidth
    (TB/s, bytes read plus written) of the current GPU, medians of `do_bench`."""
    import torch
    import triton.testing

    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = triton.testing.do_bench(lambda: torch.matmul(a, b), warmup=50, rep=200, return_mode="median")
    tflops = 2 * n**3 / (ms * 1e-3) / 1e12
    del a, b
    x = torch.randn(512 * 1024 * 1024, device="cuda")  # 2 GiB of fp32
    y = torch.empty_like(x)
    ms = triton.testing.do_bench(lambda: y.copy_(x), warmup=20, rep=100, return_mode="median")
    tbs = 2 * x.numel() * 4 / (ms * 1e-3) / 1e12
    del x, y
    torch.cuda.empty_cache()
    return {"matrix_tflops": tflops, "copy_tbs": tbs}


def floors_ms(module: Any, shape: dict[str, Any], ceilings: dict[str, float]) -> tuple[float, float]:
    """(FLOP floor, byte floor) in ms of one shape, from the case module's flops/bytes_moved."""
    flop = float(module.flops(shape)) / (ceilings["matrix_tflops"] * 1e12) * 1e3
    byte = float(module.bytes_moved(shape)) / (ceilings["copy_tbs"] * 1e12) * 1e3
    return flop, byte


SHAPE_SETS = ("gate", "bench")


def variant_runs(case: Any, wanted: Sequence[str] = (),
                 sets: Sequence[str] = SHAPE_SETS) -> list[Any]:
    """The gate runs that bench `case`: its gate variants (the case itself when all of them are
    wanted), then its benchmark-only variants (a `Case.with_variants` view), of the shape
    `sets` named; with `wanted`, only the variants named there (names the case lacks are
    skipped). Empty when none is left."""
    runs = []
    for name, table in zip(SHAPE_SETS, (case.shapes, case.bench_shapes)):
        if name not in sets:
            continue
        names = [v for v in table if not wanted or v in wanted]
        if names:
            runs.append(case if list(names) == list(case.shapes) else case.with_variants(names))
    return runs


def plan_records(cases: Sequence[Any], wanted: Sequence[str] = (),
                 sets: Sequence[str] = SHAPE_SETS) -> list[dict[str, Any]]:
    """What a bench run times, per case and variant: {"case", "variant", "bench_only",
    "shape", "experts"} (the `--dry-run` JSON rows), in run order."""
    records = []
    for case in cases:
        experts = [p.name for p, _ in case.expert_paths()]
        for run in variant_runs(case, wanted, sets):
            for variant, shape in run.device_shapes.items():
                records.append({"case": case.name, "variant": variant,
                                "bench_only": variant in case.bench_shapes, "shape": dict(shape),
                                "experts": experts})
    return records


def rows_for_verdict(case: Any, expert: str, language: str, verdict: Any,
                     ceilings: dict[str, float]) -> list[BenchRow]:
    """One row per shape variant the device tier ran of `case` (a case or a
    `Case.with_variants` view) for one expert's device verdict."""
    module = case.module()
    timed = {}
    if verdict.timing is not None:
        timed = {v.variant: v for v in verdict.timing.variants}
    rows = []
    table = case.device_shapes
    notes = tuple(getattr(verdict, "flags", ()))
    backend, excluded = reference_backend(module, notes)
    for variant, shape in table.items():
        flop, byte = floors_ms(module, dict(shape), ceilings)
        floor = max(flop, byte)
        t = timed.get(variant)
        tf32 = getattr(t, "reference_tf32_ms", None)
        if t is None and verdict.timing is not None and len(table) == 1:
            t_ms, r_ms = verdict.timing.candidate_ms, verdict.timing.reference_ms
            tf32 = getattr(verdict.timing, "reference_tf32_ms", None)
        elif t is not None:
            t_ms, r_ms = t.candidate_ms, t.reference_ms
        else:
            t_ms = r_ms = None
        rows.append(BenchRow(
            case=case.name, variant=variant, expert=expert, language=language,
            ok=bool(verdict.ok), expert_ms=t_ms, reference_ms=r_ms,
            speedup=(r_ms / t_ms) if t_ms and r_ms else None,
            flop_floor_ms=flop, byte_floor_ms=byte, floor_ms=floor,
            fraction_of_floor=(floor / t_ms) if t_ms else None,
            reason=verdict.reason, shape=dict(shape), bench_only=variant in case.bench_shapes,
            notes=notes, reference_backend=backend, excluded=excluded,
            reference_tf32_ms=tf32, speedup_tf32=(tf32 / t_ms) if tf32 and t_ms else None))
    return rows


def geomean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def build_result(gpu: str, command: str, commands: list[str], ceilings: dict[str, float], source: str,
                 rows: list[BenchRow]) -> dict[str, Any]:
    """The documented JSON form of a bench run (see `command`'s help). The geometric mean is
    over the gate variants (benchmark-only rows would weigh their case twice) whose row is not
    `excluded` (a fallback reference, a case's HEADLINE_EXCLUDED)."""
    triton_speedups = [r.speedup for r in rows
                       if r.language == "triton" and r.speedup and not r.bench_only
                       and not r.excluded]
    return {
        "gpu": gpu, "command": command, "commands": commands,
        "ceilings": ceilings, "ceilings_source": source,
        "rows": [asdict(r) for r in rows],
        "geomean_triton_speedup": geomean(list(triton_speedups)),
        "triton_case_variants": len(triton_speedups),
        "excluded": [{"case": r.case, "variant": r.variant, "expert": r.expert, "why": r.excluded}
                     for r in rows if r.excluded and r.language == "triton" and not r.bench_only],
    }


def earlier_results(out_dir: Path, gpu: str,
                    replaced: set[tuple[str, str]]) -> tuple[list[BenchRow], list[str]]:
    """Rows of (case, variant) pairs not re-run now, from OUT/experts.json of an earlier run on
    the same GPU (so that benching one case or variant at a time builds up the full table),
    and that run's commands."""
    path = out_dir / "experts.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return [], []
    if not isinstance(data, dict) or data.get("gpu") != gpu:
        return [], []
    try:
        kept = [BenchRow(**{**r, "notes": tuple(r.get("notes", ()))}) for r in data.get("rows", [])
                if (r.get("case"), r.get("variant")) not in replaced]
    except TypeError:  # rows of another format: start afresh
        return [], []
    commands = data.get("commands") or ([data["command"]] if data.get("command") else [])
    return kept, [str(c) for c in commands] if kept else []


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table_lines(rows: list[BenchRow]) -> list[str]:
    """The results as a markdown table."""
    lines = ["| case | variant | expert | expert ms | reference ms | reference | speedup | x/ref_tf32 | floor ms | fraction of floor | ok |",
             "|---|---|---|---:|---:|---|---:|---:|---:|---:|---|"]
    for r in rows:
        variant = f"{r.variant} (bench only)" if r.bench_only else r.variant
        ref = "**FALLBACK**" if r.reference_backend.startswith("fallback:") else "vendor"
        speedup = _fmt(r.speedup, ".3f") + (" (not in the mean)" if r.excluded else "")
        lines.append(f"| {r.case} | {variant} | {r.expert} | {_fmt(r.expert_ms, '.4f')} | "
                     f"{_fmt(r.reference_ms, '.4f')} | {ref} | {speedup} | {_fmt(r.speedup_tf32, '.3f')} | {r.floor_ms:.4f} | "
                     f"{_fmt(r.fraction_of_floor, '.3f')} | {'yes' if r.ok else 'no: ' + (r.reason or '')[:80]} |")
    return lines


def excluded_lines(rows: list[BenchRow]) -> list[str]:
    """Why rows are left out of the geometric mean (one line per case, expert and reason)."""
    seen = dict.fromkeys((r.case, r.expert, r.reference_backend, r.excluded)
                         for r in rows if r.excluded)
    if not seen:
        return []
    return ["Left out of the geometric mean:", ""] + [
        f"- {case} / {expert}: {why}" + (f" (reference: {backend})"
                                         if backend.startswith("fallback:") else "")
        for case, expert, backend, why in seen] + [""]


def shape_lines(rows: list[BenchRow]) -> list[str]:
    """The shape of each (case, variant) in the rows, and the rows' notes, as markdown lists."""
    shapes = {(r.case, r.variant): r.shape for r in rows if r.shape}
    notes = {(r.case, r.expert, n) for r in rows for n in r.notes}
    lines = ["Shapes:", ""] if shapes else []
    lines += [f"- {c} / {v}: " + " ".join(f"{k}={x}" for k, x in s.items())
              for (c, v), s in shapes.items()]
    if notes:
        lines += ["", "Notes:", ""] + [f"- {c} / {e}: {n}" for c, e, n in sorted(notes)]
    return lines + [""] if lines else []


def write_results(out_dir: Path, result: dict[str, Any], rows: list[BenchRow]) -> None:
    """OUT/experts.json (the --json form) and OUT/experts.md (the table and how it was made)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / "experts.json.tmp"
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(tmp, out_dir / "experts.json")
    c = result["ceilings"]
    commands = result.get("commands") or [result["command"]]
    md = [f"# Expert kernels vs vendor references on {result['gpu']}", "",
          "Command" + ("s" if len(commands) > 1 else "") + ": " + "; ".join(f"`{c}`" for c in commands), "",
          f"Ceilings ({result['ceilings_source']}, latest run): bf16 matrix {c['matrix_tflops']:.0f} TFLOP/s, "
          f"copy {c['copy_tbs']:.2f} TB/s. Floor = max(FLOPs / matrix rate, bytes / copy bandwidth); "
          "fraction of floor = floor / expert time.", "",
          *table_lines(rows), "",
          f"Geometric mean speedup over the Triton case-variants: {_fmt(result['geomean_triton_speedup'], '.3f')}"
          f" ({result['triton_case_variants']} case-variants; bench-only variants left out).", "",
          *excluded_lines(rows), *shape_lines(rows)]
    (out_dir / "experts.md").write_text("\n".join(md))


@click.command("bench")
@click.option("--case", "case_name", default="all", show_default=True,
              help="A case name (see `klineage cases`) or 'all'.")
@click.option("--variant", "variants", multiple=True,
              help="Time only this shape variant (a SHAPES or BENCH_SHAPES name, e.g. "
                   "paper-noncausal); repeatable. Default: every variant of --shapes.")
@click.option("--shapes", "shape_set", type=click.Choice(["all", *SHAPE_SETS]), default="all",
              show_default=True,
              help="Which variants: the gate shapes (SHAPES), the benchmark-only ones "
                   "(BENCH_SHAPES), or all.")
@click.option("--out", "out_dir", default="out/bench", show_default=True,
              help="Folder for experts.json and experts.md (bench/results/experts.md is generated "
                   "from the results store: python3 bench/store.py ingest OUT/experts.json).")
@click.option("--nominal-ceilings", is_flag=True,
              help="Use nominal ceilings (790 TFLOP/s, 3.0 TB/s) instead of measuring them.")
@click.option("--timeout", type=click.FloatRange(0, None, min_open=True), default=None,
              help="Seconds per gate run (gate default if unset).")
@click.option("--fresh", is_flag=True,
              help="Drop the rows of other cases and variants already in OUT/experts.json "
                   "(kept by default).")
@click.option("--dry-run", is_flag=True,
              help="List the (case, variant, shape) rows a run would time, and exit "
                   "(no GPU needed).")
@click.option("--json", "as_json", is_flag=True, help="Print the documented JSON form.")
def command(case_name: str, variants: tuple[str, ...], shape_set: str, out_dir: str,
            nominal_ceilings: bool, timeout: float | None, fresh: bool, dry_run: bool,
            as_json: bool) -> None:
    """Benchmark every expert of CASE (or all cases) against its vendor reference on the GPU,
    at the case's gate shapes (SHAPES) and benchmark-only shapes (BENCH_SHAPES).

    Needs a CUDA GPU: without one it exits with code 2 (--dry-run excepted). Writes
    OUT/experts.json and OUT/experts.md; rows of (case, variant) pairs not benched now are kept
    from an earlier run on the same GPU (unless --fresh), so one case or variant per run builds
    the whole table. JSON: {"gpu", "command", "commands" (every run whose rows are in the table),
    "ceilings": {"matrix_tflops", "copy_tbs"}, "ceilings_source", "rows": [{"case", "variant",
    "expert", "language", "ok", "expert_ms", "reference_ms", "speedup", "flop_floor_ms",
    "byte_floor_ms", "floor_ms", "fraction_of_floor", "reason", "shape", "bench_only",
    "notes", "reference_backend" ("vendor: NAME" | "fallback: WHY"), "excluded" (why the row is
    not in the mean, or null), "reference_tf32_ms", "speedup_tf32" (fp32 cases: the reference
    timed with TF32 allowed, and it over the expert's time; else null)}],
    "geomean_triton_speedup" (over the Triton rows of gate variants
    that are not excluded: a fallback reference or a case's HEADLINE_EXCLUDED),
    "triton_case_variants", "excluded": [{"case", "variant", "expert", "why"}]}. With --dry-run: {"plan": [{"case", "variant", "bench_only",
    "shape", "experts"}]}.
    """
    import gate

    names = gate.list_cases() if case_name == "all" else [case_name]
    if case_name != "all" and case_name not in gate.list_cases():
        raise BadInputError(f"unknown case '{case_name}' (known: {', '.join(gate.list_cases())})")
    cases = [gate.load_case(name) for name in names]
    sets = SHAPE_SETS if shape_set == "all" else (shape_set,)
    if variants:
        known = {v for c in cases for v in [*c.shapes, *c.bench_shapes]}
        if unknown := [v for v in variants if v not in known]:
            where = "any case" if case_name == "all" else f"case {case_name}"
            raise BadInputError(f"no variant {', '.join(unknown)} in {where} "
                                f"(known: {', '.join(sorted(known))})")
    plan = plan_records(cases, variants, sets)
    if not plan:
        raise BadInputError(f"nothing to time: case {case_name} has no {shape_set} shapes"
                            + (f" named {', '.join(variants)}" if variants else ""))
    if dry_run:
        if as_json:
            emit_json({"plan": plan})
            return
        for rec in plan:
            label = f"{rec['variant']} (bench only)" if rec["bench_only"] else rec["variant"]
            shape = " ".join(f"{k}={v}" for k, v in rec["shape"].items())
            click.echo(f"{rec['case']} / {label}: {shape}  [{', '.join(rec['experts'])}]")
        return
    output_dir(out_dir)
    if not _gpu_visible():
        raise KLineageError("bench needs a CUDA GPU and none is visible here; run it on the GPU machine "
                            "(`klineage cases` lists the experts without one)")
    import torch

    gpu = torch.cuda.get_device_name(0)
    if nominal_ceilings:
        ceilings, source = dict(NOMINAL_CEILINGS), "nominal"
    else:
        ceilings, source = measure_ceilings(), "measured"

    rows: list[BenchRow] = []
    for case in cases:
        for run in variant_runs(case, variants, sets):
            for path, language in case.expert_paths():
                if not as_json:
                    click.echo(f"gating {case.name} [{', '.join(run.device_shapes)}]: {path.name} "
                               f"({language}) ...", err=True)
                # A benchmark measures now: no verdict (and timing) from the gate's cache.
                verdict = gate.check_file(path, run, tier=gate.Tier.DEVICE, timeout=timeout,
                                          cache=False)
                rows.extend(rows_for_verdict(run, path.name, language, verdict, ceilings))

    command_text = ("klineage bench " + " ".join(sys.argv[2:] if len(sys.argv) > 2 else [])).strip()
    commands = [command_text]
    if not fresh:
        benched = {(r.case, r.variant) for r in rows}
        earlier_rows, earlier_commands = earlier_results(Path(out_dir), gpu, benched)
        # Stable: within a case, gate variants before bench-only ones, expert order kept.
        rows = sorted(earlier_rows + rows, key=lambda r: (r.case, r.bench_only))
        commands = [c for c in earlier_commands if c != command_text] + commands
    result = build_result(gpu, command_text, commands, ceilings, source, rows)
    write_results(Path(out_dir), result, rows)
    if as_json:
        emit_json(result)
        return
    click.echo(f"GPU: {gpu}; ceilings ({source}): {ceilings['matrix_tflops']:.0f} TFLOP/s, "
               f"{ceilings['copy_tbs']:.2f} TB/s")
    for line in table_lines(rows):
        click.echo(line)
    click.echo(f"geometric mean speedup (Triton case-variants): "
               f"{_fmt(result['geomean_triton_speedup'], '.3f')}")
    for line in excluded_lines(rows):
        if line:
            click.echo(line)
