"""`klineage induce KERNEL --case NAME`: guided de-optimization of an expert into a lineage."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kir.errors import BadInputError

from lineage.commands._common import (Progress, emit_json, executor_options, kernel_text,
                                      output_dir, set_aside)


def run_induction(kernel: str, case: str, tier: str, out: str, width: int, max_steps: int,
                  max_rejections: int, resume: bool, as_json: bool, library: str | None = None,
                  quiet: bool = False, first_branch: int = 0,
                  pass_specs: tuple[str, ...] = (), compile_check: bool = False,
                  executor: Any = None, keep_previous: bool = False) -> dict:
    """Induce and report; see `command`. An --out that already holds a lineage is continued
    with `resume`, set aside (with its report, into OUT/previous-<UTC time>/) with
    `keep_previous`, and otherwise refused: a run never replaces a lineage it was not asked to
    continue."""
    import gate
    import kir
    from lineage.induce import induce
    from lineage.report import write_report

    # Everything the user named is checked before the (long) induction starts.
    kir.parse_file(kernel)
    gate.load_case(case)
    existing = output_dir(out) / "lineage.json"
    if existing.exists() and not resume:
        if not keep_previous:
            raise BadInputError(f"{out}: already holds a lineage ({existing.name}); --resume "
                                "continues it, or name another --out")
        kept = set_aside(existing.parent, ("lineage.json", "report.html"))
        click.echo(f"klineage: the lineage already in {out} is kept in {kept}", err=True)
    elif resume and not existing.exists():
        click.echo(f"klineage: nothing to resume in {out} (no lineage.json): starting a new lineage",
                   err=True)
    lib = None
    if library:
        from lineage.skills import Library

        lib = Library.open(library, create=True)
    with Progress(f"inducing {Path(kernel).name} ({case})", enabled=not quiet) as progress:
        result = induce(kernel, case, tier=tier, out=out, width=width, max_steps=max_steps,
                        max_rejections=max_rejections, resume=resume, progress=progress,
                        first_branch=first_branch, pass_specs=pass_specs,
                        compile_check=compile_check, executor=executor)
    report = write_report(result.lineage, Path(out))
    summary = result.to_json()
    summary["report"] = str(report)
    if lib is not None:
        from lineage.skills import lift

        cards = lift(result.lineage)
        lib.add_all(cards)
        summary["library"] = {"path": library, "cards": len(cards)}
    if as_json:
        emit_json(summary)
    else:
        term = summary["termination"]
        click.echo(f"lineage of {kernel} ({case}, {result.lineage.node(result.expert)['tier']} tier): "
                   f"{summary['states']} states, {summary['transitions']} transitions, "
                   f"{summary['rejected']} rejected attempts; termination: {term}; "
                   f"{result.steps} steps from the expert to {result.root}")
        click.echo(f"wrote {Path(out) / 'lineage.json'} and {report}")
    return summary


@click.command("induce")
@click.argument("kernel", type=click.Path(dir_okay=False))
@click.option("--case", "case", default=None, help="Case: a name under experts/, a case folder or its case.py, or a KernelBench problem file (see `klineage cases`). Default: the case beside the kernel (a case.py in its folder, or <stem>.py beside <stem>_triton.py).")
@click.option("--tier", type=click.Choice(["static", "interpret", "emulate", "device", "auto"]), default="auto",
              show_default=True, help="Gate tier used to validate every state.")
@click.option("--out", "out", default="out/lineage", show_default=True, help="Output directory.")
@click.option("--width", type=click.IntRange(1, 16), default=1, show_default=True,
              help="Alternative de-optimization orders to explore (branches of the DAG).")
@click.option("--first-branch", type=click.IntRange(0, 64), default=0, show_default=True,
              help="Index of the first order explored: branch b starts by removing the b-th "
                   "optimization present in the expert (0 = the dependency order). A lineage "
                   "from branch >= 1 gives held-out states for admission (klineage skills --held-out).")
@click.option("--pass", "pass_specs", multiple=True, metavar="SPEC",
              help="Options of one pass for this induction, as name{key=value,...} (e.g. "
                   "'tile-sizes{floor=32}': smallest tile the de-optimization makes); repeatable.")
@click.option("--compile-check", is_flag=True,
              help="Interpret tier: also compile every state for the GPU at the case's device "
                   "shapes (the static tier; no GPU needed) and reject what does not compile. "
                   "The interpreter runs small shapes and has no block-size limit.")
@click.option("--max-steps", type=click.IntRange(1, 200), default=32, show_default=True)
@click.option("--max-rejections", type=click.IntRange(0, 1000), default=40, show_default=True)
@click.option("--resume", is_flag=True, help="Continue an interrupted induction in --out.")
@click.option("--library", default=None, help="Add the lineage's lifted SkillCards to this library.")
@executor_options
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def command(kernel: str, case: str, tier: str, out: str, width: int, first_branch: int,
            pass_specs: tuple[str, ...], compile_check: bool, max_steps: int, max_rejections: int,
            resume: bool, library: str | None, executor: str, ray_address: str | None,
            as_json: bool) -> None:
    """Induce the lineage of an expert KERNEL for case NAME; writes OUT/lineage.json and OUT/report.html.

    JSON: {"out", "states", "transitions", "rejected", "termination", "root", "expert", "steps", "report"}.
    """
    import gate
    from gate.executor import open_executor

    if case is None:
        kernel_text(kernel)
        case = gate.case_beside(kernel)
    with open_executor(executor, address=ray_address) as gates:
        run_induction(kernel, case, tier, out, width, max_steps, max_rejections, resume, as_json,
                      library, first_branch=first_branch, pass_specs=pass_specs,
                      compile_check=compile_check, executor=gates)
