"""`klineage cases`: list the workloads (cases) and their expert kernels."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from lineage.commands._common import emit_json


def _display_path(path: Path) -> str:
    """`path` relative to the working directory when it lies under it, else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path.resolve())


def case_record(case: Any) -> dict[str, Any]:
    """The JSON record of one `gate.Case` (the format `klineage cases --json` documents)."""
    return {
        "name": case.name,
        "description": case.description,
        "reference": case.reference_name,
        "platform": case.platform,
        "shapes": {k: dict(v) for k, v in case.shapes.items()},
        "small_shapes": {k: dict(v) for k, v in case.small_shapes.items()},
        "tolerance": dict(case.tolerance),
        "experts": [{"path": _display_path(p), "language": lang} for p, lang in case.expert_paths()],
    }


def _shape_text(shape: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


@click.command("cases")
@click.option("--json", "as_json", is_flag=True, help="Print the documented JSON form.")
def command(as_json: bool) -> None:
    """List the cases found in experts/*/case.py with their shapes, reference and experts.

    JSON: {"cases": [{"name", "description", "reference", "platform", "shapes",
    "small_shapes", "tolerance", "experts": [{"path", "language"}]}]} where shapes map a
    variant name to its parameters (with "dtype"), tolerance maps a dtype to the largest
    relative-norm error allowed, and expert paths are relative to the working directory when
    they lie under it.
    """
    import gate

    records = [case_record(gate.load_case(name)) for name in gate.list_cases()]
    if as_json:
        emit_json({"cases": records})
        return
    if not records:
        click.echo("no cases (experts/*/case.py)")
        return
    for rec in records:
        click.echo(f"{rec['name']}: {rec['description']}  [reference: {rec['reference']}, "
                   f"platform: {rec['platform']}]")
        for variant, shape in rec["shapes"].items():
            click.echo(f"  shape {variant}: {_shape_text(shape)}")
        for variant, shape in rec["small_shapes"].items():
            click.echo(f"  small {variant}: {_shape_text(shape)}")
        tol = ", ".join(f"{k} {v:g}" for k, v in rec["tolerance"].items())
        click.echo(f"  tolerance: {tol}")
        for expert in rec["experts"]:
            click.echo(f"  expert ({expert['language']}): {expert['path']}")
