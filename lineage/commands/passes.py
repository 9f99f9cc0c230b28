"""`klineage passes [--json] [--language L]`: the registered passes and their declarations.

JSON: `{"passes": [{"name", "category", "languages", "platforms", "requires", "provides",
"conflicts", "preconditions", "deterministic"}, ...]}` in registry order (Triton, CUDA,
algorithmic intents).
"""
from __future__ import annotations

import json

import click

from passes.registry import all_pass_classes


@click.command("passes")
@click.option("--language", "-l", type=click.Choice(["cuda", "triton"]), default=None,
              help="Only the passes for this language.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (stable format, see module doc).")
def command(language: str | None, as_json: bool) -> None:
    """List the optimization passes and their declarations."""
    classes = [c for c in all_pass_classes() if language is None or language in c.languages]
    if as_json:
        click.echo(json.dumps({"passes": [c.declaration() for c in classes]}, indent=1))
        return
    for cls in classes:
        kind = "rule" if cls.deterministic else "llm "
        langs = ",".join(cls.languages)
        click.echo(f"{cls.name:<26} {kind} {langs:<12} {cls.category.value:<20} {cls.summary}")
        for key in ("requires", "provides", "conflicts", "preconditions"):
            values = getattr(cls, key)
            if values:
                click.echo(f"{'':<27}{key}: {', '.join(values)}")
    click.echo(f"{len(classes)} pass(es)", err=True)
