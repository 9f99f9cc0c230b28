"""`klineage anchors FILE [--query Q] [--language L] [--json]`.

JSON: `{"file", "language", "error_nodes", "anchors": [{"id", "kind", "grammar_type", "name",
"span": [start, end], "line", "parent"}, ...]}`; with `--query` only the matches, each with an
extra `"captures": {label: anchor id}` when the query has captures.
"""
from __future__ import annotations

import json

import click

import anchors
import kir


@click.command("anchors")
@click.argument("file", type=click.Path(dir_okay=False, path_type=str))
@click.option("--query", "-q", "query", default=None, help="Anchor query, e.g. 'kernel >> loop > call[name=tl.dot]'.")
@click.option("--language", "-l", type=click.Choice(["cuda", "triton"]), default=None,
              help="Override the language detected from the suffix.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (format above).")
def command(file: str, query: str | None, language: str | None, as_json: bool) -> None:
    """List the anchors of a kernel file, optionally filtered by a query.

    \b
    --json prints {"file", "language", "error_nodes", "anchors": [
      {"id", "kind", "grammar_type", "name", "span": [start, end], "line", "parent"}, ...]}
    (byte offsets, end exclusive; lines from 1); with --query only the matches, each with
    "captures": {label: anchor id} when the query captures. A CUDA file with syntax errors
    is anchored where tree-sitter recovered; error_nodes says how many it met.
    """
    ir = kir.parse_file(file, language=language)
    index = anchors.build_index(ir)
    if query is not None:
        matches = index.query(query)
        rows = index.to_json([m.anchor for m in matches])
        for row, m in zip(rows, matches):
            if m.captures:
                row["captures"] = {k: a.id for k, a in m.captures.items()}
    else:
        rows = index.to_json()
    if as_json:
        click.echo(json.dumps({"file": file, "language": ir.language.value,
                               "error_nodes": ir.error_nodes, "anchors": rows}, indent=1))
        return
    if ir.error_nodes:
        click.echo(f"klineage: warning: {file}: {ir.error_nodes} syntax error node(s); "
                   "anchors cover what tree-sitter recovered", err=True)
    for row in rows:
        caps = row.get("captures")
        extra = "  " + " ".join(f"@{k}={v}" for k, v in caps.items()) if caps else ""  # type: ignore[union-attr]
        click.echo(f"{row['line']:>5}  {row['kind']:<15} {row['id']}{extra}")
    if query is not None:
        click.echo(f"{len(rows)} match(es)", err=True)
