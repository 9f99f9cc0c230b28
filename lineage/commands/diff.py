"""`klineage diff OLD NEW [--json]`: GumTree-style structured diff of two kernels.

JSON: `{"old", "new", "language", "actions": [{"action": insert|delete|update|move, "anchor",
"kind", "grammar_type", "name", "new_anchor", "subtree", "src_span", "dst_span", "src_line",
"dst_line", "old", "new"}, ...]}`. `anchor` is an anchor id of OLD (for an insert, of NEW);
`new_anchor` is the anchor in NEW for update/move and, for an insert, the anchor of OLD the
new code lands in. `old`/`new` hold the changed labels (update) or source text.
"""
from __future__ import annotations

import json

import click

import anchors
import kir


def _short(text: str | None, width: int = 60) -> str:
    if text is None:
        return ""
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 3] + "..."


@click.command("diff")
@click.argument("old", type=click.Path(dir_okay=False, path_type=str))
@click.argument("new", type=click.Path(dir_okay=False, path_type=str))
@click.option("--language", "-l", type=click.Choice(["cuda", "triton"]), default=None,
              help="Override the language detected from the suffixes.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (format above).")
def command(old: str, new: str, language: str | None, as_json: bool) -> None:
    """Structured (GumTree-style) diff of two kernels.

    \b
    --json prints {"old", "new", "language", "actions": [{"action", "anchor", "kind",
      "grammar_type", "name", "new_anchor", "subtree", "src_span", "dst_span", "src_line",
      "dst_line", "old", "new"}, ...]}
    action is insert, delete, update or move; anchor is an anchor id of OLD (of NEW for an
    insert); new_anchor is the anchor in NEW (update/move) or, for an insert, the anchor of
    OLD where the new code lands; old/new hold the changed labels or the source text.
    """
    a = kir.parse_file(old, language=language)
    b = kir.parse_file(new, language=language)
    for path, ir in {old: a, new: b}.items():  # one warning per file
        if ir.error_nodes:
            click.echo(f"klineage: warning: {path}: {ir.error_nodes} syntax error node(s); the "
                       "diff covers what tree-sitter recovered", err=True)
    script = anchors.diff(a, b)
    if as_json:
        payload = {"old": old, "new": new, "language": a.language.value, **script.to_json()}
        click.echo(json.dumps(payload, indent=1))
        return
    for act in script.actions:
        line = act.src_line if act.src_line is not None else act.dst_line
        if act.action == "update":
            what = f"{_short(act.old_text, 30)!r} -> {_short(act.new_text, 30)!r}"
        elif act.action == "insert":
            what = _short(act.new_text)
        else:
            what = _short(act.old_text)
        click.echo(f"{act.action:<7}{line:>5}  {act.anchor:<45} {what}")
    click.echo(f"{len(script.actions)} action(s)", err=True)
