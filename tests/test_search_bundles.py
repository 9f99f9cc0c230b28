"""A bundle move (`lineage.bundles`): a card with the retrieved steps its evidence ran with that
the state lacks, applied in the order the lineage took them, as one candidate. Two steps that
each lose alone and win together are reached in one gate; a member that takes no site on the
state the members before it made refuses the whole bundle, at no gate.

The gate is scripted: a source's time depends on which of two optimizations it has (read by
the passes' own detectors); materialization runs the real rules on the held-out batched
product's start, with cards of the shipped library."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import kir
from lineage.bundles import bundle_candidates, bundles, lineage_order
from lineage.skills import Library, SkillCard
from passes.registry import get_pass
from passes.rewriter import DeterministicRewriter
from skill_helpers import ROOT, ScriptedGate

CASE = ROOT / "bench/heldout/bmm"
START = CASE / "bmm_start.py"
GROUPED, PERSISTENT = "grouped-ordering", "persistent-grid"


def _has(source: str, name: str) -> bool:
    return any(s.present for s in get_pass(name)().sites(kir.parse(source, "triton")))


def _ms(source: str) -> float:
    """The scripted cost model: the start 10 ms; grouped order alone 5% slower, a persistent
    grid alone 8% slower, both together 20% faster; the start under an autotune list (the
    control, a sweep) 3% slower."""
    grouped, persistent = _has(source, GROUPED), _has(source, PERSISTENT)
    if grouped and persistent:
        return 8.0
    if grouped or persistent:
        return 10.5 if grouped else 10.8
    return 10.3 if "triton.autotune" in source else 10.0


def _shipped(pass_name: str, *, case: str) -> SkillCard:
    from lineage.shipped import open_library

    shipped, _ = open_library(None)
    return min((c for c in shipped.cards(admitted_only=True) if c.pass_name == pass_name
                and c.language == "triton" and case in (c.scope.get("cases") or ())),
               key=lambda c: c.id)


def _library(tmp_path: Path, *cards: SkillCard) -> Library:
    lib = Library.open(tmp_path / "lib", create=True)
    for card in cards:
        lib.put(card)
    return lib


@dataclasses.dataclass
class _Kernel:
    ir: object
    verdict: object = None
    path: tuple = ()
    used_up: dict = dataclasses.field(default_factory=dict)


def _ctx():
    import gate
    from passes.base import PassContext

    return PassContext.for_case(gate.load_case(str(CASE)).ref, tier="device")


def test_the_persistent_cards_bundle_takes_its_lineages_grouped_step_first() -> None:
    """The shipped persistent-grid card's evidence ran with grouped ordering (its lineage took
    it one step before); on the start, which has neither, its bundle is the retrieved grouped
    card, then it; the grouped card (its evidence ran with configuration steps alone) has none."""
    grouped, persistent = _shipped(GROUPED, case="trmm"), _shipped(PERSISTENT, case="gemm")
    assert GROUPED in persistent.scope["prior_actions"]
    order = lineage_order(persistent, [grouped, persistent, _shipped(GROUPED, case="gemm")])
    assert order[GROUPED] == 1
    found = bundles([persistent, grouped], {"tensor-core-dot"}, [grouped, persistent])
    assert list(found) == [persistent.id]
    assert [c.id for c in found[persistent.id]] == [grouped.id, persistent.id]
    assert bundles([persistent, grouped], {"tensor-core-dot", GROUPED}, [persistent]) == {}


@pytest.mark.parametrize("with_bundles", [True, False], ids=["bundles", "bundles-off"])
def test_two_steps_that_lose_alone_are_reached_together(tmp_path: Path, with_bundles: bool) -> None:
    """The whole loop on the start under the scripted gate, four gates. Without bundles the
    control and the own sweep lose, then each card alone loses (grouped 10.5 ms, persistent
    10.8 ms over the start's 10) and the run ends on the start. With them, the persistent card's
    bundle (grouped ordering, then the persistent grid) is one candidate, measured 8 ms: the
    best, with both optimizations, recorded as one step whose options name the bundle."""
    from lineage.optimize import optimize

    grouped, persistent = _shipped(GROUPED, case="trmm"), _shipped(PERSISTENT, case="gemm")
    scripted = ScriptedGate(ms=_ms)
    result = optimize(START, str(CASE), _library(tmp_path, grouped, persistent), tier="device",
                      out=tmp_path / "out", budget_steps=4, rewriter=DeterministicRewriter(),
                      check_fn=scripted, bundles=with_bundles)
    timed = [_ms(s) for s in scripted.seen[1:]]
    assert len(timed) == 4 and timed[0] == pytest.approx(10.3)  # the control first
    best = Path(result.best_path).read_text()
    if with_bundles:
        assert result.best_ms == pytest.approx(8.0)
        assert _has(best, GROUPED) and _has(best, PERSISTENT)
        lineage = json.loads((tmp_path / "out" / "lineage.json").read_text())
        assert [grouped.id, persistent.id] in [
            (n.get("options") or {}).get("bundle") for n in lineage["nodes"]]
    else:
        assert sorted(timed[2:]) == [pytest.approx(10.5), pytest.approx(10.8)]
        assert result.best_ms == pytest.approx(10.0)
        assert not _has(best, GROUPED) and not _has(best, PERSISTENT)


def test_a_member_without_a_site_refuses_the_bundle(tmp_path: Path) -> None:
    """A bundle with a member that has no site on the batched product (an exp2 fold of a
    softmax): no candidate, the refusal names that member and the steps before it; in the loop
    the refused bundle costs no gate."""
    grouped, persistent = _shipped(GROUPED, case="trmm"), _shipped(PERSISTENT, case="gemm")
    fold = _shipped("exp2-fold", case="fmha")
    state = _Kernel(kir.parse(START.read_text(), "triton"))
    kw = {"ctx": _ctx(), "rewriter": DeterministicRewriter()}
    [whole] = list(bundle_candidates((grouped, persistent), state, **kw))
    assert whole.ok and _has(whole.ir.unparse(), GROUPED) and _has(whole.ir.unparse(), PERSISTENT)
    assert whole.options["bundle"] == [grouped.id, persistent.id]
    [refused] = list(bundle_candidates((grouped, fold, persistent), state, **kw))
    assert not refused.ok and refused.card is persistent
    assert refused.refusals == (f"bundle: {fold.id} (exp2-fold) takes no site after {GROUPED}",)

    from lineage.optimize import optimize

    needs_fold = dataclasses.replace(persistent, scope={
        **persistent.scope, "prior_actions": [*persistent.scope["prior_actions"], "exp2-fold"]})
    scripted = ScriptedGate(ms=_ms)
    result = optimize(START, str(CASE), _library(tmp_path, grouped, needs_fold, fold),
                      tier="device", out=tmp_path / "out", budget_steps=4,
                      rewriter=DeterministicRewriter(), check_fn=scripted)
    assert not any(_has(s, GROUPED) and _has(s, PERSISTENT) for s in scripted.seen)
    assert any(s.stage == "materialize" and "exp2-fold) takes no site" in s.reason
               for s in result.rejected)
    assert result.best_ms == pytest.approx(10.0)


def test_a_bundle_leaves_out_a_kernel_the_profile_finds_cold() -> None:
    """Like the loop's single moves, a bundle takes no site in a kernel under the cold share of
    its state's profile: here the profile names another kernel only, so the batched product's
    kernel (launched, never timed) is cold and the bundle is refused at its first member."""
    from gate import Tier, Timing, Verdict
    from gate.verdict import VariantTiming

    grouped, persistent = _shipped(GROUPED, case="trmm"), _shipped(PERSISTENT, case="gemm")
    ir = kir.parse(START.read_text(), "triton")
    kw = {"ctx": _ctx(), "rewriter": DeterministicRewriter()}
    timed = Verdict(True, Tier.DEVICE, "timing", timing=Timing(
        1.0, 1.0, (VariantTiming("v", 1.0, 1.0, (("elsewhere", 1.0),)),)))
    [whole] = list(bundle_candidates((grouped, persistent), _Kernel(ir), **kw))
    assert whole.ok
    [refused] = list(bundle_candidates((grouped, persistent), _Kernel(ir, timed), **kw))
    assert not refused.ok and refused.refusals == (f"bundle: {grouped.id} ({GROUPED}) takes no site",)
