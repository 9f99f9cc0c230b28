"""The optimize loop: retrieval -> materialization -> gate -> keep the best, recorded as a lineage.

The loop tests script the gate's verdicts (`check_fn`) to pin down what the loop does with
each outcome; materialization runs the real passes on real kernel text.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kir.errors import BadInputError
from lineage.graph import Lineage
from lineage.optimize import (Step, distinct_rejections, materialize, materializations,
                               optimize)
from passes.rewriter import DeterministicRewriter
import kir
from skill_helpers import ROOT, ScriptedGate, gemm_cards, library, naive_source, packed_library

# The held-out library's cards (a copy of a run's library: the tests do not depend on results).
HELDOUT_LIBRARY = packed_library("heldout_all")


def _target(tmp_path: Path) -> Path:
    path = tmp_path / "naive.py"
    path.write_text(naive_source("gemm"))
    return path


def _heldout_library(tmp_path: Path, ids: set[str]):
    """A library under `tmp_path` holding the held-out library's cards `ids` (each must exist)."""
    from lineage.skills import Library

    lib = Library.open(tmp_path / "lib", create=True)
    cards = [c for c in Library.open(HELDOUT_LIBRARY).cards()
             if c.id in ids]
    assert {c.id for c in cards} == ids
    for card in cards:
        lib.put(card)
    return lib


def test_materialize_runs_the_pass_rule_at_the_cards_site() -> None:
    cards = gemm_cards(admitted=True)
    ir = kir.parse(naive_source("gemm"), language="triton")
    made = materialize(cards["software-pipelining"], ir, DeterministicRewriter())
    assert made.ok and made.rewriter == "deterministic"
    assert made.site.anchor == "triton:matmul_kernel/for[0]"
    assert "num_stages" in made.ir.unparse() and "num_stages" not in ir.unparse()
    none = materialize(cards["tensor-core-dot"], kir.parse(naive_source("gemm").replace(
        "tl.sum(", "tl.max("), language="triton"), DeterministicRewriter())
    assert not none.ok and none.refusals


def test_optimize_never_keeps_a_candidate_that_fails_the_gate(tmp_path: Path) -> None:
    lib = library(tmp_path, admitted=True)
    # The pipelined K loop (tl.range) fails the gate.
    gate = ScriptedGate(fails=lambda s: "tl.range(" in s)
    result = optimize(_target(tmp_path), "gemm", lib, tier="interpret", out=tmp_path / "out",
                      rewriter=DeterministicRewriter(), check_fn=gate, config_sweeps=False)
    best = result.best_path.read_text()
    assert "tl.range(" not in best and "@triton.autotune" in best
    assert {s.pass_name for s in result.applied} == {"tensor-core-dot", "autotune"}
    failed = [s for s in result.rejected if s.pass_name == "software-pipelining"]
    assert failed and failed[0].stage == "correctness" and "wrong_output" in failed[0].reason
    assert result.best_verdict["ok"] is True and result.termination == "exhausted"
    # Every gated source that was kept passed; the failing ones were all gated and dropped.
    assert any("tl.range(" in s for s in gate.seen)
    # The run is a lineage: start (root) -> kept state, rejections kept as risk.
    lin = Lineage.load(result.lineage_path)
    assert len(lin.states()) == 3 and len(lin.transitions()) == 2
    assert {lin.node(t)["pass"] for t in lin.transitions()} == {"tensor-core-dot", "autotune"}
    assert {lin.node(t)["rederived_by"] for t in lin.transitions()} == {"deterministic"}
    assert all(lin.node(t)["diff"] for t in lin.transitions())  # structured diff of each step
    assert lin.roles("root") and "best" in lin.node(lin.roles("best")[0])["roles"]
    assert any(r["pass"] == "software-pipelining" for r in lin.graph.graph["rejected"])
    saved = json.loads((tmp_path / "out" / "result.json").read_text())
    assert saved["best"]["path"] == str(result.best_path) and saved["spent_usd"] == 0


def test_device_tier_keeps_the_fastest_passing_kernel(tmp_path: Path) -> None:
    lib = library(tmp_path, admitted=True)

    def ms(source: str) -> float:
        return 10.0 - 2.0 * ("tl.range(" in source) - 1.0 * ("autotune" in source)

    # Pipelining alone is fastest (8 ms), then both (7 ms) fails the gate: best is 8 ms.
    gate = ScriptedGate(fails=lambda s: "tl.range(" in s and "autotune" in s, ms=ms)
    result = optimize(_target(tmp_path), "gemm", lib, tier="device", out=tmp_path / "out",
                      rewriter=DeterministicRewriter(), check_fn=gate, config_sweeps=False)
    assert result.start_ms == 10.0 and result.best_ms == 8.0
    # the path may pass through a tie (a stone); the step that paid is the pipelining one
    assert result.applied[-1].pass_name == "software-pipelining"
    assert result.applied[-1].speedup == pytest.approx(1.25)
    assert "autotune" not in result.best_path.read_text()
    # A candidate that passes but is slower is not kept either.
    slower = ScriptedGate(ms=lambda s: 10.0 + ("tl.range(" in s) + ("autotune" in s))
    again = optimize(_target(tmp_path), "gemm", lib, tier="device", out=tmp_path / "o2",
                     rewriter=DeterministicRewriter(), check_fn=slower, config_sweeps=False)
    assert again.applied == () and {s.stage for s in again.rejected} >= {"profile"}
    assert again.best_path.read_text() == naive_source("gemm")


def test_budget_steps_bound_the_gated_candidates(tmp_path: Path) -> None:
    lib = library(tmp_path, admitted=True)
    gate = ScriptedGate(fails=lambda s: True if len(gate.seen) > 1 else False)
    result = optimize(_target(tmp_path), "gemm", lib, tier="interpret", out=tmp_path / "out",
                      budget_steps=1, rewriter=DeterministicRewriter(), check_fn=gate)
    assert len(gate.seen) == 2  # the start kernel and one candidate
    assert result.termination == "budget-steps"


