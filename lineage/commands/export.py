"""`klineage export DIR --format graphml|dot|json`."""
from __future__ import annotations

from pathlib import Path

import click

from lineage.commands._common import emit_json, lineage_dir, output_file


@click.command("export")
@click.argument("directory")
@click.option("--format", "fmt", type=click.Choice(["graphml", "dot", "json"]), required=True)
@click.option("--output", "-o", default=None, help="Write here instead of DIR/lineage.<ext>.")
@click.option("--json", "as_json", is_flag=True, help="Print {\"path\", \"format\"} as JSON.")
def command(directory: str, fmt: str, output: str | None, as_json: bool) -> None:
    """Export the lineage in DIRECTORY (GraphML attributes are flattened to scalars)."""
    from lineage.export import export
    from lineage.graph import Lineage, atomic_write_text

    d = lineage_dir(directory)
    ext = {"graphml": "graphml", "dot": "dot", "json": "nodelink.json"}[fmt]
    path = output_file(output, "--output") if output else d / f"lineage.{ext}"
    text = export(Lineage.load(d), fmt)
    atomic_write_text(path, text)
    if as_json:
        emit_json({"path": str(path), "format": fmt})
    else:
        click.echo(f"wrote {path}")
