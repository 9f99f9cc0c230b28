"""`klineage show DIR`: summarize a lineage."""
from __future__ import annotations

import click

from lineage.commands._common import emit_json, lineage_dir


@click.command("show")
@click.argument("directory")
@click.option("--json", "as_json", is_flag=True)
def command(directory: str, as_json: bool) -> None:
    """Summarize the lineage in DIRECTORY.

    JSON: {"states", "transitions", "rejected", "cases", "experts", "roots", "expert_states",
    "runs", "chain": [{"state", "pass", "anchor", "ms"}]}.
    """
    from lineage.graph import Lineage

    lin = Lineage.load(lineage_dir(directory))
    summary = lin.summary()
    chain = []
    for sid, tid in lin.main_chain():
        t = lin.node(tid) if tid else {}
        chain.append({"state": sid, "pass": t.get("pass"), "anchor": t.get("anchor"),
                      "ms": (lin.node(sid).get("timing") or {}).get("candidate_ms")})
    summary["chain"] = chain
    if as_json:
        emit_json(summary)
        return
    click.echo(f"{summary['states']} states, {summary['transitions']} transitions, "
               f"{summary['rejected']} rejected attempts; cases: {', '.join(summary['cases'])}")
    for i, step in enumerate(chain):
        ms = f"  {step['ms']:.4f} ms" if step["ms"] else ""
        what = "naive root" if step["pass"] is None else f"+ {step['pass']} @ {step['anchor']}"
        click.echo(f"  {i:2d}. {step['state']}  {what}{ms}")
