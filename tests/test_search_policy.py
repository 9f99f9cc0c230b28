"""The optimize policy's order (`lineage.optimize._choose`): a move's expected gain weighed
against its expected gate cost and its evidence, and the state's own configuration as a move
of a CUDA kernel (its configuration rules' values: `lineage.moves.own_sweeps`).

The gate is scripted (verdicts with a time and the gate's seconds); materialization runs the
real rules on the CUDA style tier's LayerNorm start."""
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import pytest

import kir
from lineage.graph import Lineage
from lineage.optimize import SWEEP_PRIOR, _choose, _frontier, _move, _Option, _Run, _State, optimize
from lineage.retrieval import Retriever
from lineage.skills import Library, SkillCard
from passes.rewriter import DeterministicRewriter
from skill_helpers import ROOT, ScriptedGate

CASE = ROOT / "bench/styles/cuda/cu_layernorm"
START = CASE / "layernorm.cu"
REGISTERS = "the row in registers:"  # the comment row-registers writes before the row's array
NARROWED = "// launch-threads:"  # the line launch-threads writes before the block it changed


def _card(name: str, effect: float | None = None) -> SkillCard:
    """A CUDA card of pass `name`; `effect` its measured speedup (None: untimed)."""
    speedup = {"geomean": effect, "n": 1} if effect is not None else None
    return SkillCard(id=f"{name}.cuda.test", intent=name, pass_name=name, category="memory",
                     language="cuda", locus="kernel", effect={"speedup": speedup})


def _run(*, paced: bool, spread: float = 0.5) -> tuple[_Run, _State]:
    """A device-tier run at its start (a 70 s gate) with 8 gates left: `paced`, a time box of
    100 s binds (8 gates at 70 s do not fit), else no box."""
    run = _Run(None, None, None, Lineage(), "cuda", "x", "cuda", "device", "x",
               lambda e, d: None, 8, time.monotonic() + 100.0 if paced else None, (),
               Retriever([]), sweeps=False, spread=spread)
    start = _State("", None, None, 1.0, seconds=70.0, sid="s:0")
    run.states, run.best = [start], start
    return run, start


def _choose_among(run: _Run, options: list[_Option], monkeypatch: pytest.MonkeyPatch) -> _Option:
    monkeypatch.setattr("lineage.optimize._frontier", lambda state, r: list(options))
    return _choose(run)