def test_bad_inputs(tmp_path: Path) -> None:
    lib = library(tmp_path, admitted=True)
    with pytest.raises(BadInputError, match="no such kernel"):
        optimize(tmp_path / "nope.py", "gemm", lib, tier="interpret")
    with pytest.raises(BadInputError, match="fails the gate"):
        optimize(_target(tmp_path), "gemm", lib, tier="interpret", out=tmp_path / "o",
                 check_fn=ScriptedGate(fails=lambda s: True))
    proc = subprocess.run([sys.executable, "-m", "lineage", "optimize", str(_target(tmp_path)),
                           "--case", "gemm", "--library", str(tmp_path / "missing"), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "no such SkillCard library" in proc.stderr


def _llm_card(tmp_path: Path):
    import dataclasses

    from lineage.skills import Library

    base = gemm_cards(admitted=True)["tensor-core-dot"]
    # the borrowed carrier's recorded step is tensor-core-dot's, not this intent's: dropped, so
    # no transplant stands in for the LLM
    carrier = {k: v for k, v in base.carrier.items() if k != "edit"}
    card = dataclasses.replace(base, id="fma-rewrite.triton.0001", pass_name="fma-rewrite",
                               carrier=carrier,
                               requires=(), provides=(), options={}, intent="fold the scale",
                               anchor={"query": 'kernel >> call[name="tl.store"]',
                                       "locus": "call:tl.store", "present_loci": []})
    lib = Library.open(tmp_path / "llmlib", create=True)
    lib.put(card)
    return lib


def test_optimize_materializes_a_rule_less_card_with_the_llm_rewriter(tmp_path: Path) -> None:
    from test_llm_rewriter import Mock, _message, _reply

    from passes.llm_rewriter import LLMConfig
    from passes.rewriter import ChainRewriter

    lib = _llm_card(tmp_path)
    source = naive_source("gemm")
    store = next(line for line in source.splitlines(keepends=True) if "tl.store(" in line)
    new_store = store.replace("acc.to(tl.float16)", "acc.to(c_ptr.dtype.element_ty)")
    mock = Mock(_message(_reply(new_store)))
    llm, _ = mock.rewriter(LLMConfig(budget_usd=1.0))
    result = optimize(_target(tmp_path), "gemm", lib, tier="interpret", out=tmp_path / "out",
                      rewriter=ChainRewriter((DeterministicRewriter(), llm)),
                      check_fn=ScriptedGate())
    assert [(s.pass_name, s.rewriter) for s in result.applied] == [("fma-rewrite", "llm")]
    assert "c_ptr.dtype.element_ty" in result.best_path.read_text()
    assert result.spent_usd == pytest.approx(llm.spent_usd) and result.spent_usd > 0
    # The library travelled as the cached prefix; the card's carrier in the prompt.
    body = mock.requests[0]
    assert "fold the scale" in body["system"][-1]["text"] or "fold the scale" in body["messages"][0]["content"]
    lin = Lineage.load(result.lineage_path)
    assert [lin.node(t)["rederived_by"] for t in lin.transitions()] == ["llm"]


def test_an_llm_reply_outside_the_region_is_rejected_and_kept_as_risk(tmp_path: Path) -> None:
    from test_llm_rewriter import Mock, _message, _reply

    from passes.rewriter import ChainRewriter

    lib = _llm_card(tmp_path)
    source = naive_source("gemm")
    lines = source.splitlines(keepends=True)
    i = next(n for n, line in enumerate(lines) if "tl.store(" in line)
    # The reply re-emits the line before the store (outside the region).
    mock = Mock(_message(_reply(lines[i - 1] + lines[i].replace("tl.float16", "tl.float32"))))
    llm, _ = mock.rewriter()
    result = optimize(_target(tmp_path), "gemm", lib, tier="interpret", out=tmp_path / "out",
                      rewriter=ChainRewriter((DeterministicRewriter(), llm)),
                      check_fn=ScriptedGate())
    assert result.applied == ()
    (rejected,) = result.rejected
    assert rejected.stage == "materialize" and "outside the region" in rejected.reason
    assert result.best_path.read_text() == source
    risk = Lineage.load(result.lineage_path).graph.graph["rejected"]
    assert "outside the region" in risk[0]["reason"]


@pytest.mark.slow
def test_roundtrip_with_the_real_gate_from_the_naive_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Interpret tier, real gate: from the gemm fixture's naive root, the admitted cards
    rebuild the expert's tensor-core dot, pipelining and autotuning, and the kernel returned
    passes the gate."""
    import gate

    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path / "cache"))
    lib = library(tmp_path, admitted=True)
    # gemm at small sizes (the naive root's 32-wide tiles take the interpreter tens of seconds
    # per gate at the gemm case's own)
    small = str(ROOT / "tests" / "data" / "cases" / "gemm_small")
    result = optimize(_target(tmp_path), small, lib, tier="interpret", out=tmp_path / "out",
                      rewriter=DeterministicRewriter(), budget_steps=6, config_sweeps=False)
    assert {s.pass_name for s in result.applied} == {"tensor-core-dot", "software-pipelining",
                                                     "autotune"}
    best = result.best_path.read_text()
    assert "@triton.autotune" in best and "tl.range(" in best and "tl.dot(" in best
    again = gate.check(best, "triton", small, "interpret", path=result.best_path, cache=False)
    assert again.ok, again.reason
    lin = Lineage.load(result.lineage_path)
    assert all(lin.node(s)["verdict"]["ok"] for s in lin.states())


def test_a_card_rejected_twice_is_not_tried_again(tmp_path: Path) -> None:
    lib = library(tmp_path, admitted=True)
    gate = ScriptedGate(fails=lambda s: "tl.range(" in s)
    result = optimize(_target(tmp_path), "gemm", lib, tier="interpret", out=tmp_path / "out",
                      budget_steps=30, rewriter=DeterministicRewriter(), check_fn=gate, config_sweeps=False)
    failed = [s for s in result.rejected if s.pass_name == "software-pipelining"]
    # Rejected twice (MAX_CARD_FAILURES), then never again: exactly two gated failures.
    assert len(failed) == 2 and result.termination == "exhausted"
    assert all(s.stage not in ("materialize", "refused") for s in failed)


def test_materialize_prefers_a_variant_that_does_not_repeat_an_applied_one() -> None:
    from passes.base import Applied, Skipped

    class Recorder:
        """A back-end inserting `decl` from the options above the site (like a TMA pass)."""

        name = "recorder"

        def rewrite(self, ir, site, card, ctx=None, *, direction="optimize"):
            if "decl" not in card.options:
                return Skipped("no recorded declaration")
            line = f"    {card.options['decl']} = tl.make_descriptor_for_test()\n"
            start = ir.source.rfind(b"\n    for ", 0, site.span[0]) + 1  # above the loop
            edit = kir.Edit(kir.Span(start, start), line)
            return Applied((edit,), ir.apply([edit]))

    import dataclasses

    source = naive_source("gemm").replace("    rk = tl.arange(0, BLOCK_K)\n",
                                          "    rk = tl.arange(0, BLOCK_K)\n"
                                          "    a_desc = tl.make_descriptor_for_test()\n")
    # A pass name without a rule module: options reach the back-end unfiltered.
    card = dataclasses.replace(gemm_cards(admitted=True)["tensor-core-dot"], pass_name="desc-test",
                               options={"decl": "a_desc"},
                               variants=({"anchor": "x", "options": {"decl": "a_desc"}},
                                         {"anchor": "y", "options": {"decl": "b_desc"}}))
    made = materialize(card, kir.parse(source, language="triton"), Recorder())
    assert made.ok and "b_desc = tl.make_descriptor_for_test()" in made.ir.unparse()


def test_seed_zero_keeps_the_order_and_a_seed_permutes_only_equal_ranks() -> None:
    from types import SimpleNamespace

    from lineage.optimize import seeded_order

    def item(cid: str, score: float, effect: float) -> SimpleNamespace:
        return SimpleNamespace(score=score, card=SimpleNamespace(id=cid, effect_score=effect))

    # Ranked as retrieval ranks: two tied groups (a-d, within 5% effect; f-h) around a
    # clearly better-measured card e.
    found = [item("a", 4.0, 2.00), item("b", 4.0, 1.98), item("c", 4.0, 1.96),
             item("d", 4.0, 1.95), item("e", 4.0, 1.50), item("f", 3.0, 1.0),
             item("g", 3.0, 1.0), item("h", 3.0, 1.0)]
    ids = lambda xs: [x.card.id for x in xs]  # noqa: E731
    assert ids(seeded_order(found, 0)) == list("abcdefgh")
    orders = {tuple(ids(seeded_order(found, seed))) for seed in range(1, 9)}
    assert len(orders) > 1  # seeds explore different orders ...
    for order in orders:  # ... but never across ranks
        assert set(order[:4]) == set("abcd") and order[4] == "e" and set(order[5:]) == set("fgh")
    assert seeded_order(found, 3) == seeded_order(found, 3)  # a seed is reproducible


def test_optimize_seeds_change_the_path_not_the_guarantees(tmp_path: Path) -> None:
    import dataclasses

    from lineage.skills import Library

    # Untimed cards with the same scope are equally ranked: only a seed orders them.
    lib = Library.open(tmp_path / "tied", create=True)
    for card in gemm_cards(admitted=True).values():
        lib.put(dataclasses.replace(card, effect={}, scope={**card.scope, "prior_actions": []}))
    paths = {}
    for seed in range(4):
        gate = ScriptedGate()
        result = optimize(_target(tmp_path), "gemm", lib, tier="interpret",
                          out=tmp_path / f"o{seed}", rewriter=DeterministicRewriter(),
                          check_fn=gate, seed=seed)
        assert result.seed == seed and json.loads(
            (tmp_path / f"o{seed}" / "result.json").read_text())["seed"] == seed
        # Whatever the order, every card that acts is applied once.
        assert sorted(s.pass_name for s in result.applied) == [
            "autotune", "software-pipelining", "tensor-core-dot"]
        paths[seed] = [s.pass_name for s in result.applied]
    assert len({tuple(p) for p in paths.values()}) > 1
    again = optimize(_target(tmp_path), "gemm", lib, tier="interpret", out=tmp_path / "again",
                     rewriter=DeterministicRewriter(), check_fn=ScriptedGate(), seed=2)
    assert [s.pass_name for s in again.applied] == paths[2]
    with pytest.raises(BadInputError, match="seed"):
        optimize(_target(tmp_path), "gemm", lib, tier="interpret", out=tmp_path / "bad",
                 rewriter=DeterministicRewriter(), check_fn=ScriptedGate(), seed=-1)


def test_a_two_step_gain_is_found_through_a_stepping_stone(tmp_path: Path) -> None:
    """Device tier: neither the tensor-core dot nor autotuning is faster alone, together they
    halve the time. The loop walks through a passing, not faster, candidate and keeps the pair;
    no source is gated twice."""
    lib = library(tmp_path, admitted=True)

    def ms(source: str) -> float:
        return 5.0 if "tl.dot(" in source and "@triton.autotune" in source else 10.0

    gate = ScriptedGate(ms=ms)
    result = optimize(_target(tmp_path), "gemm", lib, tier="device", out=tmp_path / "out",
                      rewriter=DeterministicRewriter(), check_fn=gate, budget_steps=20, config_sweeps=False)
    assert result.start_ms == 10.0 and result.best_ms == 5.0
    assert {"tensor-core-dot", "autotune"} <= {s.pass_name for s in result.applied}
    best = result.best_path.read_text()
    assert "tl.dot(" in best and "@triton.autotune" in best
    assert len(gate.seen) == len(set(gate.seen)) and result.gated == len(gate.seen) - 1
    lin = Lineage.load(result.lineage_path)
    assert any("stone" in lin.node(s)["roles"] for s in lin.states())
    # Without a two-step gain the stones do not make the result worse than the start.
    flat = optimize(_target(tmp_path), "gemm", lib, tier="device", out=tmp_path / "flat",
                    rewriter=DeterministicRewriter(), check_fn=ScriptedGate(ms=lambda s: 10.0),
                    budget_steps=20, config_sweeps=False)
    assert flat.applied == () and flat.best_path.read_text() == naive_source("gemm")


def test_the_time_box_stops_the_loop_before_the_next_gate(tmp_path: Path) -> None:
    import time

    lib = library(tmp_path, admitted=True)
    gate = ScriptedGate()
    result = optimize(_target(tmp_path), "gemm", lib, tier="interpret", out=tmp_path / "out",
                      rewriter=DeterministicRewriter(), check_fn=gate,
                      deadline=time.monotonic())
    assert result.termination == "time-box" and len(gate.seen) == 1 and result.applied == ()


def test_a_gate_started_in_the_box_is_cut_to_end_near_it_and_not_held_against_its_card(
        tmp_path: Path) -> None:
    """The start is gated without the box's limit; a candidate's gate gets at most what is left
    of the box plus BOX_GRACE_S, and a gate the box cut is set aside (stage "time-box"), not
    counted as the card's failure nor reused as a verdict."""
    import time

    from gate.verdict import FailureKind, Tier, Timing, Verdict
    from lineage import optimize as opt

    lib = library(tmp_path, admitted=True)
    limits: list[float | None] = []
    box = 3.0  # generous: the setup before the first gate counts against the box

    def gate(source: str, language: object, case: object, tier: object, **kw: object) -> Verdict:
        limits.append(kw.get("timeout"))  # type: ignore[arg-type]
        if len(limits) == 1:
            return Verdict(True, Tier.DEVICE, "timing", timing=Timing(10.0, 1.0))
        time.sleep(box)  # the gate outlives the box and its limit cuts it
        return Verdict(False, Tier.DEVICE, "timing", FailureKind.TIMEOUT, "exceeded its time limit")

    # a first run, boxed to its start's gate, loads what the loop imports: run cold and alone,
    # that set-up took 2.9 s on a 2-core machine, past the box before the first gate
    optimize(_target(tmp_path), "gemm", lib, tier="device", out=tmp_path / "warm",
             rewriter=DeterministicRewriter(), budget_steps=1, deadline=time.monotonic(),
             check_fn=lambda *a, **k: Verdict(True, Tier.DEVICE, "timing", timing=Timing(10.0, 1.0)),
             config_sweeps=False)
    result = optimize(_target(tmp_path), "gemm", lib, tier="device", out=tmp_path / "out",
                      rewriter=DeterministicRewriter(), check_fn=gate, budget_steps=5,
                      deadline=time.monotonic() + box / 2, config_sweeps=False)
    assert limits[0] is None
    assert len(limits) == 2 and limits[1] is not None
    assert limits[1] <= opt.BOX_GRACE_S + box / 2
    assert result.termination == "time-box" and result.gated == 1
    assert [s.stage for s in result.rejected] == ["time-box"]


def test_a_state_made_by_a_sweep_is_not_swept_again(tmp_path: Path) -> None:
    """A kept configuration sweep makes a new state; sweeping that state again with the same
    kind of sweep would only rewrite the list just tried, so the next sweep is another kind
    (the own sweep climbs around the pick) or waits for another kind of step."""
    import itertools

    from lineage.skills import Library

    lib = Library(HELDOUT_LIBRARY)
    target = tmp_path / "mm.py"
    target.write_text((ROOT / "experts/examples/matmul_naive.py").read_text())
    faster = itertools.count(1)  # every new candidate is faster: the loop keeps them all

    result = optimize(target, "gemm", lib, tier="device", out=tmp_path / "out",
                      rewriter=DeterministicRewriter(), budget_steps=8,
                      check_fn=ScriptedGate(ms=lambda s: 10.0 / next(faster)))
    swept = [s.card if s.rewriter == "config-sweep" else None for s in result.applied]
    assert len([c for c in swept if c]) >= 2
    assert all(a is None or a != b for a, b in zip(swept, swept[1:]))


def test_a_spent_card_makes_room_for_the_next_ranked_card(tmp_path: Path) -> None:
    """With k=1 only the best-ranked card makes retrieval's top-k; once it has failed out,
    the loop retrieves again without it and the next card is tried."""
    lib = library(tmp_path, admitted=True)
    gate = ScriptedGate(fails=lambda s: "tl.range(" in s)  # pipelining always fails
    result = optimize(_target(tmp_path), "gemm", lib, tier="interpret", out=tmp_path / "out",
                      budget_steps=30, rewriter=DeterministicRewriter(), check_fn=gate, k=1,
                      config_sweeps=False)
    assert [s.pass_name for s in result.rejected] == ["software-pipelining"] * 2
    # autotune ranks below pipelining: it is retrieved only once pipelining is spent.
    assert [s.pass_name for s in result.applied] == ["tensor-core-dot", "autotune"]
    assert result.termination == "exhausted"


def test_a_repeated_rejection_is_one_entry_with_its_count_in_result_json(tmp_path: Path) -> None:
    """The same card failing at the same anchor for the same reason on two states is one
    `rejected` entry with "times": 2 in result.json and --json; `result.rejected` keeps both."""
    lib = library(tmp_path, admitted=True)
    gate = ScriptedGate(fails=lambda s: "tl.range(" in s)
    result = optimize(_target(tmp_path), "gemm", lib, tier="interpret", out=tmp_path / "out",
                      budget_steps=30, rewriter=DeterministicRewriter(), check_fn=gate, k=1,
                      config_sweeps=False)
    assert len(result.rejected) == 2 and len({s.state for s in result.rejected}) == 2
    saved = json.loads((tmp_path / "out" / "result.json").read_text())
    (entry,) = saved["rejected"]
    assert entry["times"] == 2 and entry["pass"] == "software-pipelining"
    assert entry["card"] == result.rejected[0].card and entry["stage"] == "correctness"
    assert entry["anchor"] == result.rejected[0].anchor and "wrong_output" in entry["reason"]
    assert result.to_json()["rejected"] == saved["rejected"]


def test_distinct_rejections_fold_repeats_in_first_seen_order() -> None:
    def step(card: str, anchor: str, reason: str, state: str, stage: str = "correctness",
             rewriter: str = "deterministic") -> Step:
        return Step(card, card.split(".")[0], anchor, False, stage, reason, rewriter=rewriter,
                    state=state)

    a = step("b-card.triton.1", "k/for[0]", "wrong_output: x", "s:1")
    steps = [a, step("a-card.triton.2", "", "no site", "s:1", stage="materialize"),
             step("b-card.triton.1", "k/for[0]", "wrong_output: x", "s:2"),
             step("b-card.triton.1", "k/for[1]", "wrong_output: x", "s:2"),  # another anchor
             step("b-card.triton.1", "k/for[0]", "timeout: y", "s:3"),  # another reason
             step("a-card.triton.2", "", "no site", "s:4", stage="materialize"),
             step("b-card.triton.1", "k/for[0]", "wrong_output: x", "s:5", rewriter="llm"),
             step("b-card.triton.1", "k/for[0]", "wrong_output: x", "s:6")]
    folded = distinct_rejections(steps)
    assert [(r["card"], r["anchor"], r["reason"], r["rewriter"], r["times"]) for r in folded] == [
        ("b-card.triton.1", "k/for[0]", "wrong_output: x", "deterministic", 3),
        ("a-card.triton.2", "", "no site", "deterministic", 2),
        ("b-card.triton.1", "k/for[1]", "wrong_output: x", "deterministic", 1),
        ("b-card.triton.1", "k/for[0]", "timeout: y", "deterministic", 1),
        ("b-card.triton.1", "k/for[0]", "wrong_output: x", "llm", 1)]
    # the fields consumers read are those of the step's own JSON, plus "times"
    assert folded[0] == {**a.to_json(), "times": 3}
    assert sum(r["times"] for r in folded) == len(steps)
    assert distinct_rejections([]) == []


def test_a_tile_card_acts_first_on_the_tile_its_steps_resized() -> None:
    from dataclasses import replace

    from lineage.optimize import card_sites, materializations
    from passes.base import PassContext
    from skill_helpers import lineage
    from lineage.skills import lift

    lin = lineage("conv2d_induced")
    card = next(c for c in lift(lin) if c.pass_name == "tile-sizes")
    assert {v["options"].get("tile") for v in card.variants} == {"BLOCK_M"}  # read off the diff
    ir = kir.parse(naive_source("conv2d_induced"), language="triton")
    n_card = replace(card, options={"value": 64, "tile": "BLOCK_N"},
                     variants=({"anchor": card.variants[0]["anchor"],
                                "options": {"value": 64, "tile": "BLOCK_N"}},))
    assert card_sites(n_card, ir)[0].detail["tile"] == "BLOCK_N"
    assert card_sites(card, ir)[0].detail["tile"] == "BLOCK_M"
    made = next(materializations(n_card, ir, DeterministicRewriter(),
                                 PassContext.for_case("conv2d", tier="interpret")))
    assert made.ok and made.site.detail["tile"] == "BLOCK_N" and made.options["tile"] == "BLOCK_N"
    # the step on an autotune entry is a new entry beside it (`_beside_in_list`)
    old, new = ir.unparse(), made.ir.unparse()
    assert new.count("triton.Config(") == old.count("triton.Config(") + 1
    assert '{"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2}' in new
    assert '{"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 16, "GROUP_M": 2}' in new


def test_a_card_used_up_on_one_kernel_still_acts_on_another_kernel_of_the_file() -> None:
    """A card is kept at most as often as it has evidence *per kernel* of the file (a file of
    several kernels may take it once in each)."""
    from lineage.moves import full_kernels as _full_kernels, used_up as _used_up
    from lineage.optimize import _State, kernel_of, Step
    from lineage.optimize import card_sites, materializations

    assert kernel_of("triton:run/launch:_gdn_wy_kernel[0]") == "_gdn_wy_kernel"
    assert kernel_of("triton:matmul_kernel/for[0]/assign:acc[0]") == "matmul_kernel"
    assert kernel_of("triton:_attn_fwd") == "_attn_fwd"
    card = gemm_cards(admitted=True)["tensor-core-dot"]
    assert len(card.evidence) == 1
    naive = naive_source("gemm")
    kernel = naive[naive.index("@triton.jit"):naive.index("def run(")]
    two = naive.replace("def run(", kernel.replace("matmul_kernel", "matmul_kernel_b") + "def run(")
    ir = kir.parse(two, language="triton")
    assert {kernel_of(s.anchor) for s in card_sites(card, ir)} == {"matmul_kernel", "matmul_kernel_b"}
    assert not _used_up(card, _State(two, ir, None, None))
    kept = (Step(card.id, card.pass_name, "triton:matmul_kernel/for[0]/assign:acc[0]", True),)
    state = _State(two, ir, None, None, path=kept)  # a state's path is fixed when it is made
    assert _full_kernels(card, state) == {"matmul_kernel"}
    assert not _used_up(card, state)  # matmul_kernel_b still has a site
    full = _full_kernels(card, state)
    made = next(materializations(card, ir, DeterministicRewriter(),
                                 skip_site=lambda s: kernel_of(s.anchor) in full))
    assert made.ok and kernel_of(made.site.anchor) == "matmul_kernel_b"
    kept += (Step(card.id, card.pass_name, "triton:matmul_kernel_b/for[0]/assign:acc[0]", True),)
    assert _used_up(card, _State(two, ir, None, None, path=kept))


def _three_kernels(tmp_path: Path) -> Path:
    """The naive gemm module with two renamed copies of its kernel (`matmul_kernel_b`,
    `matmul_kernel_c`) beside it, written to tmp_path."""
    naive = naive_source("gemm")
    kernel = naive[naive.index("@triton.jit"):naive.index("def run(")]
    three = naive.replace("def run(", kernel.replace("matmul_kernel", "matmul_kernel_b")
                          + kernel.replace("matmul_kernel", "matmul_kernel_c") + "def run(")
    target = tmp_path / "three.py"
    target.write_text(three)
    return target


def test_a_candidate_already_gated_takes_no_slot_so_later_sites_get_theirs(
        tmp_path: Path) -> None:
    """Two cards of one pass write the same candidates on a file of three kernels. The second
    card does not spend its candidate slots on the two the first one had gated: it reaches the
    third kernel, the one where the step pays."""
    from dataclasses import replace

    from lineage.skills import Library

    card = gemm_cards(admitted=True)["software-pipelining"]
    twin = replace(card, id=card.id + "-twin")
    target = _three_kernels(tmp_path)

    def ms(source: str) -> float:
        c = source[source.index("def matmul_kernel_c"):source.index("def run(")]
        return 8.0 if "tl.range(" in c else 10.0 + 0.01 * source.count("tl.range(")

    lib = Library.open(tmp_path / "lib", create=True)
    for c in (card, twin):
        lib.put(c)
    gate = ScriptedGate(ms=ms)
    result = optimize(target, "gemm", lib, tier="device", out=tmp_path / "out",
                      rewriter=DeterministicRewriter(), check_fn=gate, budget_steps=3,
                      config_sweeps=False)
    assert [s.anchor for s in result.applied] == ["triton:matmul_kernel_c/for[0]"]
    assert result.best_ms == 8.0 and result.gated == 3
    assert sorted(s.anchor for s in result.rejected) == ["triton:matmul_kernel/for[0]",
                                                         "triton:matmul_kernel_b/for[0]"]


def test_sites_in_the_hottest_kernel_come_first_and_a_cold_kernel_takes_no_candidate(
        tmp_path: Path) -> None:
    """A file of three kernels whose profile (the verdict's per-kernel GPU time) puts 80% of
    the time in the last one, 17% in the first and 3% in the second: the card's first gated
    candidate is in the hot kernel, and the cold one is never gated, whatever its order in the
    file."""
    from lineage.optimize import kernel_of
    from lineage.skills import Library

    card = gemm_cards(admitted=True)["software-pipelining"]
    target = _three_kernels(tmp_path)
    profile = {"matmul_kernel": 1.7, "matmul_kernel_b": 0.3, "matmul_kernel_c": 8.0}
    lib = Library.open(tmp_path / "lib", create=True)
    lib.put(card)
    gate = ScriptedGate(ms=lambda s: 10.0 + 0.01 * s.count("tl.range("), kernels=lambda s: profile)
    result = optimize(target, "gemm", lib, tier="device", out=tmp_path / "out",
                      rewriter=DeterministicRewriter(), check_fn=gate, budget_steps=3,
                      config_sweeps=False)
    gated = [s.anchor for s in result.rejected if s.stage == "profile"]
    assert gated and gated[0] == "triton:matmul_kernel_c/for[0]"
    assert not any(kernel_of(a) == "matmul_kernel_b" for a in gated)
    assert "triton:matmul_kernel/for[0]" in gated


def test_a_verdict_without_a_profile_of_several_kernels_orders_nothing() -> None:
    from gate import Tier, Timing, Verdict
    from gate.verdict import VariantTiming
    from lineage.optimize import kernel_shares

    one = Timing(1.0, 1.0, (VariantTiming("v", 1.0, 1.0, (("k", 1.0),)),))
    assert kernel_shares(Verdict(True, Tier.DEVICE, "timing", timing=one)) == {}
    assert kernel_shares(Verdict(True, Tier.DEVICE, "timing", timing=Timing(1.0, 1.0))) == {}
    two = Timing(4.0, 1.0, (VariantTiming("a", 2.0, 1.0, (("x", 1.5), ("y", 0.5))),
                            VariantTiming("b", 2.0, 1.0, (("x", 1.5), ("y", 0.5)))))
    assert kernel_shares(Verdict(True, Tier.DEVICE, "timing", timing=two)) == {"x": 0.75, "y": 0.25}


def test_a_neutral_step_that_gives_another_card_its_site_is_walked_to_at_once(
        tmp_path: Path) -> None:
    """gemm's grouped tile order is neutral on its own (its card's effect is below 1), but
    persistent-grid's recorded loop body needs it: once the persistent card found no site,
    the grouped step's prior carries the persistent card's (an enabling step), and the loop
    takes the persistent step from the grouped stone."""
    from dataclasses import replace

    from lineage.skills import Library, Trial, lift

    lin = Lineage.load(ROOT / "tests/data/lineages/gemm_device.json")
    wanted = ("grouped-ordering", "persistent-grid", "tma-descriptors")
    cards = [c for c in lift(lin) if c.pass_name in wanted[:2]
             or (c.pass_name == wanted[2] and len(c.evidence) == 2)]  # the two TMA loads
    # TMA ranks last (a case it was only tried in), so it improves the kernel after grouped
    # ordering has been tried in each round.
    cards = [replace(c, scope={**c.scope, "cases": ["conv2d"]}) if c.pass_name == wanted[2] else c
             for c in cards]
    cards = [c.with_trial(Trial("gemm:s:0", "gemm", "device", True, speedup=1.0)) for c in cards]
    assert sorted(c.pass_name for c in cards) == sorted(wanted)
    grouped_t = next(t for t in lin.transitions() if lin.node(t)["pass"] == "grouped-ordering")
    target = tmp_path / "gemm_start.py"
    start = lin.node(next(lin.graph.predecessors(grouped_t)))["source"]
    target.write_text(start)

    def ms(source: str) -> float:
        grouped, persistent = "group_id = " in source, "for tile_id in tl.range(" in source
        tma = source.count("tl.make_tensor_descriptor(") - start.count("tl.make_tensor_descriptor(")
        return (1.005 if grouped else 1.0) * (0.8 if persistent else 1.0) * 0.9 ** tma

    lib = Library.open(tmp_path / "lib", create=True)
    for card in cards:
        lib.put(card)
    result = optimize(target, "gemm", lib, tier="device", out=tmp_path / "out",
                      rewriter=DeterministicRewriter(), check_fn=ScriptedGate(ms=ms))
    passes = [s.pass_name for s in result.applied]
    assert passes.index("grouped-ordering") < passes.index("persistent-grid"), passes
    assert result.best_ms < 0.81 * result.start_ms
    steps = Lineage.load(result.lineage_path)
    stone = [s for s in steps.states() if "stone" in (steps.node(s).get("roles") or [])]
    assert any("group_id = " in steps.node(s)["source"] for s in stone)


def test_a_near_tie_that_gives_a_card_the_context_of_its_evidence_is_walked_to_at_once(
        tmp_path: Path) -> None:
    """persistent-grid's evidence ran on a GEMM that loaded through tensor descriptors (its
    prior actions). On a held-out kernel of pointer loads the descriptor step alone is a near
    tie and the persistent loop alone is slower; descriptors, then the persistent loop (which
    flattens over descriptor loads), is what pays. A pipelining candidate is a closer tie, so
    the fastest stone is not the descriptor step. On the descriptor stone the persistent card
    is another move (its evidence's context is there: its measurements elsewhere do not count
    against it), and the loop finds the pair within the budget."""
    lib = _heldout_library(tmp_path, {"tma-descriptors.triton.7de2c2db",
                                      "persistent-grid.triton.a9560196",
                                      "software-pipelining.triton.d1263a6d"})
    assert "tma-descriptors" in next(c for c in lib.cards() if c.pass_name == "persistent-grid"
                                     ).scope["prior_actions"]
    target = tmp_path / "addmm_start.py"
    target.write_text((ROOT / "bench/heldout/addmm/addmm_start.py").read_text())

    def ms(source: str) -> float:
        tma = "make_tensor_descriptor(" in source
        persistent = "tl.num_programs(0)" in source
        flat = "flatten=True" in source
        staged = "num_stages=" in source
        return (10.0 * (1.02 if tma else 1.0) * (1.001 if staged else 1.0)
                * ((0.7 if flat else 1.05) if persistent else 1.0))

    result = optimize(target, str(ROOT / "bench/heldout/addmm"), lib, tier="device",
                      out=tmp_path / "out", rewriter=DeterministicRewriter(),
                      check_fn=ScriptedGate(ms=ms), budget_steps=12, config_sweeps=False)
    passes = [s.pass_name for s in result.applied]
    assert passes.index("tma-descriptors") < passes.index("persistent-grid"), passes
    assert result.best_ms < 10.0 * 1.02 * 0.71

    def alone(source: str) -> float:  # the pair does not pay: nothing is kept
        return ms(source) if "flatten=True" not in source else 10.5

    again = optimize(target, str(ROOT / "bench/heldout/addmm"), lib, tier="device",
                     out=tmp_path / "o2", rewriter=DeterministicRewriter(),
                     check_fn=ScriptedGate(ms=alone), budget_steps=12, config_sweeps=False)
    assert again.applied == () and again.best_ms == 10.0


@pytest.mark.parametrize("tma_cost", [1.14, 1.25])
def test_a_pairs_first_step_may_cost_more_than_a_near_tie(tmp_path: Path, tma_cost: float) -> None:
    """A batched product's descriptors, read per program, cost 1.14x (or 1.25x) alone; with
    the persistent loop (whose card's evidence ran with descriptors) the pair pays. No slack
    decides whether the slower stone is expanded: its moves are discounted by how much slower
    it is, and with nothing better left within the budget the pair is found."""
    lib = _heldout_library(tmp_path, {"tma-descriptors.triton.7de2c2db",
                                      "persistent-grid.triton.a9560196"})
    target = tmp_path / "bmm_start.py"
    target.write_text((ROOT / "bench/heldout/bmm/bmm_start.py").read_text())

    def ms(source: str) -> float:
        tma = "make_tensor_descriptor(" in source
        persistent = "tl.num_programs(0)" in source
        flat = "flatten=True" in source
        return 10.0 * (tma_cost if tma and not persistent else 1.0) * (
            (0.85 if flat else 1.03) if persistent else 1.0)

    result = optimize(target, str(ROOT / "bench/heldout/bmm"), lib, tier="device",
                      out=tmp_path / "out", rewriter=DeterministicRewriter(),
                      check_fn=ScriptedGate(ms=ms), budget_steps=12, config_sweeps=False)
    assert [s.pass_name for s in result.applied] == ["tma-descriptors", "persistent-grid"]
    assert result.best_ms == pytest.approx(8.5) and result.gated <= 12


def test_a_step_slower_alone_is_measured_again_where_its_pair_is(tmp_path: Path) -> None:
    """Device tier: pipelining is 2% (or 10%) slower without the autotuner and 20% faster
    with it. A slower measurement lowers the card's expected gain but does not end it: on the
    autotuned state it is a move again, and the pair is kept. A tie within `MIN_GAIN` is
    reported as a near miss."""
    lib = library(tmp_path, admitted=True)

    def ms(source: str, alone: float) -> float:
        t = 10.0 * (0.8 if "tl.dot(" in source else 1.0)
        tuned = "@triton.autotune" in source
        t *= 0.95 if tuned else 1.0
        if "tl.range(" in source:
            t *= 0.8 if tuned else alone
        return t

    for alone in (1.02, 1.1):
        result = optimize(_target(tmp_path), "gemm", lib, tier="device",
                          out=tmp_path / f"o{alone}", rewriter=DeterministicRewriter(),
                          check_fn=ScriptedGate(ms=lambda s: ms(s, alone)), budget_steps=20,
                          config_sweeps=False)
        assert set(s.pass_name for s in result.applied) == {
            "tensor-core-dot", "autotune", "software-pipelining"}
        assert result.best_ms == pytest.approx(10.0 * 0.8 * 0.95 * 0.8)
        slower = [s for s in result.rejected if s.pass_name == "software-pipelining"
                  and "not faster" in s.reason]
        assert slower and not any(s.near_miss for s in slower)
        # the run's lineage keeps each slower candidate's timing and options (its risk record)
        risk = [r for r in Lineage.load(result.lineage_path).graph.graph["rejected"]
                if r["pass"] == "software-pipelining" and r["stage"] == "profile"]
        assert risk and all(r["reason"].endswith(f"-> {r['timing']['candidate_ms']} ms")
                            for r in risk)
        assert all("options" in r for r in risk)
    tie = optimize(_target(tmp_path), "gemm", lib, tier="device", out=tmp_path / "tie",
                   rewriter=DeterministicRewriter(), check_fn=ScriptedGate(ms=lambda s: 10.0),
                   budget_steps=3, config_sweeps=False)
    assert tie.rejected and all(s.near_miss for s in tie.rejected)
    assert tie.to_json()["rejected"][0]["near_miss"] is True


def test_a_launch_card_carries_its_joint_configuration_to_the_target(tmp_path: Path) -> None:
    """With configuration sweeps on, a launch-parameter card lifted from a lineage proposes the
    configuration its lineage's expert ran with (tiles, warps, stages by role) as the target's
    autotune list, first among its candidates."""
    lib = library(tmp_path, admitted=True)
    card = next(c for c in lib.cards() if c.carrier.get("expert_config")
                and c.pass_name in ("tile-sizes", "num-warps", "software-pipelining", "autotune"))
    # a tiled tl.dot matmul written elsewhere (the fixture's naive root has no tl.dot: a dot
    # configuration does not fit it)
    ir = kir.parse_file(ROOT / "experts/examples/matmul_naive.py")
    first = next(iter(materializations(card, ir, DeterministicRewriter())))
    assert first.ok and first.rewriter == "config-sweep"
    text = first.ir.unparse()
    assert "@triton.autotune(" in text
    expert = next(iter(card.carrier["expert_config"].values()))
    assert f"num_warps={expert['num_warps']}" in text
    off = next(iter(materializations(card, ir, DeterministicRewriter(), sweeps=False)))
    assert off.rewriter != "config-sweep"


def test_untimed_a_candidate_whose_every_configuration_spills_is_not_kept(tmp_path: Path) -> None:
    """The static tier compiles but cannot time: a pipelined K loop whose compile spills in its
    only configuration, where the kernel it came from did not, is refused as a profile
    regression; the same candidate without spills is kept for its structural effect."""
    from gate.verdict import CompileFacts, Facts, Tier, Verdict

    def compile_facts(source: str, spills: bool) -> Facts:
        return Facts((CompileFacts("matmul_kernel", {}, 255 if spills else 96, 0, 0, "triton",
                                   0, 512 if spills else 0, 0, {}),))

    def gate(spill_when: str):  # noqa: ANN202
        def check(source: str, language: object, case: object, tier: object, **kw: object) -> Verdict:
            return Verdict(True, Tier.STATIC, "compile",
                           facts=compile_facts(source, spill_when in source))
        return check

    lib = library(tmp_path, admitted=True)
    spilled = optimize(_target(tmp_path), "gemm", lib, tier="static", out=tmp_path / "o1",
                       rewriter=DeterministicRewriter(), check_fn=gate("tl.range("),
                       config_sweeps=False)
    assert "software-pipelining" not in {s.pass_name for s in spilled.applied}
    refused = [s for s in spilled.rejected if s.pass_name == "software-pipelining"]
    assert refused and refused[0].stage == "profile" and "spills" in refused[0].reason
    clean = optimize(_target(tmp_path), "gemm", lib, tier="static", out=tmp_path / "o2",
                     rewriter=DeterministicRewriter(), check_fn=gate("no such text"),
                     config_sweeps=False)
    assert "software-pipelining" in {s.pass_name for s in clean.applied}


def test_a_launch_step_on_an_autotune_list_adds_its_entry_beside_the_one_it_edits() -> None:
    from lineage.moves import _beside_in_list
    from passes import Applied, get_pass

    text = (ROOT / "bench/styles/mm_autotuned/mm_tuned.py").read_text()
    ir = kir.parse(text, "triton")
    step = get_pass("tile-sizes")()
    site = next(s for s in step.sites(ir) if not s.present)
    result = step.optimize(ir, site)
    assert isinstance(result, Applied)
    beside = _beside_in_list(ir, result)
    assert beside is not None
    old_lines, new_lines = text.splitlines(), beside.unparse().splitlines()
    # every entry the kernel had is still there, and the edited entry is one more
    assert set(old_lines) <= set(new_lines) and len(new_lines) == len(old_lines) + 1
    added = next(ln for ln in new_lines if ln not in old_lines)
    assert added in result.ir.unparse().splitlines() and "triton.Config(" in added
    compile(beside.unparse(), "beside.py", "exec")
    # a step elsewhere (a launch keyword, no list) is left as the pass wrote it
    plain = kir.parse((ROOT / "bench/heldout/mm2048/matmul_ptrs.py").read_text(), "triton")
    made = step.optimize(plain, next(s for s in step.sites(plain) if not s.present))
    assert isinstance(made, Applied) and _beside_in_list(plain, made) is None


def test_a_rejected_recorded_sweep_is_followed_by_one_sweep_of_the_kernels_own(
        tmp_path: Path) -> None:
    """A cross entropy over 4-row blocks, with two launch cards: one recorded a configuration
    that fits (a 64-row block of another kernel), the other one that does not. The fitting
    card's sweep goes first and does not pay; after that round the loop sweeps the kernel's own
    configuration once (blocks and warps grown together), and here that is what pays."""
    from lineage.skills import Library

    full = Library(HELDOUT_LIBRARY)
    lib = Library.open(tmp_path / "lib", create=True)
    lib.add_all([full.get("autotune.triton.8d8039dd"), full.get("autotune.triton.6dd0e18a")])
    case = ROOT / "bench/styles/xent_chunks"
    target = tmp_path / "xent.py"
    target.write_text((case / "xent.py").read_text())
    own_first = 'triton.Config({"ROWS": 4, "VCHUNK": 128}, num_warps=4, num_stages=3),'

    def ms(source: str) -> float:
        listed = source.split("configs=[", 1)[1] if "configs=[" in source else ""
        if listed.lstrip().startswith(own_first) and '"VCHUNK": 256' in listed:
            return 5.0  # the kernel's own neighbourhood
        return 12.0 if '"ROWS": 64' in listed else 10.0  # the recorded one is slower

    gate = ScriptedGate(ms=ms)
    result = optimize(target, str(case), lib, tier="device", out=tmp_path / "out",
                      rewriter=DeterministicRewriter(), budget_steps=16, check_fn=gate)
    assert result.best_ms == 5.0
    # the fitting card's recorded sweep was measured (slower), the kernel's own sweep kept
    assert ("autotune.triton.8d8039dd", False) in [
        (s.card, s.kept) for s in result.rejected if s.rewriter == "config-sweep"]
    assert {"sweep.own", "sweep.plain"} & {s.card for s in result.applied}
    times = [ms(src) for src in gate.seen]
    assert 12.0 in times and 5.0 in times


def test_a_candidates_gate_is_limited_by_the_start_kernels_own(tmp_path: Path) -> None:
    """Without an explicit gate timeout, a candidate's gate may take CANDIDATE_GATE_FACTOR times
    what the start kernel's gate took (its recorded phases), never less than the floor; the
    start kernel's own gate keeps the gate's default; an explicit timeout applies to all."""
    from gate.verdict import Tier, Verdict
    from lineage.optimize import CANDIDATE_GATE_FACTOR, CANDIDATE_GATE_FLOOR_S

    def gate(start_s: float, limits: list[object]):  # noqa: ANN202
        def check(source: str, language: object, case: object, tier: object, **kw: object) -> Verdict:
            limits.append(kw.get("timeout"))
            return Verdict(True, Tier.INTERPRET, "correctness",
                           phases=(("start-up", start_s / 2), ("correctness", start_s / 2)))
        return check

    lib = library(tmp_path, admitted=True)
    slow: list[object] = []
    optimize(_target(tmp_path), "gemm", lib, tier="interpret", out=tmp_path / "o1", budget_steps=2,
             rewriter=DeterministicRewriter(), check_fn=gate(40.0, slow), config_sweeps=False)
    assert slow[0] is None and len(slow) >= 2
    assert all(t == pytest.approx(CANDIDATE_GATE_FACTOR * 40.0) for t in slow[1:])
    fast: list[object] = []
    optimize(_target(tmp_path), "gemm", lib, tier="interpret", out=tmp_path / "o2", budget_steps=2,
             rewriter=DeterministicRewriter(), check_fn=gate(1.0, fast), config_sweeps=False)
    assert all(t == pytest.approx(CANDIDATE_GATE_FLOOR_S) for t in fast[1:])
    given: list[object] = []
    optimize(_target(tmp_path), "gemm", lib, tier="interpret", out=tmp_path / "o3", budget_steps=2,
             rewriter=DeterministicRewriter(), check_fn=gate(40.0, given), config_sweeps=False,
             gate_timeout=77.0)
    assert given and all(t == 77.0 for t in given)


def test_a_kernel_whose_launch_is_not_found_is_named_in_the_notes(tmp_path: Path) -> None:
    """A kernel the host hands to something the launch analysis does not follow (a dict of
    launchers) has no launch-parameter site: the run says so instead of ending 'exhausted'
    without a word."""
    source = naive_source("gemm").replace(
        "    matmul_kernel[(M // 32, N // 32)](",
        "    launchers = {'mm': matmul_kernel}\n    launchers['mm'][(M // 32, N // 32)](")
    assert source != naive_source("gemm")
    target = tmp_path / "naive.py"
    target.write_text(source)
    result = optimize(target, "gemm", library(tmp_path, admitted=True), tier="interpret",
                      out=tmp_path / "out", rewriter=DeterministicRewriter(),
                      check_fn=ScriptedGate(ms=lambda s: 1.0), budget_steps=1)
    assert any("matmul_kernel" in n and "no launch of it found" in n for n in result.notes), result.notes
    direct = optimize(_target(tmp_path), "gemm", library(tmp_path / "l2", admitted=True),
                      tier="interpret", out=tmp_path / "o2", rewriter=DeterministicRewriter(),
                      check_fn=ScriptedGate(ms=lambda s: 1.0), budget_steps=1)
    assert not any("no launch" in n for n in direct.notes)


class _AutotunedProduct:
    """A scripted device for the 1024-cube product: the kernel's time is that of the fastest
    entry of its autotune list (`fastest`, else 13; 25 without a list) and the autotuner picks
    that entry."""

    CONFIG = re.compile(r'triton\.Config\(\{"BM": (\d+), "BN": (\d+), "BK": (\d+)[^}]*\}, '
                        r'num_warps=(\d+), num_stages=(\d+)\)')

    def __init__(self, fastest: dict[tuple[int, ...], float]) -> None:
        self.fastest = fastest

    def configs(self, source: str) -> list[tuple[int, ...]]:
        return [tuple(map(int, m)) for m in self.CONFIG.findall(source)]

    def ms(self, source: str) -> float:
        return min((self.fastest.get(c, 13.0) for c in self.configs(source)), default=25.0)

    def picks(self, source: str) -> dict[str, dict[str, int]]:
        found = self.configs(source)
        if not found:
            return {}
        bm, bn, bk, w, s = min(found, key=lambda c: self.fastest.get(c, 13.0))
        return {"matmul_kernel": {"BM": bm, "BN": bn, "BK": bk, "num_warps": w, "num_stages": s}}


def test_the_own_sweep_starts_from_what_the_autotuner_picked(tmp_path: Path) -> None:
    """A card's recorded sweep is kept on a 1024-cube product; on the device its autotuner
    picks 64x128 at 5 stages, where 6 stages would be faster still. The round after it keeps
    nothing, so the kernel's own configuration is swept: the one the autotuner picked (the
    verdict's `picks`), not the first of the list (128x256), and its one-stage-deeper point is
    what pays. Without the picks the own sweep starts from the list's first entry and never
    proposes 64x128 at 6 stages."""
    lib = _heldout_library(tmp_path, {"tile-sizes.triton.18d8cacb"})
    target = tmp_path / "mm_naive.py"
    target.write_text((ROOT / "bench/heldout/mm1024/mm_naive.py").read_text())
    device = _AutotunedProduct({(64, 128, 64, 4, 6): 10.5, (64, 128, 64, 4, 5): 11.2,
                                (64, 64, 64, 4, 4): 11.6})

    def best(with_picks: bool, out: str) -> float:
        gate_fn = ScriptedGate(ms=device.ms, picks=device.picks if with_picks else None)
        result = optimize(target, str(ROOT / "bench/heldout/mm1024"), lib, tier="device",
                          out=tmp_path / out, rewriter=DeterministicRewriter(),
                          check_fn=gate_fn, budget_steps=8)
        return result.best_ms

    assert best(True, "picked") == pytest.approx(10.5)
    assert best(False, "first") == pytest.approx(11.2)


def test_the_own_sweep_of_the_best_is_reached_besides_a_pair_that_does_not_pay(
        tmp_path: Path) -> None:
    """On a 1024-cube product its plain sweep configures (its autotuner picks 64x128 at 5
    stages), the descriptor step is 1.10x slower and its card's pair (the persistent grid,
    whose evidence ran with descriptors) does not pay. The state's own sweep, one stage deeper
    around the pick, does, and the budget reaches it; the tile card's recorded sweep, on a
    configuration a sweep already chose, expects no more than a sweep and does not go first."""
    lib = _heldout_library(tmp_path, {"tile-sizes.triton.18d8cacb",
                                      "tma-descriptors.triton.7de2c2db",
                                      "persistent-grid.triton.a9560196"})
    target = tmp_path / "mm_naive.py"
    target.write_text((ROOT / "bench/heldout/mm1024/mm_naive.py").read_text())
    device = _AutotunedProduct({(64, 128, 64, 4, 6): 10.5, (64, 128, 64, 4, 5): 11.2})

    def ms(source: str) -> float:
        tma = "make_tensor_descriptor(" in source
        persistent = "tl.num_programs(0)" in source
        return device.ms(source) * (1.10 if tma else 1.0) * (0.99 if persistent else 1.0)

    events: list[tuple[str, dict]] = []
    result = optimize(target, str(ROOT / "bench/heldout/mm1024"), lib, tier="device",
                      out=tmp_path / "out", rewriter=DeterministicRewriter(),
                      check_fn=ScriptedGate(ms=ms, picks=device.picks), budget_steps=8,
                      progress=lambda kind, data: events.append((kind, dict(data))))
    assert result.best_ms <= 10.5 + 1e-9  # the pair may still pay its 1% on top of the sweep
    gated = [data["card"] for kind, data in events if kind == "gate"]
    after_plain = gated[gated.index("sweep.plain") + 1:]
    assert after_plain[0] != "tile-sizes.triton.18d8cacb"
    assert after_plain.index("sweep.own") < after_plain.index("tile-sizes.triton.18d8cacb")
    assert "sweep.own" in [step.card for step in result.applied]


FP32_AUTOTUNED = '''import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"TILE_M": 128, "TILE_N": 256, "KSTEP": 64}, num_warps=8, num_stages=2),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def mm(X, W, Y, M, N, K, TILE_M: tl.constexpr, TILE_N: tl.constexpr, KSTEP: tl.constexpr):
    rows = tl.program_id(0) * TILE_M + tl.arange(0, TILE_M)
    cols = tl.program_id(1) * TILE_N + tl.arange(0, TILE_N)
    acc = tl.zeros([TILE_M, TILE_N], dtype=tl.float32)
    for k in range(0, K, KSTEP):
        ks = k + tl.arange(0, KSTEP)
        x = tl.load(X + rows[:, None] * K + ks[None, :], mask=rows[:, None] < M, other=0.0)
        w = tl.load(W + ks[:, None] * N + cols[None, :], mask=cols[None, :] < N, other=0.0)
        acc += tl.dot(x, w)
    tl.store(Y + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


def run(x, w):
    M, K = x.shape
    N = w.shape[1]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    grid = lambda meta: (triton.cdiv(M, meta["TILE_M"]), triton.cdiv(N, meta["TILE_N"]))
    mm[grid](x, w, y, M, N, K)
    return y
'''


def test_a_single_step_that_would_add_an_entry_too_big_for_shared_memory_is_refused(
        tmp_path: Path) -> None:
    """On fp32 operands a tile step that doubles the 128x256x64, 2-stage entry's rows writes a
    256x256x64 entry: 256 KB of operand tiles, more than the 227 KB a block may have. It is
    refused with the reason; at 16-bit elements (128 KB) it is written, and without a known
    element width nothing is checked."""
    from passes.base import PassContext

    lib = _heldout_library(tmp_path, {"tile-sizes.triton.18d8cacb"})
    [card] = lib.cards()
    ir = kir.parse(FP32_AUTOTUNED, "triton")
    big = '"TILE_M": 256, "TILE_N": 256, "KSTEP": 64}, num_warps=8, num_stages=2'

    def made(dtype: str | None) -> list:
        ctx = PassContext(facts={"dtype": dtype} if dtype else {})
        return list(materializations(card, ir, DeterministicRewriter(), ctx, sweeps=False))

    wide = made("fp32")
    assert not any(m.ir is not None and big in m.ir.unparse() for m in wide)
    assert any("256 KB of shared memory" in r and "more than a block's 227 KB" in r
               for m in wide for r in m.refusals)
    assert any(m.ir is not None and big in m.ir.unparse() for m in made("bf16"))
    assert any(m.ir is not None and big in m.ir.unparse() for m in made(None))


def test_structural_cards_are_asked_before_more_single_knob_steps(tmp_path: Path) -> None:
    """On a device where every extra autotune entry is 1.5% faster, each single tile or stage
    step is kept and makes a new state on which the launch cards come up again. Their small
    measured gains pull their expected gain below the descriptor card's prior, so the
    descriptors (0.7x here) are gated and kept within the budget."""
    ids = {"tile-sizes.triton.18d8cacb", "tile-sizes.triton.4c051e66",
           "software-pipelining.triton.d1263a6d", "software-pipelining.triton.76e52f8c",
           "tma-descriptors.triton.7de2c2db"}
    lib = _heldout_library(tmp_path, ids)
    target = tmp_path / "mm_naive.py"
    target.write_text((ROOT / "bench/heldout/mm1024/mm_naive.py").read_text())

    def ms(source: str) -> float:
        entries = source.count("triton.Config(")
        return 20.0 * 0.985 ** entries * (0.7 if "make_tensor_descriptor(" in source else 1.0)

    events: list[tuple[str, dict]] = []
    result = optimize(target, str(ROOT / "bench/heldout/mm1024"), lib, tier="device",
                      out=tmp_path / "out", rewriter=DeterministicRewriter(),
                      check_fn=ScriptedGate(ms=ms), budget_steps=12,
                      progress=lambda kind, data: events.append((kind, dict(data))))
    gated = [data["card"] for kind, data in events if kind == "gate"]
    assert "tma-descriptors.triton.7de2c2db" in gated, gated
    assert "tma-descriptors" in [s.pass_name for s in result.applied]


def test_a_lost_pair_bet_goes_back_to_the_best_kernel(tmp_path: Path) -> None:
    """The loop steps onto a slower descriptor step for the persistent loop its card's evidence
    ran with; when that card does not beat the best kernel there, the loop goes back to the best
    at once instead of spending the budget on the stone (mm1024 at c1d5a41: 13 of 16 gates on
    two stones 14% slower, none faster than the kernel they left). A pipelining step that pays
    on the pointer kernel and not on the slower stone is then found on the best kernel."""
    lib = _heldout_library(tmp_path, {"tma-descriptors.triton.7de2c2db",
                                      "persistent-grid.triton.a9560196",
                                      "software-pipelining.triton.d1263a6d"})
    target = tmp_path / "addmm_start.py"
    target.write_text((ROOT / "bench/heldout/addmm/addmm_start.py").read_text())

    def ms(source: str) -> float:
        tma = "make_tensor_descriptor(" in source
        persistent = "tl.num_programs(0)" in source
        staged = "num_stages=" in source
        return 10.0 * (1.10 if tma else 1.0) * (1.05 if persistent else 1.0) * (
            0.95 if staged else 1.0)

    events: list[tuple[str, dict]] = []
    gate = ScriptedGate(ms=ms)
    result = optimize(target, str(ROOT / "bench/heldout/addmm"), lib, tier="device",
                      out=tmp_path / "out", rewriter=DeterministicRewriter(),
                      check_fn=gate, budget_steps=8, config_sweeps=False,
                      progress=lambda e, d: events.append((e, dict(d))))
    names = [e for e, _ in events]
    assert "stone" in names, names
    # a move was taken from the slower descriptor stone; the pair did not pay, and the loop
    # came back: the best is the pipelining step on the pointer kernel, with no descriptors
    assert [s.pass_name for s in result.applied] == ["software-pipelining"]
    assert result.best_ms == pytest.approx(9.5)
    assert "make_tensor_descriptor(" not in result.best_path.read_text()
    assert len(gate.seen) <= 9 and result.gated <= 8


def test_the_start_states_plain_sweep_is_in_the_frontier_and_gated_first(tmp_path: Path) -> None:
    """Device tier: the first candidate gated is the start kernel under the no-library
    control's autotune list (`lineage.control.autotune_control`), whatever the library holds."""
    from lineage.control import autotune_control
    from lineage.optimize import _choose, _frontier, _Run, _State

    target = tmp_path / "mm_naive.py"
    target.write_text((ROOT / "bench/heldout/mm1024/mm_naive.py").read_text())
    case = str(ROOT / "bench/heldout/mm1024")
    lib = _heldout_library(tmp_path, {"tile-sizes.triton.18d8cacb",
                                      "tma-descriptors.triton.7de2c2db"})
    events: list[tuple[str, dict]] = []
    gate = ScriptedGate(ms=lambda s: 10.0)
    optimize(target, case, lib, tier="device", out=tmp_path / "out", budget_steps=2,
             rewriter=DeterministicRewriter(), check_fn=gate,
             progress=lambda kind, data: events.append((kind, dict(data))))
    gated = [data["card"] for kind, data in events if kind == "gate"]
    assert gated[:2] == ["(start)", "sweep.plain"]
    assert gate.seen[1] == autotune_control(target.read_text())
    # in the frontier of the start state, and chosen first, even with priors off
    from lineage.retrieval import Retriever
    from lineage.graph import Lineage
    ir = kir.parse(target.read_text(), "triton")
    for priors in (True, False):
        run = _Run(None, None, None, Lineage(), "triton", case, "cuda", "device", str(target),
                   lambda e, d: None, 8, None, tuple(lib.cards()), Retriever(lib.cards()),
                   priors=priors)
        start = _State(target.read_text(), ir, None, 10.0, sid="s:0")
        run.states, run.best = [start], start
        assert "plain" in [o.kind for o in _frontier(start, run)]
        assert _choose(run).kind == "plain"


def test_a_moves_expected_gain_is_updated_by_what_it_measured(tmp_path: Path) -> None:
    """A card's prior is its measured effect raised to its scope match; each candidate it
    makes in the run moves its expected gain toward what was measured (a slower candidate
    lowers it, a faster one raises it); with priors off every move starts at 1."""
    import math

    from lineage.optimize import PRIOR_WEIGHT, _gain, _move, _Option, _prior, _Run, _State
    from lineage.retrieval import Retriever, Target, kernel_signature
    from lineage.graph import Lineage

    lib = _heldout_library(tmp_path, {"tile-sizes.triton.18d8cacb"})
    [card] = lib.cards()
    ir = kir.parse((ROOT / "bench/heldout/mm1024/mm_naive.py").read_text(), "triton")
    target = Target("triton", "elsewhere", signature=kernel_signature(ir))
    prior = _prior(card, target)
    assert 0 < prior <= math.log(card.effect_score)  # a dot-loop card on a dot-loop kernel
    run = _Run(None, None, None, Lineage(), "triton", "elsewhere", "cuda", "device", "x",
               lambda e, d: None, 8, None, (card,), Retriever([card]))
    option = _Option(_State("", ir, None, 10.0), "card", card, 0, prior)
    before = _gain(option, run)
    assert before == pytest.approx(math.exp(prior))
    run.observed[_move(option)] = [math.log(10.0 / 11.0)]  # one candidate 10% slower
    lowered = _gain(option, run)
    assert lowered < before
    assert math.log(lowered) == pytest.approx(
        (PRIOR_WEIGHT * prior + math.log(10.0 / 11.0)) / (PRIOR_WEIGHT + 1))
    run.observed[_move(option)].append(math.log(2.0))  # then one twice as fast
    assert _gain(option, run) > lowered
    run.priors = False
    run.observed.clear()
    assert _gain(option, run) == 1.0


@pytest.mark.parametrize("with_library", [True, False])
def test_the_best_is_never_worse_than_the_best_gated_sweep(tmp_path: Path, with_library: bool
                                                           ) -> None:
    """Whatever the cards do (here every card's candidate is slower than the start), the best
    kernel reported is at least as fast as every gated sweep candidate, the control's among
    them; without a library the run is the control and its sweeps alone, same budget."""
    from lineage.control import autotune_control
    from lineage.skills import Library

    target = tmp_path / "mm_naive.py"
    start = (ROOT / "bench/heldout/mm1024/mm_naive.py").read_text()
    target.write_text(start)
    control = autotune_control(start)
    lib = _heldout_library(tmp_path, {"tile-sizes.triton.18d8cacb", "tma-descriptors.triton.7de2c2db",
                                      "software-pipelining.triton.d1263a6d"}) if with_library \
        else Library.open(tmp_path / "empty", create=True)

    def ms(source: str) -> float:
        if source == control:
            return 7.0
        return 9.0 if "triton.Config(" in source and "make_tensor_descriptor(" not in source \
            else 12.0 if source != start else 10.0

    gate = ScriptedGate(ms=ms)
    result = optimize(target, str(ROOT / "bench/heldout/mm1024"), lib, tier="device",
                      out=tmp_path / "out", rewriter=DeterministicRewriter(), check_fn=gate,
                      budget_steps=6)
    swept = [ms(src) for src in gate.seen[1:] if "triton.Config(" in src]
    assert control in gate.seen and result.best_ms == min([10.0, *swept]) == 7.0
    assert result.gated <= 6
    if not with_library:
        assert {s.card for s in result.applied} <= {"sweep.plain", "sweep.own"}
        # and the rules the search offers without a card
        assert all(s.card.startswith(("sweep.", "rule.")) for s in result.rejected)


def test_on_a_row_kernel_the_sweeps_outrank_the_cards_of_dot_loops() -> None:
    """A row-reduction start (no dot loop): the tile and pipelining cards of the library were
    measured on dot loops, so their scope match, and with it their prior, is nil; the state's
    own sweeps (block size, rows per program, warps, vector width) come before them."""
    import gate
    from lineage.graph import Lineage
    from lineage.optimize import _frontier, _gain, _Run, _State
    from lineage.retrieval import Retriever
    from lineage.skills import Library

    cards = Library.open(HELDOUT_LIBRARY).cards(admitted_only=True)
    case = gate.load_case(ROOT / "bench/heldout/rmsnorm")
    source = case.start_path().read_text()
    run = _Run(None, None, None, Lineage(), "triton", case.ref, "cuda", "device", "x",
               lambda e, d: None, 12, None, tuple(cards), Retriever(cards))
    start = _State(source, kir.parse(source, "triton"), None, 1.0, sid="s:0")
    run.states, run.best = [start], start
    gains = {(o.kind, o.card.pass_name): _gain(o, run) for o in _frontier(start, run)}
    sweeps = min(gains[("plain", "autotune")], gains[("own", "autotune")])
    dot_cards = [g for (kind, name), g in gains.items() if kind == "card"
                 and name in ("tile-sizes", "software-pipelining", "tma-descriptors")]
    assert dot_cards and max(dot_cards) < sweeps


def test_a_launched_kernel_the_profile_never_saw_is_cold_and_a_helper_is_not_a_kernel() -> None:
    """A dispatch between two kernels whose timed shape takes one of them: the profile names
    only that one, yet the other is launched too; it holds a share of 0 (its sites are left
    out), while a jit helper both call gets no share at all."""
    import kir
    from gate import Tier, Timing, Verdict
    from gate.verdict import VariantTiming
    from lineage.optimize import kernel_shares

    source = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _scale(x):
    return x * 2.0


@triton.jit
def wide(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, _scale(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


@triton.jit
def narrow(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, _scale(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


def run(x):
    y = torch.empty_like(x)
    if x.numel() > 4096:
        wide[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    else:
        narrow[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
    return y
'''
    ir = kir.parse(source, "triton")
    one = Verdict(True, Tier.DEVICE, "timing",
                  timing=Timing(1.0, 1.0, (VariantTiming("v", 1.0, 1.0, (("wide", 1.0),)),)))
    assert kernel_shares(one) == {}
    assert kernel_shares(one, ir) == {"wide": 1.0, "narrow": 0.0}
    # both ran: the profile's own shares, the helper still without one
    both = Verdict(True, Tier.DEVICE, "timing", timing=Timing(
        1.0, 1.0, (VariantTiming("v", 1.0, 1.0, (("wide", 0.9), ("narrow", 0.1))),)))
    assert kernel_shares(both, ir) == pytest.approx({"wide": 0.9, "narrow": 0.1})
    # no profile: nothing to choose by
    assert kernel_shares(Verdict(True, Tier.DEVICE, "timing", timing=Timing(1.0, 1.0)), ir) == {}


def test_on_a_swept_state_each_fitting_launch_card_is_offered_as_its_sweep_not_a_point() -> None:
    """mm1024's start under the plain sweep (its kernel configured by an autotuner): a tile,
    warps or pipelining card's rewrite of one entry is one point of that card's recorded sweep,
    so each card that fits is offered as its recorded sweep and none as a point (on the H200,
    25 such points of tile cards timed 0.99-1.01x, their sweeps up to 1.37x). On the start,
    which no autotuner configures, the launch cards stay points, beside the recorded sweep of
    the one that fits best."""
    import gate
    from lineage.graph import Lineage
    from lineage.moves import plain_sweep
    from lineage.optimize import _frontier, _Run, _State
    from lineage.retrieval import Retriever
    from lineage.skills import Library
    from lineage.transfer import LAUNCH_PASSES

    cards = Library.open(HELDOUT_LIBRARY).cards(admitted_only=True)
    case = gate.load_case(ROOT / "bench/heldout/mm1024")
    source = case.start_path().read_text()
    run = _Run(None, None, None, Lineage(), "triton", case.ref, "cuda", "device", "x",
               lambda e, d: None, 12, None, tuple(cards), Retriever(cards))
    start = _State(source, kir.parse(source, "triton"), None, 1.0, sid="s:0")
    swept_ir = plain_sweep(start.ir).ir
    swept = _State(swept_ir.unparse(), swept_ir, None, 0.5, parent=start, sid="s:1")
    run.states = [start, swept]

    def launch_moves(state: _State) -> dict[str, set[str]]:
        run.best = state
        out: dict[str, set[str]] = {"card": set(), "recorded": set()}
        for o in _frontier(state, run):
            if o.kind in out and o.card.pass_name in LAUNCH_PASSES:
                out[o.kind].add(o.card.id)
        return out

    on_start, on_swept = launch_moves(start), launch_moves(swept)
    assert len(on_start["recorded"]) == 1 and on_start["card"]
    assert not on_swept["card"]
    assert len(on_swept["recorded"]) > 1
    assert on_start["recorded"] <= on_swept["recorded"]
