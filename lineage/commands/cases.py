"""`klineage cases [DIR ...]`: list the workloads (cases) and their expert / start kernels."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kir.errors import BadInputError
from lineage.commands._common import emit_json


_PROGRESS_FROM = 10  # files in a scan from which each one's progress goes to stderr


def _display_path(path: Path) -> str:
    """`path` relative to the working directory when it lies under it, else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path.resolve())


def case_record(case: Any) -> dict[str, Any]:
    """The JSON record of one `gate.Case` (the format `klineage cases --json` documents)."""
    start = case.start_path() if hasattr(case, "start_path") else None
    try:
        small, reason = {k: dict(v) for k, v in case.small_shapes.items()}, None
    except BadInputError as exc:  # a problem file with no interpret-tier sizes
        small, reason = {}, str(exc)
    return {
        "name": case.name,
        "ref": case.ref,
        "kind": "problem" if case.problem else "case",
        "path": _display_path(case.path),
        "description": case.description,
        "reference": case.reference_name,
        "platform": case.platform,
        "shapes": {k: dict(v) for k, v in case.shapes.items()},
        "small_shapes": small,
        "small_shapes_reason": reason,
        "bench_shapes": {k: dict(v) for k, v in case.bench_shapes.items()},
        "tolerance": dict(case.tolerance),
        "check": case.check_text(),
        "experts": [{"path": _display_path(p), "language": lang} for p, lang in case.expert_paths()],
        "start": _display_path(start) if start is not None else None,
    }


def _shape_text(shape: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


@click.command("cases")
@click.argument("dirs", nargs=-1, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the documented JSON form.")
def command(dirs: tuple[str, ...], as_json: bool) -> None:
    """List the cases with their shapes, reference, experts and start kernel: those of
    experts/*/case.py, or, given DIRs, every case folder (a folder holding case.py) and
    KernelBench-style problem file (a .py with `class Model`, `get_inputs`, `get_init_inputs`)
    found under them (recursively; a DIR may also be one such file). A file under a DIR that
    does not load (or a .py there that does not parse) is reported with its one-line reason and
    the scan goes on; the exit code is 2 only when files were found and none loaded. A problem
    file with no interpret-tier sizes loads (static and device tiers): its small_shapes are
    empty and small_shapes_reason says why.

    JSON: {"cases": [{"name", "ref", "kind" ("case" | "problem"), "path", "description",
    "reference", "platform", "shapes", "small_shapes", "small_shapes_reason", "bench_shapes",
    "tolerance", "check", "experts": [{"path", "language"}], "start"}], "refused": [{"path",
    "reason"}]} where `ref` is what `--case` takes to find the case again from any working
    directory, shapes map a variant name to its parameters (with "dtype"; bench_shapes: the
    benchmark-only variants `klineage bench` also times; small_shapes_reason: null, or why the
    interpret tier has no sizes), tolerance maps a dtype to the largest relative-norm error
    allowed, `check` says how outputs are compared (`gate.Case.check_text`), `start` is the
    case's naive start kernel or null, and paths are relative to the working directory when
    they lie under it.
    """
    import gate
    from gate.cases import find_cases, scan_cases

    if dirs:
        roots = [Path(d) for d in dirs]
        for root in roots:
            if not root.exists():
                raise BadInputError(f"{root}: no such folder or file")
            # A folder may hold no case (the listing says so); a file named is meant as one.
            if root.is_file() and not find_cases([root]):
                raise BadInputError(f"{root}: not a case (a case.py, or a KernelBench problem "
                                    "file with `class Model` and `get_inputs`)")

        def progress(i: int, n: int, path: Path, reason: str | None) -> None:
            if not as_json and n >= _PROGRESS_FROM:
                click.echo(f"klineage: [{i}/{n}] {_display_path(path)}: "
                           f"{'refused' if reason else 'loaded'}", err=True)

        cases, bad = scan_cases(roots, progress)
        records = [case_record(c) for c in cases]
        refused = [{"path": _display_path(p), "reason": why} for p, why in bad]
    else:
        records = [case_record(gate.load_case(name)) for name in gate.list_cases()]
        refused = []
    if as_json:
        emit_json({"cases": records, "refused": refused})
        if refused and not records:
            raise SystemExit(2)
        return
    for rec in refused:
        click.echo(f"refused: {rec['reason']}")
    if refused and not records:
        raise BadInputError(f"nothing under {', '.join(dirs)} loaded ({len(refused)} refused)")
    if not records:
        click.echo("no cases found" + (f" under {', '.join(dirs)}" if dirs else " (experts/*/case.py)"))
        return
    for rec in records:
        click.echo(f"{rec['name']}: {rec['description']}  [reference: {rec['reference']}, "
                   f"platform: {rec['platform']}]")
        for variant, shape in rec["shapes"].items():
            click.echo(f"  shape {variant}: {_shape_text(shape)}")
        for variant, shape in rec["small_shapes"].items():
            click.echo(f"  small {variant}: {_shape_text(shape)}")
        if rec["small_shapes_reason"]:
            click.echo(f"  small: none ({rec['small_shapes_reason']})")
        for variant, shape in rec["bench_shapes"].items():
            click.echo(f"  bench {variant}: {_shape_text(shape)}")
        if rec["kind"] != "problem":  # a problem is judged by its check alone
            tol = ", ".join(f"{k} {v:g}" for k, v in rec["tolerance"].items())
            click.echo(f"  tolerance: {tol}")
        click.echo(f"  check: {rec['check']}")
        for expert in rec["experts"]:
            click.echo(f"  expert ({expert['language']}): {expert['path']}")
        if rec["start"]:
            click.echo(f"  start: {rec['start']}")
        click.echo(f"  --case {rec['ref']}")
