"""`klineage cases [DIR ...]`: list the workloads (cases) and their expert / start kernels."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kir.errors import BadInputError
from lineage.commands._common import emit_json


def _display_path(path: Path) -> str:
    """`path` relative to the working directory when it lies under it, else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path.resolve())


def case_record(case: Any) -> dict[str, Any]:
    """The JSON record of one `gate.Case` (the format `klineage cases --json` documents)."""
    start = case.start_path() if hasattr(case, "start_path") else None
    return {
        "name": case.name,
        "ref": case.ref,
        "kind": "problem" if case.problem else "case",
        "path": _display_path(case.path),
        "description": case.description,
        "reference": case.reference_name,
        "platform": case.platform,
        "shapes": {k: dict(v) for k, v in case.shapes.items()},
        "small_shapes": {k: dict(v) for k, v in case.small_shapes.items()},
        "bench_shapes": {k: dict(v) for k, v in case.bench_shapes.items()},
        "tolerance": dict(case.tolerance),
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
    found under them (recursively; a DIR may also be one such file).

    JSON: {"cases": [{"name", "ref", "kind" ("case" | "problem"), "path", "description",
    "reference", "platform", "shapes", "small_shapes", "bench_shapes", "tolerance", "experts":
    [{"path", "language"}], "start"}]} where `ref` is what `--case` takes to find the case again
    from any working directory, shapes map a variant name to its parameters (with "dtype";
    bench_shapes: the benchmark-only variants `klineage bench` also times), tolerance
    maps a dtype to the largest relative-norm error allowed, `start` is the case's naive start
    kernel or null, and paths are relative to the working directory when they lie under it.
    """
    import gate
    from gate.cases import find_cases

    if dirs:
        roots = [Path(d) for d in dirs]
        for root in roots:
            if not root.exists():
                raise BadInputError(f"{root}: no such folder or file")
            # A folder may hold no case (the listing says so); a file named is meant as one.
            if root.is_file() and not find_cases([root]):
                raise BadInputError(f"{root}: not a case (a case.py, or a KernelBench problem "
                                    "file with `class Model` and `get_inputs`)")
        records = [case_record(gate.load_case(p)) for p in find_cases(roots)]
    else:
        records = [case_record(gate.load_case(name)) for name in gate.list_cases()]
    if as_json:
        emit_json({"cases": records})
        return
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
        for variant, shape in rec["bench_shapes"].items():
            click.echo(f"  bench {variant}: {_shape_text(shape)}")
        tol = ", ".join(f"{k} {v:g}" for k, v in rec["tolerance"].items())
        click.echo(f"  tolerance: {tol}")
        for expert in rec["experts"]:
            click.echo(f"  expert ({expert['language']}): {expert['path']}")
        if rec["start"]:
            click.echo(f"  start: {rec['start']}")
        click.echo(f"  --case {rec['ref']}")
