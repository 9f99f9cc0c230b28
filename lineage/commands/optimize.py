"""`klineage optimize TARGET [--case NAME] [--library DIR]`: apply admitted SkillCards under the gate."""
from __future__ import annotations

import time
from pathlib import Path

import click

from kir.errors import BadInputError

from lineage.commands._common import Progress, emit_json, executor_options, output_dir, set_aside


@click.command("optimize")
@click.argument("target", type=click.Path(dir_okay=False))
@click.option("--case", "case", default=None, help="Case: a name under experts/, a case folder or its case.py, or a KernelBench problem file (see `klineage cases`). Default: the case beside the kernel (a case.py in its folder, or <stem>.py beside <stem>_triton.py).")
@click.option("--library", "library", default=None,
              help="SkillCard library directory (default: the library shipped with KLineage, "
                   "lineage/shipped_library.json; the run names the one it used).")
@click.option("--budget-steps", type=click.IntRange(0, 1000), default=8, show_default=True,
              help="Most candidates to gate.")
@click.option("--budget-usd", type=click.FloatRange(0, None), default=1.0, show_default=True,
              help="Most USD the LLM rewriter may spend (used only with ANTHROPIC_API_KEY).")
@click.option("--tier", type=click.Choice(["static", "interpret", "emulate", "device", "auto"]), default="auto",
              show_default=True, help="Gate tier for every candidate.")
@click.option("-k", "k", type=click.IntRange(1, 100), default=5, show_default=True,
              help="Per-dimension top-k of retrieval.")
@click.option("--no-config-sweeps", "no_sweeps", is_flag=True,
              help="No sweep moves: neither launch cards' recorded joint configurations nor "
                   "the autotune sweeps of a state's own tunables (single-parameter rewrites "
                   "only; for ablation).")
@click.option("--seed", type=click.IntRange(0, None), default=0, show_default=True,
              help="Permute equally ranked cards (same scope similarity, effect within 5%) "
                   "with this seed; 0 keeps retrieval's order.")
@click.option("--model", "model", default=None,
              help="Model of the LLM rewriter (default: the first of `passes.llm_rewriter.MODELS`); "
                   "its prices bound --budget-usd. Used only with ANTHROPIC_API_KEY.")
@click.option("--time-limit", "time_limit", type=click.FloatRange(0, None, min_open=True), default=None,
              metavar="S", help="Seconds the run may take (the loop's time box): no candidate's "
                                "gate starts after it, one started before it is cut to end near "
                                "it, and the best kernel so far is kept (termination \"time-box\").")
@click.option("--out", "out", default="out/optimize", show_default=True, help="Output directory.")
@executor_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def command(target: str, case: str, library: str | None, budget_steps: int, budget_usd: float,
            tier: str, k: int, no_sweeps: bool, seed: int, model: str | None,
            time_limit: float | None, out: str, executor: str, ray_address: str | None,
            as_json: bool) -> None:
    """Optimize TARGET (any kernel that passes the gate) with the admitted cards of LIBRARY.

    Writes OUT/best.<ext>, OUT/lineage.json (the run as a lineage) and OUT/result.json. The best
    kernel always passed the gate. JSON: {"best": {"path", "verdict"}, "applied": [{"card",
    "pass", "anchor", "rewriter", "ms", "speedup"}], "rejected": [{"card", "pass", "anchor",
    "rewriter", "stage", "reason", "times"}] (each distinct rejection once, "times" how often it
    happened; "near_miss" where true), "spent_usd", "lineage", "start_ms", "best_ms", "speedup",
    "termination", "notes", "gated", "seed", "llm"}; "llm" is null without an LLM back-end,
    else {"model", "calls", "failed", "attempts", "input_tokens", "output_tokens",
    "cache_creation_input_tokens", "cache_read_input_tokens", "spent_usd", "disabled"}
    (cache reads stay 0 when the library prefix is too short to be cached). "gated" counts the candidates that went to the gate
    (a candidate reached again along another path reuses its verdict and is not counted).
    "library": {"path", "shipped", "provenance"} names the library used (`provenance`: what its
    index records; for the shipped library the lineages, GPU and commit its cards come from).
    An earlier run's files in OUT (lineage.json, result.json, best.*) are first moved into
    OUT/previous-<UTC time>/ ("previous" in the JSON; null when there were none).
    """
    import gate
    import kir
    from gate.executor import open_executor
    from lineage.optimize import optimize
    from lineage.shipped import describe, open_library
    from passes.llm_rewriter import LLMConfig

    # Everything the user named is checked before the first gate.
    from gate.executor import require_executor

    require_executor(executor, ray_address)
    config = LLMConfig.for_model(model, budget_usd=budget_usd) if model else None
    kir.parse_file(target)
    case = case or gate.case_beside(target)
    gate.load_case(case)
    lib, named = open_library(library)
    library = named["path"]
    if not lib.cards(admitted_only=True):
        count = len(lib.ids())
        if count == 0:
            raise BadInputError(f"{library}: no SkillCard at all; lift a lineage into it first: "
                                f"klineage skills {library} --add LINEAGE_DIR")
        raise BadInputError(
            f"{library}: no admitted SkillCard ({count} hypothes{'i' if count == 1 else 'e'}s "
            f"not yet admitted); admit them first: klineage skills {library} --admit "
            "LINEAGE_DIR [--held-out HELD_OUT_DIR] --tier interpret")
    previous = set_aside(output_dir(out), ("lineage.json", "result.json", "best.*"))
    if previous is not None:
        click.echo(f"klineage: the earlier run in {out} is kept in {previous}", err=True)
    deadline = time.monotonic() + time_limit if time_limit is not None else None
    with (open_executor(executor, address=ray_address) as gates,
          Progress(f"optimizing {Path(target).name} ({case})", enabled=not as_json) as progress):
        result = optimize(target, case, library, budget_steps=budget_steps, budget_usd=budget_usd,
                          tier=tier, out=out, k=k, progress=progress, seed=seed,
                          config_sweeps=not no_sweeps, deadline=deadline,
                          llm_config=config, executor=gates)
    if as_json:
        emit_json({**result.to_json(), "library": named,
                   "previous": str(previous) if previous is not None else None})
        return
    click.echo(describe(named), err=True)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    data = result.to_json()
    gain = f", {data['speedup']:.2f}x over the start" if data["speedup"] else ""
    click.echo(f"{len(result.applied)} card(s) applied, {len(result.rejected)} rejected "
               f"({result.termination}, {result.gated} gated); spent ${result.spent_usd:.4f}{gain}")
    for step in result.applied:
        click.echo(f"  + {step.card} at {step.anchor} ({step.rewriter})")
    for entry in data["rejected"]:
        times = f" (x{entry['times']})" if entry["times"] > 1 else ""
        click.echo(f"  - {entry['card']}: {entry['stage']}: {entry['reason'][:160]}{times}")
    if result.llm is not None and result.llm["calls"]:
        u = result.llm
        click.echo(f"llm ({u['model']}): {u['calls']} call(s), {u['failed']} failed; tokens in "
                   f"{u['input_tokens']}, out {u['output_tokens']}, cache written "
                   f"{u['cache_creation_input_tokens']}, cache read {u['cache_read_input_tokens']}")
    click.echo(f"best kernel: {result.best_path}; lineage: {result.lineage_path}")
