"""Bundle moves: a card materialized together with the steps its evidence ran with.

A card's evidence records which optimizations its lineage's states had when the step was
taken (`scope["prior_actions"]`). Where a state lacks some of them, the card alone is a step
out of the context it was measured in: a load path that pays on a persistent grid in grouped
order may lose on a kernel with neither, and each of those steps may lose alone too. A
*bundle* is the card with the retrieved cards of the structural passes its evidence ran with
that the state lacks, applied one after another in the order the lineage took them, as one
candidate (`bundle_candidates`): the search then measures the joint state its evidence
measured, in one gate.

- Members (`bundles`): for each such pass, the first retrieved card of it (retrieval's rank).
  A launch-parameter card (`lineage.transfer.LAUNCH_PASSES`) is neither a member nor a
  bundle's card: its step is a configuration, which the list written around the bundle's
  state (`lineage.moves.around_parent`) sweeps.
- Order (`lineage_order`): the lineage's steps are the transitions the library's cards
  record as evidence (`t:<src>:<dst>:<pass>`); walking back from the card's source states, a
  pass met further back comes first, and a pass the card's evidence ran with that the walk does
  not meet (the library does not record its step) was there before it: it comes before them.
- A bundle is made only where each member takes a site on the state the members before it
  made: one that does not refuses the whole bundle (no candidate, no gate spent).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

from lineage.moves import (MAX_SITES, Materialized, around_parent, feature_appears, kernel_of,
                           kernel_order, left_out, materializations)
from lineage.retrieval import Target
from lineage.skills import SkillCard


def _steps(library: Sequence[SkillCard]) -> dict[str, list[tuple[str, str]]]:
    """Destination state -> (source state, pass) of every transition the cards record as
    evidence (`lineage.graph.Transition.id`: `t:<src>:<dst>:<pass>`)."""
    back: dict[str, list[tuple[str, str]]] = {}
    for card in library:
        for tid in card.evidence:
            parts = str(tid).split(":", 3)
            if len(parts) == 4 and parts[0] == "t":
                back.setdefault(parts[2], []).append((parts[1], parts[3]))
    return back


def lineage_order(card: SkillCard, library: Sequence[SkillCard]) -> dict[str, float]:
    """Pass -> how many steps before `card`'s own step its lineage took it (the fewest over
    the card's pieces of evidence, walking back through the library's recorded transitions);
    a pass of the card's prior actions the walk does not meet: infinity (it was there first)."""
    back, out = _steps(library), {}
    frontier = [str(t).split(":", 3)[1] for t in card.evidence if str(t).count(":") >= 3]
    seen, depth = set(frontier), 0
    while frontier:
        depth += 1
        nxt = []
        for state in frontier:
            for src, name in back.get(state, ()):
                out[name] = min(out.get(name, depth), depth)
                if src not in seen:
                    seen.add(src)
                    nxt.append(src)
        frontier = nxt
    return {**{p: float("inf") for p in card.scope.get("prior_actions") or ()}, **out}


def bundles(retrieved: Sequence[SkillCard], present: Collection[str],
            library: Sequence[SkillCard]) -> dict[str, tuple[SkillCard, ...]]:
    """Card id -> its bundle (its members in the lineage's order, then the card) for each
    retrieved structural card whose evidence ran with a structural pass the state lacks
    (`present`: the state's passes) that another retrieved card performs. `library`: the
    cards whose evidence records the lineages' steps."""
    from lineage.transfer import LAUNCH_PASSES  # noqa: PLC0415

    out: dict[str, tuple[SkillCard, ...]] = {}
    for card in (c for c in retrieved if c.pass_name not in LAUNCH_PASSES):
        lacking = set(card.scope.get("prior_actions") or ()) - set(present) - LAUNCH_PASSES \
            - {card.pass_name}
        members = {}
        for other in retrieved:
            if other.pass_name in lacking and other.language == card.language:
                members.setdefault(other.pass_name, other)  # retrieval's rank: the first
        if not members:
            continue
        order = lineage_order(card, library)
        ranked = sorted(members.values(), key=lambda m: (
            -order.get(m.pass_name, 0.0), len(m.scope.get("prior_actions") or ())))
        out[card.id] = (*ranked, card)
    return out


def bundle_candidates(chain: Sequence[SkillCard], state: Any, *, ctx: Any, rewriter: Any,
                      heavy: bool = False, around: bool = False) -> Iterator[Materialized]:
    """The bundle `chain` (members, then the card) on `state` (its `ir`, `verdict`): each card
    in turn at every site it takes on the kernel the cards before it made (at most
    `MAX_SITES`; its first materialization that makes its pass appear, `feature_appears`;
    sites in kernels the card does not act on, `left_out`, left out, in `kernel_order`), as
    one candidate of the last card, its site that card's first (its options: `bundle`, the
    cards' ids, and `sites`, each card's first site); `around`: under a list around the
    state's configuration (`lineage.moves.around_parent`). A card that takes no site there
    refuses the bundle: one candidate without IR, its refusals naming that card."""
    card, ir, first, done = chain[-1], state.ir, [], []
    order = kernel_order(state)
    for member in chain:
        skipped = left_out(member, state)
        for _ in range(MAX_SITES):
            made = next((m for m in materializations(
                member, ir, rewriter, ctx, sweeps=False,
                skip_site=lambda site: kernel_of(site.anchor) in skipped,  # noqa: B023
                site_order=order)
                         if m.ok and feature_appears(member.pass_name, ir, m.ir)), None)
            if made is None:
                break
            if len(first) == len(done):
                first.append(made)
            ir = made.ir
        if len(first) == len(done):
            after = f" after {', '.join(done)}" if done else ""
            yield Materialized(card, None, None, refusals=(
                f"bundle: {member.id} ({member.pass_name}) takes no site{after}",))
            return
        done.append(member.pass_name)
    bundle = Materialized(card, ir, first[-1].site, first[-1].rewriter, (),
                          {"bundle": [m.id for m in chain],
                           "sites": [m.site.anchor for m in first]})
    yield around_parent(bundle, state, ctx=ctx, heavy=heavy) if around else bundle


def joint_prior(chain: Sequence[SkillCard], target: Target,
                prior: Callable[[SkillCard, Target], float]) -> float:
    """log of a bundle's expected gain on `target`: the sum of its cards' log priors (`prior`),
    each read on the state the cards before it make (`target` with their passes present: a
    card whose evidence ran with them matches its scope there), i.e. the product of their
    scope-matched measured effects."""
    total, features = 0.0, tuple(target.features)
    for card in chain:
        total += prior(card, dataclasses.replace(target, features=features))
        features = (*features, {"pass": card.pass_name, "anchor": ""})
    return total


__all__ = ["bundle_candidates", "bundles", "joint_prior", "lineage_order"]
