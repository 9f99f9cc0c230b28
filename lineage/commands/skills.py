"""`klineage skills [LIBRARY] [--target KERNEL --case NAME]`: list or retrieve SkillCards."""
from __future__ import annotations

import click

from lineage.commands._common import emit_json, executor_options


@click.command("skills")
@click.argument("library", required=False)
@click.option("--target", "target", default=None, type=click.Path(dir_okay=False),
              help="Retrieve the admitted cards for this kernel (needs --case).")
@click.option("--case", "case", default=None, help="Case of the target kernel.")
@click.option("--platform", default="cuda", show_default=True, help="Platform of the target.")
@click.option("-k", "k", type=click.IntRange(1, 100), default=5, show_default=True,
              help="Per-dimension top-k of retrieval.")
@click.option("--add", "add", multiple=True, type=click.Path(),
              help="First lift this lineage (directory or lineage.json) into the library "
                   "(created if missing); repeatable.")
@click.option("--admit", "admit_from", multiple=True, type=click.Path(),
              help="Run roundtrip admission of the library's hypotheses on held-out states of "
                   "these lineages (repeatable) before listing.")
@click.option("--held-out", "held_out", multiple=True, type=click.Path(),
              help="With --admit: a held-out lineage (induced for admission, not lifted, e.g. "
                   "klineage induce --first-branch 1); its states that are no state of a card's "
                   "source lineage, in a lineage holding none of the card's evidence, are "
                   "contexts too (repeatable).")
@click.option("--tier", type=click.Choice(["static", "interpret", "emulate", "device", "auto"]),
              default="auto", show_default=True, help="Gate tier of admission trials.")
@click.option("--max-trials", type=click.IntRange(1, 50), default=2, show_default=True,
              help="Held-out contexts tried per card in admission.")
@click.option("--jobs", type=click.IntRange(1, 256), default=None,
              help="Cards tried at once in admission (default 1; with --executor ray, as many "
                   "as the cluster runs gates at once). Device-tier gates on one GPU share it: "
                   "each times alone, see gate.gpulock.")
@click.option("--magnitude", is_flag=True,
              help="Device-tier admission also requires the card's smallest recorded speedup "
                   "(less 25%%), not only a speedup above timing noise.")
@executor_options
@click.option("--markdown", is_flag=True, help="Print the cards as readable markdown.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def command(library: str | None, target: str | None, case: str | None, platform: str, k: int,
            add: tuple[str, ...], admit_from: tuple[str, ...], held_out: tuple[str, ...], tier: str,
            max_trials: int, jobs: int | None, magnitude: bool, executor: str,
            ray_address: str | None, markdown: bool, as_json: bool) -> None:
    """List the SkillCards of LIBRARY, or with --target retrieve the admitted cards that fit it.
    Without LIBRARY: the library shipped with KLineage (read-only: --add and --admit need a
    LIBRARY); the JSON's "library" ({"path", "shipped", "provenance"}) names the one read.

    JSON: {"skills": [{"id", "intent", "pass", "admitted", "scope", "effect", "preconditions",
    "evidence", "risk"}]}; with --target each skill also has "score", "similarity" (per
    dimension: case, language, platform, prior_actions) and "via" (the dimensions whose top-k
    it made), in rank order, and the JSON has "target" and "skipped" ({id: reason}). With
    --admit the JSON also has "admission": {"admitted", "rejected", "untried", "trials"}.
    """
    from kir.errors import BadInputError
    from lineage.graph import Lineage
    from lineage.retrieval import Retriever, target_from_kernel
    from lineage.shipped import describe, open_library
    from lineage.skills import Library, lift

    if library is None and (add or admit_from):
        raise BadInputError("--add and --admit write into a library: name it (klineage skills "
                            "LIBRARY ...); the shipped library is read-only")
    if target is not None and case is None:
        raise BadInputError("--target needs --case NAME")
    if held_out and not admit_from:
        raise BadInputError("--held-out needs --admit LINEAGE (the lineages the cards came from)")
    if (executor != "local" or ray_address) and not admit_from:
        raise BadInputError("--executor and --ray-address go with --admit (only admission runs gates)")
    if target is not None:
        import gate

        gate.load_case(str(case))
    # Every lineage named is read before the library changes: a bad one leaves it as it was.
    to_add = [Lineage.load(p) for p in add]
    lineages = [Lineage.load(p) for p in admit_from]
    held = [Lineage.load(p) for p in held_out]
    if add:
        lib = Library.open(str(library), create=True)
        named = {"path": str(library), "shipped": False, "provenance": lib.provenance}
    else:
        lib, named = open_library(library)
    library = named["path"]
    for lineage in to_add:
        lib.add_all(lift(lineage))
    admission = None
    if admit_from:
        from gate.executor import open_executor
        from lineage.admission import admit
        from lineage.commands._common import Progress

        with (open_executor(executor, address=ray_address) as gates,
              Progress("admitting SkillCards", enabled=not as_json) as progress):
            tier = gates.concrete_tier(tier)
            width = jobs or (gates.width(tier) if gates.speculate else 1)
            admission = admit(lib, lineages, tier=tier, max_trials=max_trials, progress=progress,
                              held_out=held, jobs=max(1, width),
                              magnitude=magnitude, executor=gates).to_json()
        if not as_json:
            click.echo(f"admission: {len(admission['admitted'])} admitted, "
                       f"{len(admission['rejected'])} not admitted, {len(admission['untried'])} "
                       f"without a held-out context ({admission['trials']} trials)")
    if target is None:
        cards = lib.cards()
        if as_json:
            emit_json({"skills": [c.summary_json() for c in cards], "library": named,
                       **({"admission": admission} if admission is not None else {})})
        elif markdown:
            click.echo("\n".join(c.to_markdown() for c in cards))
        else:
            click.echo(describe(named))
            click.echo(f"{len(cards)} SkillCard(s) in {library} "
                       f"({sum(c.admitted for c in cards)} admitted)")
            for c in cards:
                click.echo(f"  {'+' if c.admitted else '?'} {c.id:42s} {_effect(c)}  "
                           f"{len(c.evidence)} evidence  cases {','.join(c.scope.get('cases', []))}")
        return
    result = Retriever(lib, k=k).retrieve(target_from_kernel(target, case, platform))
    if as_json:
        emit_json({"target": result.target.to_json(), "library": named,
                   "skills": [r.to_json() for r in result.cards],
                   "skipped": dict(result.skipped),
                   **({"admission": admission} if admission is not None else {})})
    elif markdown:
        click.echo("\n".join(r.card.to_markdown() for r in result.cards))
    else:
        click.echo(describe(named))
        click.echo(f"{len(result.cards)} admitted SkillCard(s) for {target} ({case}); "
                   f"{len(result.skipped)} skipped")
        for r in result.cards:
            click.echo(f"  {r.score:4.2f} {r.card.id:42s} {_effect(r.card)}  via {','.join(r.via)}")
        for cid, why in result.skipped.items():
            click.echo(f"  skipped {cid}: {why}")


def _effect(card: object) -> str:
    summary = getattr(card, "speedup", None)
    return f"{summary['geomean']:.2f}x" if summary else "untimed"
