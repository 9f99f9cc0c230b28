"""`klineage report DIR`: (re)write DIR/report.html."""
from __future__ import annotations

import click

from lineage.commands._common import emit_json, lineage_dir


@click.command("report")
@click.argument("directory")
@click.option("--json", "as_json", is_flag=True, help="Print {\"report\"} as JSON.")
def command(directory: str, as_json: bool) -> None:
    """Write the self-contained HTML report of the lineage in DIRECTORY."""
    from lineage.graph import Lineage
    from lineage.report import write_report

    d = lineage_dir(directory)
    path = write_report(Lineage.load(d), d)
    if as_json:
        emit_json({"report": str(path)})
    else:
        click.echo(f"wrote {path}")
