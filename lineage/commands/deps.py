"""`klineage deps [KERNEL] [--json | --dot] [--pass NAME]`: the pass-dependency graph.

The graph is derived from the passes' declarations (`requires` / `provides` / `conflicts`).
JSON: `{"passes": [names], "edges": [{"from", "to", "feature"}] (from must precede to),
"conflicts": [{"a", "b", "feature"}], "order": [a valid optimization order]}`; with KERNEL also
`"kernel", "language", "present": [{"pass", "anchor"}]` (the optimizations found in it),
`"deopt_order": [pass names]` (remove them in this order) and `"problems": [...]` (present
passes that conflict); with `--pass NAME` also `"pass": {"name", "must_precede",
"invalidates", "requirements": {feature: [providers]}}`. `--dot` prints Graphviz DOT with the
kernel's present passes filled.
"""
from __future__ import annotations

import json
from typing import Any

import click

from passes.graph import PassGraph


@click.command("deps")
@click.argument("kernel", required=False, type=click.Path(dir_okay=False, path_type=str))
@click.option("--pass", "pass_name", default=None, help="Also show what NAME needs and invalidates.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (stable format, see module doc).")
@click.option("--dot", "as_dot", is_flag=True, help="Print Graphviz DOT.")
def command(kernel: str | None, pass_name: str | None, as_json: bool, as_dot: bool) -> None:
    """The pass-dependency graph, optionally for one kernel."""
    if as_json and as_dot:
        raise click.UsageError("--json and --dot are exclusive")
    graph = PassGraph.from_registry()
    out: dict[str, Any] = graph.to_json()
    present_names: list[str] = []
    if kernel is not None:
        import anchors
        import kir
        from passes.registry import present_sites

        ir = kir.parse_file(kernel)
        sites = present_sites(ir, anchors.build_index(ir))
        present_names = [s.pass_name for s in sites]
        out.update({"kernel": kernel, "language": ir.language.value,
                    "present": [{"pass": s.pass_name, "anchor": s.anchor} for s in sites],
                    "deopt_order": graph.deopt_order(present_names),
                    "problems": _problems(graph, sites)})
    if pass_name is not None:
        out["pass"] = {"name": pass_name, "must_precede": graph.must_precede(pass_name),
                       "invalidates": graph.invalidates(pass_name),
                       "requirements": graph.requirements(pass_name)}
    if as_dot:
        click.echo(graph.to_dot(present_names), nl=False)
    elif as_json:
        click.echo(json.dumps(out, indent=1))
    else:
        _print_text(out)


def _problems(graph: PassGraph, sites: list[Any]) -> list[str]:
    """Conflicting passes present in the same function (the anchor's first path step)."""
    by_function: dict[str, list[str]] = {}
    for site in sites:
        by_function.setdefault(site.anchor.split("/")[0], []).append(site.pass_name)
    return [f"{where}: {problem}" for where, names in by_function.items()
            for problem in graph.check_present(names)]


def _print_text(out: dict[str, Any]) -> None:
    click.echo("optimization order: " + " -> ".join(out["order"]))
    for edge in out["edges"]:
        click.echo(f"  {edge['from']} before {edge['to']}  ({edge['feature']})")
    for edge in out["conflicts"]:
        click.echo(f"  {edge['a']} conflicts with {edge['b']}  ({edge['feature']})")
    if "kernel" in out:
        click.echo(f"{out['kernel']} ({out['language']}): {len(out['present'])} optimization site(s)")
        for row in out["present"]:
            click.echo(f"  {row['pass']:<26} {row['anchor']}")
        click.echo("de-optimization order: " + " -> ".join(out["deopt_order"]))
        for problem in out["problems"]:
            click.echo(f"  problem: {problem}")
    if "pass" in out:
        info = out["pass"]
        click.echo(f"{info['name']}: apply after {', '.join(info['must_precede']) or 'nothing'}; "
                   f"invalidates {', '.join(info['invalidates']) or 'nothing'}")