@pytest.mark.parametrize("paced", [False, True])
def test_a_move_measured_to_pay_goes_first_only_while_the_box_binds(
        paced: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two untimed cards on the best kernel: one made a candidate 3% faster on this kernel (on
    another state), the other made none. While the budget binds the unmeasured one comes
    first (its upside, the spread of the library's effects, is whole); while the time box
    binds the measured gain comes first (no upside: a move without evidence of gain waits)."""
    run, start = _run(paced=paced)
    measured = _Option(start, "card", _card("row-cache"), 1)
    fresh = _Option(start, "card", _card("launch-bounds"), 0)
    run.observed[_move(measured)] = [math.log(1.03)]
    chosen = _choose_among(run, [fresh, measured], monkeypatch)
    assert chosen is (measured if paced else fresh)


def test_while_the_box_binds_a_measured_tie_waits_behind_an_unmeasured_move(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Time box binding: a card measured exactly even on this kernel and an unmeasured one
    have the same expected gain; the unmeasured one is taken first, whatever retrieval's rank;
    a card whose library evidence is a loss comes after both."""
    run, start = _run(paced=True)
    tie = _Option(start, "card", _card("pragma-unroll"), 0)
    fresh = _Option(start, "card", _card("row-cache"), 2)
    loss = _Option(start, "card", _card("restrict-readonly", 0.99), 1, math.log(0.99))
    run.observed[_move(tie)] = [0.0]
    assert _choose_among(run, [tie, loss, fresh], monkeypatch) is fresh
    fresh.done = True
    assert _choose_among(run, [tie, loss], monkeypatch) is tie


def test_a_pass_measured_flat_through_one_card_yields_to_an_unmeasured_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Budget binding: two cards of one pass and one of another, the second pass's prior the
    lower. Before anything is measured the first pass's fresh card leads; once its other card
    measured even on this kernel, that measurement counts for the fresh card too (at
    `KIN_WEIGHT`): its expected gain falls and its upside shrinks, and the other pass goes
    first. A card of another kind of the same pass (a recorded sweep) is not its kin."""
    from lineage.optimize import KIN_WEIGHT, _gain

    def card(name: str, tag: str) -> SkillCard:
        return dataclasses.replace(_card(name), id=f"{name}.cuda.{tag}")

    run, start = _run(paced=False)
    flat = _Option(start, "card", card("pragma-unroll", "a"), 0, 0.1)
    fresh = _Option(start, "card", card("pragma-unroll", "b"), 1, 0.1)
    other = _Option(start, "card", card("row-cache", "c"), 2, 0.05)
    swept = _Option(start, "recorded", card("pragma-unroll", "a"), 3, 0.1)
    for o in (flat, fresh, other, swept):
        run.options[(id(start), o.kind, o.card.id)] = o
    flat.done = True
    assert _choose_among(run, [fresh, other], monkeypatch) is fresh
    run.observed[_move(flat)] = [0.0]
    assert math.log(_gain(fresh, run)) == pytest.approx(0.5 * 0.1 / (0.5 + KIN_WEIGHT))
    assert math.log(_gain(swept, run)) == pytest.approx(0.1)
    assert _choose_among(run, [fresh, other], monkeypatch) is other


def test_a_configuration_card_measured_flat_counts_for_every_configuration_card(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Budget binding: rewrites by launch-parameter cards of different passes (tile sizes,
    warps) each move one value of the configuration, so each one's measurement is kin to the
    others' (at `KIN_WEIGHT`), while a structural card is not. Before anything is measured the
    warps card (the higher prior) leads the structural one; once the tile card measured even,
    the warps card's gain falls and its upside shrinks, and the structural card goes first. A
    sweep (own or plain: a neighbourhood, not one value) is no card's kin."""
    from lineage.moves import sweep_card
    from lineage.optimize import KIN_WEIGHT, _gain

    def card(name: str, tag: str) -> SkillCard:
        return dataclasses.replace(_card(name), id=f"{name}.cuda.{tag}")

    run, start = _run(paced=False)
    tiles = _Option(start, "card", card("tile-sizes", "a"), 0, 0.1)
    warps = _Option(start, "card", card("num-warps", "b"), 1, 0.1)
    own = _Option(start, "own", sweep_card("own", "cuda"), 2, math.log(SWEEP_PRIOR))
    plain = _Option(start, "plain", sweep_card("plain", "cuda"), 3, math.log(SWEEP_PRIOR))
    structural = _Option(start, "card", card("row-cache", "c"), 4, 0.06)
    for o in (tiles, warps, own, plain, structural):
        run.options[(id(start), o.kind, o.card.id)] = o
    tiles.done = own.done = plain.done = True
    assert _choose_among(run, [warps, structural], monkeypatch) is warps
    run.observed[_move(plain)] = [1.0]
    run.observed[_move(own)] = [0.0]
    assert math.log(_gain(warps, run)) == pytest.approx(0.1)
    run.observed[_move(tiles)] = [0.0]
    assert math.log(_gain(warps, run)) == pytest.approx(0.5 * 0.1 / (0.5 + KIN_WEIGHT))
    assert math.log(_gain(structural, run)) == pytest.approx(0.06)
    assert _choose_among(run, [warps, structural], monkeypatch) is structural


def test_the_upside_is_the_spread_of_the_librarys_measured_effects() -> None:
    from lineage.moves import effect_spread

    cards = [_card("a", 1.0), _card("b", math.e), _card("c")]  # c untimed: not counted
    assert effect_spread(cards) == pytest.approx(0.5)
    assert effect_spread([_card("a", 2.0), _card("c")]) == 0.0


def test_a_cuda_kernels_own_sweep_is_its_configuration_rules_values() -> None:
    """The LayerNorm start (one block of 256 threads per row, launched by its host module):
    the own sweep is launch-threads (every option of the rule a tunable) at the rule's
    default, 128 threads, then 64; the candidates are recorded under the rule's name."""
    import gate
    from lineage.moves import own_sweeps
    from passes.base import PassContext

    ctx = PassContext.for_case(gate.load_case(str(CASE)).ref, tier="device")
    ir = kir.parse(START.read_text(), "cuda", path=START)
    made = list(own_sweeps(ir, ctx=ctx))
    assert [m.options.get("threads") for m in made] == [128, 64]
    assert {m.card.pass_name for m in made} == {"launch-threads"}
    assert all(NARROWED in m.ir.unparse() and m.rewriter == "config-sweep" for m in made)
    assert "#define NT 128" in made[0].ir.unparse()


def test_a_cuda_start_is_swept_before_its_untimed_cards(tmp_path: Path) -> None:
    """Device tier, the shipped library (its row cards untimed): the start's frontier holds
    its own sweep at the sweep prior and no plain sweep (the control's list is Triton's), and
    the policy takes the sweep first."""
    import gate
    from lineage.shipped import open_library
    from passes.base import PassContext

    lib, _ = open_library(None)
    cards = tuple(lib.cards(admitted_only=True))
    case = gate.load_case(str(CASE))
    run = _Run(None, PassContext.for_case(case.ref, tier="device"), None, Lineage(), "cuda",
               case.ref, "cuda", "device", str(START), lambda e, d: None, 8, None, cards,
               Retriever(cards), spread=0.5)
    start = _State(START.read_text(), kir.parse(START.read_text(), "cuda", path=START), None,
                   1.0, seconds=5.0, sid="s:0")
    run.states, run.best = [start], start
    frontier = _frontier(start, run)
    kinds = {o.kind for o in frontier}
    assert "own" in kinds and "plain" not in kinds
    assert any(o.kind == "card" and o.prior == 0.0 for o in frontier)  # untimed cards
    chosen = _choose(run)
    assert chosen.kind == "own" and chosen.prior == pytest.approx(math.log(SWEEP_PRIOR))


def _library(tmp_path: Path, passes: set[str]) -> Library:
    from lineage.shipped import open_library

    shipped, _ = open_library(None)
    lib = Library.open(tmp_path / "lib", create=True)
    for card in shipped.cards(admitted_only=True):
        if card.pass_name in passes and card.language == "cuda":
            lib.put(card)
    return lib


@pytest.mark.parametrize("narrow_alone", [0.97, 1.03])
def test_a_narrower_launch_is_composed_with_the_row_held_in_registers(
        tmp_path: Path, narrow_alone: float) -> None:
    """The LayerNorm start under a scripted gate: the row held in registers pays 20%, a block
    of 128 threads pays only on top of it (alone it is 3% faster or 3% slower); cards that do
    nothing here (launch bounds, restrict, unroll) sit in the library. Within 8 gates the run
    keeps both, in either order: the sweep measured on the start does not speak for the
    register form (another structure), which is swept again once it is the best."""
    lib = _library(tmp_path, {"row-registers", "launch-bounds", "restrict-readonly",
                              "pragma-unroll"})

    def ms(source: str) -> float:
        registers, narrow = REGISTERS in source, NARROWED in source
        return 10.0 * (0.8 if registers else 1.0) * (
            (0.85 if registers else narrow_alone) if narrow else 1.0)

    scripted = ScriptedGate(ms=ms)

    def gate(source: str, language: object, case: object, tier: object, **kw: object):
        return dataclasses.replace(scripted(source, language, case, tier, **kw),
                                   phases=(("timing", 5.0),))

    result = optimize(START, str(CASE), lib, tier="device", out=tmp_path / "out",
                      budget_steps=8, rewriter=DeterministicRewriter(), check_fn=gate)
    assert result.best_ms == pytest.approx(6.8)
    assert {s.pass_name for s in result.applied} >= {"row-registers", "launch-threads"}
    lineage = Lineage.load(tmp_path / "out" / "lineage.json")
    assert lineage.transitions_of("launch-threads")


def test_a_tie_made_by_a_card_takes_no_candidate_of_that_card_again(tmp_path: Path) -> None:
    """A card's candidate that tied with the best is a state of the run, but the card is not a
    move of it (as a sweep-made state is not swept by its own kind): otherwise each tie it
    makes takes `CANDIDATES_PER_CARD` more of its candidates, a chain that escapes the cap.
    Once such a state is the best, the card is a move of it again; its other cards stay moves
    of the tie."""
    lib = _library(tmp_path, {"launch-bounds", "restrict-readonly", "pragma-unroll"})
    cards = tuple(lib.cards(admitted_only=True))
    run = _Run(None, None, None, Lineage(), "cuda", str(CASE), "cuda", "device", "x",
               lambda e, d: None, 8, None, cards, Retriever(list(cards)), sweeps=False)
    ir = kir.parse(START.read_text(), "cuda", path=START)
    start = _State(START.read_text(), ir, None, 10.0, seconds=5.0, sid="s:0")
    run.states, run.best = [start], start
    offered = {o.card.id: o.card for o in _frontier(start, run) if o.kind == "card"}
    assert len(offered) >= 2
    card = next(iter(offered.values()))
    tie = _State(START.read_text() + "\n", kir.parse(START.read_text(), "cuda", path=START), None,
                 10.01, seconds=5.0, parent=start, card=card)
    run.states.append(tie)
    on_tie = {o.card.id for o in _frontier(tie, run) if o.kind == "card"}
    assert card.id not in on_tie and on_tie == set(offered) - {card.id}
    run.best = tie
    assert card.id in {o.card.id for o in _frontier(tie, run) if o.kind == "card"}


def test_an_own_sweep_made_best_is_swept_around_its_pick_again_a_fixed_list_is_not() -> None:
    """A state an own sweep made, while it is the best, still has its own sweep as a move: the
    sweep is around the configuration its autotuner picked, which moved, so the search climbs
    from pick to pick. A state the plain (fixed) list made is not plain-swept again, and a
    sweep-made state that is not the best is not swept at all."""
    from lineage.moves import Materialized, sweep_card

    start_path = ROOT / "bench/heldout/mm1024/mm_naive.py"
    source = start_path.read_text()
    ir = kir.parse(source, "triton", path=start_path)
    run = _Run(None, None, None, Lineage(), "triton", "x", "cuda", "device", "x",
               lambda e, d: None, 8, None, (), Retriever([]), sweeps=True)
    start = _State(source, ir, None, 2.0, seconds=5.0, sid="s:0")

    def made_by(kind: str, ms: float) -> _State:
        made = Materialized(sweep_card(kind, "triton"), ir, None, "config-sweep",
                            options={kind: True, "sweep": []})
        return _State(source, ir, None, ms, seconds=5.0, parent=start, made=made)

    by_own, by_plain = made_by("own", 1.0), made_by("plain", 1.5)
    run.states = [start, by_own, by_plain]
    sweeps = ("plain", "own", "recorded")
    for best, offered in ((by_own, {"plain", "own"}), (by_plain, {"own"})):
        run.best = best
        assert {o.kind for o in _frontier(best, run) if o.kind in sweeps} == offered
    run.best = by_own
    assert not {o.kind for o in _frontier(by_plain, run)} & set(sweeps)


def test_a_launch_card_on_a_state_an_autotuner_configures_expects_a_sweeps_gain_at_most() -> None:
    """A launch-parameter card's recorded effect was measured from a configuration nobody swept
    (its lineage's de-optimized tile, warps or stages). On a state whose configuration an
    autotuner already searched, its prior is the sweep's at most; a structural card keeps its
    own, and on a state no autotuner configures the launch card keeps its own too."""
    from lineage.optimize import _prior
    from lineage.retrieval import Target

    def triton_card(name: str, effect: float) -> SkillCard:
        return dataclasses.replace(_card(name, effect), id=f"{name}.triton.test", language="triton",
                                   scope={"cases": ["x"], "languages": ["triton"]})

    tiles, structural = triton_card("tile-sizes", 1.6), triton_card("tma-descriptors", 1.6)
    fixed = Target("triton", "x", features=({"pass": "tile-sizes", "anchor": "k"},))
    swept = Target("triton", "x", features=({"pass": "tile-sizes", "anchor": "k"},
                                            {"pass": "autotune", "anchor": "k"}))
    assert _prior(tiles, fixed) > math.log(1.5)
    assert _prior(tiles, swept) == pytest.approx(math.log(SWEEP_PRIOR))
    assert _prior(structural, swept) == pytest.approx(_prior(structural, fixed))
    assert _prior(structural, swept) > math.log(1.5)


@pytest.mark.parametrize("kind", ["plain", "rule"])
def test_a_tie_that_only_reconfigures_its_state_is_not_kept_as_a_state(kind: str) -> None:
    """A passing candidate within MIN_GAIN of the best is kept as a state (its moves barely
    discounted), unless it only reconfigures its state: a sweep's list (or a launch card's
    tiles) leaves the kernel's structure as it was, so every structural move of the tie is one
    of its state's again (on the H200 a pinned tie gated the persistent grid a second time).
    A tie that changes the structure (here a rule's rewrite) is kept."""
    from gate import Tier, Timing, Verdict
    from lineage.moves import rule_card, sweep_card
    from lineage.optimize import _pull

    start_path = ROOT / "bench/heldout/mm1024/mm_naive.py"
    source = start_path.read_text()
    ir = kir.parse(source, "triton", path=start_path)
    run = _Run(None, None, lambda src, boxed=True: Verdict(True, Tier.DEVICE, "timing", timing=Timing(2.0, 1.0)),
               Lineage(), "triton", "x", "cuda", "device", "x", lambda e, d: None, 8, None, (),
               Retriever([]), sweeps=True)
    start = _State(source, ir, None, 2.0, seconds=5.0, sid="s:0")
    run.states, run.best = [start], start
    card = sweep_card("plain", "triton") if kind == "plain" else rule_card("k-major-operands", "triton")
    option = next((o for o in _frontier(start, run) if o.card.id == card.id), None)
    assert option is not None
    _pull(option, run)
    assert run.gated == 1 and run.best is start
    assert len(run.states) == (1 if kind == "plain" else 2)
