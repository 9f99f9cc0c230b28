"""Roundtrip admission: a card is tried on held-out states and admitted only when the trial
passes the gate and reproduces its effect; every trial is logged on the card.

The gate's verdicts are scripted (`check_fn`); materialization runs the real passes on the
held-out states' kernel text.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kir.errors import BadInputError
from lineage.admission import admit, held_out_contexts, trial
from lineage.graph import Lineage
from lineage.skills import Library
from passes.rewriter import DeterministicRewriter
from skill_helpers import DATA, ROOT, ScriptedGate, gemm_cards, library, lineage


def test_held_out_contexts_exclude_the_source_lineage_and_order_present_features_last() -> None:
    cards = gemm_cards(admitted=False)
    assert held_out_contexts(cards["autotune"], [lineage("gemm")]) == []
    contexts = held_out_contexts(cards["software-pipelining"], [lineage("gemm"), lineage("conv2d")])
    assert contexts and all(c.case == "conv2d" for c in contexts)
    # The conv2d expert already pipelines its loop: states without the feature come first,
    # the naive root first; those that pipeline somewhere come after all of them.
    conv = lineage("conv2d")
    assert contexts[0].state == conv.roles("naive")[0]
    has = ["num_stages" in c.source for c in contexts]
    assert not has[0] and any(has) and has == sorted(has)


def test_interpret_trial_needs_the_gate_and_the_feature(tmp_path: Path) -> None:
    card = gemm_cards(admitted=False)["software-pipelining"]
    (context, *_) = held_out_contexts(card, [lineage("conv2d")])
    ok = trial(card, context, tier="interpret", rewriter=DeterministicRewriter(),
               check_fn=ScriptedGate())
    assert ok.ok and ok.case == "conv2d" and "software-pipelining appears" in ok.reason
    bad = trial(card, context, tier="interpret", rewriter=DeterministicRewriter(),
                check_fn=ScriptedGate(fails=lambda s: True))
    assert not bad.ok and bad.reason.startswith("gate: wrong_output")


def test_device_trial_must_reproduce_the_measured_speedup() -> None:
    card = gemm_cards(admitted=False)["software-pipelining"]  # measured 1.25x on gemm
    (context, *_) = held_out_contexts(card, [lineage("conv2d")])
    fast = ScriptedGate(ms=lambda s: 8.0 if "tl.range(" in s else 10.0)
    good = trial(card, context, tier="device", rewriter=DeterministicRewriter(), check_fn=fast)
    assert good.ok and good.speedup == 1.25
    slow = ScriptedGate(ms=lambda s: 10.5 if "tl.range(" in s else 10.0)
    bad = trial(card, context, tier="device", rewriter=DeterministicRewriter(), check_fn=slow)
    assert not bad.ok and "below the card's range" in bad.reason and bad.speedup < 1


def test_device_rule_asks_for_a_speedup_and_the_magnitude_only_on_request() -> None:
    from lineage.admission import effect_floor

    assert effect_floor({"min": 2.7}, 0.25) == pytest.approx(1.01)
    assert effect_floor({"min": 2.7}, 0.25, magnitude=True) == pytest.approx(2.025)
    # an enabling step whose evidence is within noise is not asked for a speedup it never
    # showed: it must not fall below its range (and show its structure, see below)
    assert effect_floor({"min": 1.005}, 0.25, magnitude=True) == pytest.approx(0.75375)
    assert effect_floor({"min": 1.01}, 0.25) == pytest.approx(1.01)
    assert effect_floor({"min": 0.98}, 0.25) == pytest.approx(0.735)
    card = gemm_cards(admitted=False)["software-pipelining"]  # measured 1.25x on gemm
    (context, *_) = held_out_contexts(card, [lineage("conv2d")])
    modest = ScriptedGate(ms=lambda s: 9.5 if "tl.range(" in s else 10.0)  # 1.053x
    assert trial(card, context, tier="device", rewriter=DeterministicRewriter(),
                 check_fn=modest).ok
    strict = trial(card, context, tier="device", rewriter=DeterministicRewriter(),
                   check_fn=modest, magnitude=True, slack=0.05)  # floor 1.1875x
    assert not strict.ok and "below the card's range" in strict.reason
    noise = ScriptedGate(ms=lambda s: 9.95 if "tl.range(" in s else 10.0)  # 1.005x: noise
    assert not trial(card, context, tier="device", rewriter=DeterministicRewriter(),
                     check_fn=noise).ok
    # the same card had its evidence been an enabling step (1.004x, within noise): admitted at
    # 1.005x where its loop appears, rejected where the candidate is a quarter slower
    import dataclasses

    flat = {"min": 1.004, "max": 1.004, "geomean": 1.004, "n": 1}
    enabler = dataclasses.replace(card, effect={**card.effect, "speedup": flat})
    kept = trial(enabler, context, tier="device", rewriter=DeterministicRewriter(), check_fn=noise)
    assert kept.ok, kept.reason
    slower = ScriptedGate(ms=lambda s: 14.0 if "tl.range(" in s else 10.0)  # 0.71x
    assert not trial(enabler, context, tier="device", rewriter=DeterministicRewriter(),
                     check_fn=slower).ok


def test_admission_with_parallel_jobs_matches_one_at_a_time(tmp_path: Path) -> None:
    import threading
    import time as _time

    def run(jobs: int, folder: Path) -> tuple[Any, Library, int]:
        lib = library(folder, admitted=False)
        lock = threading.Lock()
        live, peak = [0], [0]
        inner = ScriptedGate(fails=lambda s: "num_warps" in s)

        def gate(*args: Any, **kwargs: Any) -> Any:
            with lock:
                live[0] += 1
                peak[0] = max(peak[0], live[0])
            _time.sleep(1.5)  # a gate takes time: the others' gates run meanwhile
            try:
                with lock:
                    return inner(*args, **kwargs)
            finally:
                with lock:
                    live[0] -= 1

        report = admit(lib, [lineage("gemm"), lineage("conv2d")], tier="interpret",
                       rewriter=DeterministicRewriter(), check_fn=gate, jobs=jobs)
        return report, lib, peak[0]

    one, lib_one, peak_one = run(1, tmp_path / "one")
    three, lib_three, peak_three = run(3, tmp_path / "three")
    assert peak_one == 1 and peak_three > 1  # gates overlapped only with jobs > 1
    assert sorted(one.admitted) == sorted(three.admitted) and one.admitted
    assert sorted(one.rejected) == sorted(three.rejected)
    assert one.trials == three.trials
    assert ({c.id: len(c.verification) for c in lib_one.cards()}
            == {c.id: len(c.verification) for c in lib_three.cards()})
    with pytest.raises(BadInputError):
        admit(lib_one, [lineage("gemm")], jobs=0)


def test_admit_logs_every_trial_and_stores_the_cards(tmp_path: Path) -> None:
    lib = library(tmp_path, admitted=False)
    # Autotuned candidates (config lists with num_warps) fail the scripted gate.
    gate = ScriptedGate(fails=lambda s: "num_warps" in s)
    report = admit(lib, [lineage("gemm"), lineage("conv2d")], tier="interpret",
                   rewriter=DeterministicRewriter(), check_fn=gate)
    cards = {c.pass_name: c for c in lib.cards()}
    assert cards["software-pipelining"].admitted and cards["tensor-core-dot"].admitted
    assert set(report.admitted) == {cards["software-pipelining"].id, cards["tensor-core-dot"].id}
    log = cards["autotune"].verification
    assert not cards["autotune"].admitted and 1 <= len(log) <= 2  # max_trials held-out states
    assert all(not t.ok and t.reason.startswith("gate: wrong_output") for t in log)
    assert [t.case for t in cards["tensor-core-dot"].verification] == ["conv2d"]
    assert report.trials == sum(len(c.verification) for c in cards.values())
    # Admitted cards are not tried again.
    again = admit(lib, [lineage("conv2d")], tier="interpret", rewriter=DeterministicRewriter(),
                  check_fn=ScriptedGate())
    assert cards["software-pipelining"].id not in again.admitted + again.rejected
    assert len(lib.get(cards["software-pipelining"].id).verification) == 1
    # A scope widened by the successful trial: conv2d is now a verified case of the card.
    from lineage.retrieval import verified_scope
    assert "conv2d" in verified_scope(lib.get(cards["software-pipelining"].id))["cases"]


def test_skills_command_admission_without_held_out_context(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    proc = subprocess.run([sys.executable, "-m", "lineage", "skills", str(lib), "--add",
                           str(DATA / "gemm.json"), "--admit", str(DATA / "gemm.json"),
                           "--tier", "interpret", "--json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    # Its own lineage holds no held-out state: nothing may be admitted from it.
    assert data["admission"]["trials"] == 0 and len(data["admission"]["untried"]) == 3
    assert not any(s["admitted"] for s in data["skills"])


@pytest.mark.slow
def test_real_gate_admits_a_gemm_card_on_an_induced_conv2d_lineage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """conv2d_induced.json was written by `klineage induce experts/conv2d/conv2d_triton.py
    --case conv2d --tier interpret`. The gemm fixture's tensor-core-dot card, never seen on
    conv2d, is materialized on its naive root and passes the real interpret-tier gate."""
    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path / "cache"))
    lib = Library.open(tmp_path / "lib", create=True)
    card = lib.put(gemm_cards(admitted=False)["tensor-core-dot"])
    induced = Lineage.load(DATA / "conv2d_induced.json")
    report = admit(lib, [induced], tier="interpret", max_trials=1,
                   rewriter=DeterministicRewriter())
    stored = lib.get(card.id)
    (t,) = stored.verification
    assert report.admitted == (card.id,) and stored.admitted, t.reason
    assert t.case == "conv2d" and t.context == f"conv2d:{induced.roles('naive')[0]}"
    assert "tensor-core-dot appears" in t.reason


def test_a_card_without_a_site_in_any_held_out_state_is_untried(tmp_path: Path) -> None:
    import dataclasses

    lib = Library.open(tmp_path / "lib", create=True)
    card = lib.put(dataclasses.replace(gemm_cards(admitted=False)["autotune"],
                                       id="radix-width.triton.x", pass_name="radix-width"))
    report = admit(lib, [lineage("conv2d")], tier="interpret", rewriter=DeterministicRewriter(),
                   check_fn=ScriptedGate())
    assert report.untried == (card.id,) and report.trials == 0
    assert lib.get(card.id).verification == ()


def _induce_branch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first_branch: int,
                   width: int = 1) -> Lineage:
    """The gemm fixture's expert induced again, every candidate passing a scripted gate,
    exploring only the order that starts with the `first_branch`-th present optimization."""
    import gate
    from lineage.induce import induce

    gemm = lineage("gemm")
    expert = tmp_path / f"branch{first_branch}x{width}" / "gemm_triton.py"
    expert.parent.mkdir(parents=True)
    expert.write_text(gemm.node(gemm.roles("expert")[0])["source"])
    monkeypatch.setattr(gate, "check", ScriptedGate())
    result = induce(expert, "gemm", tier="interpret", out=expert.parent / "out",
                    first_branch=first_branch, width=width, max_steps=8)
    return result.lineage


def _last_step(lin: Lineage) -> set[str]:
    """The passes of the forward steps that end at the expert."""
    return {lin.node(t)["pass"] for t in lin.graph.predecessors(lin.roles("expert")[0])}


def _two_orders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Lineage, Lineage]:
    """(a lineage whose first de-optimization differs from the fixture's, one whose first
    de-optimization is the fixture's): branches 0 and 1 of the gemm fixture's expert."""
    branches = [_induce_branch(tmp_path, monkeypatch, b) for b in (0, 1)]
    source = _last_step(lineage("gemm"))
    other = [b for b in branches if _last_step(b) != source]
    same = [b for b in branches if _last_step(b) == source]
    assert other and same, [sorted(_last_step(b)) for b in branches]
    return other[0], same[0]


def test_a_held_out_lineage_of_another_order_gives_contexts_its_source_lineage_lacks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = lineage("gemm")
    cards = gemm_cards(admitted=False)
    other, _ = _two_orders(tmp_path, monkeypatch)
    # Without a held-out lineage, the gemm-only cards have nowhere to be tried.
    assert all(held_out_contexts(c, [source]) == [] for c in cards.values())
    for name, card in cards.items():
        has = []
        for ctx in held_out_contexts(card, [source], held_out=[other]):
            assert ctx.state not in set(source.states())  # never a state of the source lineage
            assert ctx.state in set(other.states())
            node = other.node(ctx.state)
            has.append(any(f.get("pass") == name for f in node.get("features") or ()))
        assert has == sorted(has)  # states without the card's pass first
    # The other order removes another optimization first: some card meets a fresh state.
    assert any(held_out_contexts(c, [source], held_out=[other]) for c in cards.values())


def test_a_held_out_lineage_holding_a_cards_evidence_is_not_held_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lineage.skills import lift

    source = _induce_branch(tmp_path, monkeypatch, first_branch=1)
    both = _induce_branch(tmp_path, monkeypatch, first_branch=0, width=2)  # holds branch 1 too
    only_zero = _induce_branch(tmp_path, monkeypatch, first_branch=0)
    cards = lift(source)
    sharing = [c for c in cards if set(c.evidence) & set(both.transitions())]
    assert sharing and len(sharing) == len(cards)  # branch 1's whole walk is in `both`
    assert all(held_out_contexts(c, [source], held_out=[both]) == [] for c in cards)
    # The lineage of branch 0 alone shares no first step with branch 1: contexts exist.
    assert any(held_out_contexts(c, [source], held_out=[only_zero]) for c in cards)


def test_admit_with_a_held_out_lineage_and_the_cli_guard(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    lib = library(tmp_path, admitted=False)
    other, _ = _two_orders(tmp_path, monkeypatch)
    without = admit(lib, [lineage("gemm")], tier="interpret", rewriter=DeterministicRewriter(),
                    check_fn=ScriptedGate())
    assert without.admitted == () and without.trials == 0
    report = admit(lib, [lineage("gemm")], tier="interpret", rewriter=DeterministicRewriter(),
                   check_fn=ScriptedGate(), held_out=[other])
    assert report.admitted and report.trials >= len(report.admitted)
    for card_id in report.admitted:
        (t,) = lib.get(card_id).verification
        assert t.ok and t.context.split(":", 1)[1] in set(other.states())
        assert t.context.split(":", 1)[1] not in set(lineage("gemm").states())
    proc = subprocess.run([sys.executable, "-m", "lineage", "skills", str(tmp_path / "lib"),
                           "--held-out", str(DATA / "gemm.json")], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "--held-out needs --admit" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_admission_past_its_deadline_leaves_cards_pending(tmp_path: Path) -> None:
    import time as _time

    lib = library(tmp_path, admitted=False)
    gate = ScriptedGate()
    report = admit(lib, [lineage("gemm"), lineage("conv2d")], tier="interpret",
                   rewriter=DeterministicRewriter(), check_fn=gate,
                   deadline=_time.monotonic() - 1)
    assert report.trials == 0 and gate.seen == []
    assert sorted(report.pending) == sorted(c.id for c in lib.cards())
    assert report.to_json()["pending"] == list(report.pending)
    assert not any(c.verification for c in lib.cards())


def test_admission_tries_the_cards_with_the_most_at_stake_first(tmp_path: Path) -> None:
    """Under a deadline the cards not reached stay pending: they are taken largest recorded
    speedup first, so a 10x tensor-core card is not left behind pragmas that sort before it."""
    lib = library(tmp_path, admitted=False)
    tried: list[str] = []
    admit(lib, [lineage("gemm"), lineage("conv2d")], tier="interpret",
          rewriter=DeterministicRewriter(), check_fn=ScriptedGate(),
          progress=lambda event, data: tried.append(data["card"]) if event == "trial" else None)
    order = list(dict.fromkeys(tried))
    assert len(order) >= 2
    scores = [lib.get(i).effect_score for i in order]
    assert scores == sorted(scores, reverse=True), list(zip(order, scores))


def test_trial_contexts_skip_states_the_card_cannot_act_on_and_prefer_its_recorded_steps() -> None:
    from dataclasses import replace

    from lineage.admission import Context, _trial_contexts
    from lineage.skills import lift

    lin = lineage("conv2d_induced")
    card = next(c for c in lift(lin) if c.pass_name == "tile-sizes")
    step = {"value": 64, "tile": "BLOCK_M"}  # a recorded size the default doubling misses
    card = replace(card, options=step, variants=({"anchor": card.variants[0]["anchor"],
                                                  "options": step},))
    root, expert = lin.roles("naive")[0], lin.roles("expert")[0]
    assert '"BLOCK_M": 16' in lin.node(root)["source"]
    assert '"BLOCK_M": 32' in lin.node(expert)["source"]  # doubling it is the recorded step

    def ctx(state: str, source: str) -> Context:
        return Context("conv2d", state, source, "triton", "")

    bare = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
            "def k(x_ptr):\n    tl.store(x_ptr, 1.0)\n")
    contexts = [ctx("s:bare", bare), ctx(expert, lin.node(expert)["source"]),
                ctx(root, lin.node(root)["source"])]
    # the bare kernel has no tile: passed over; on the expert the recorded step is what the
    # pass's default does anyway, so the root (where only the card's record makes 64) is first
    chosen = _trial_contexts(card, contexts, 2, DeterministicRewriter(), {}, "interpret")
    assert [c.state for c in chosen] == [root, expert]
    assert [c.state for c in _trial_contexts(card, contexts, 1, DeterministicRewriter(), {},
                                             "interpret")] == [root]
    assert _trial_contexts(card, contexts[:1], 2, DeterministicRewriter(), {}, "interpret") == []


def test_a_trial_on_a_state_without_device_time_is_logged_and_another_state_tried(
        tmp_path: Path) -> None:
    from lineage.admission import NO_BASELINE

    lib = library(tmp_path, admitted=False)
    card = next(c for c in lib.cards() if c.pass_name == "software-pipelining")
    first, second, *_ = held_out_contexts(card, [lineage("conv2d")])
    # the first state itself fails the device gate: no time to compare the candidate with
    gate = ScriptedGate(fails=lambda s: s == first.source,
                        ms=lambda s: 8.0 if "tl.range(" in s else 10.0)
    admit(lib, [lineage("conv2d")], tier="device", max_trials=1, check_fn=gate)
    logged = next(c for c in lib.cards() if c.id == card.id).verification
    assert [t.context for t in logged] == [first.label, second.label]
    assert NO_BASELINE in logged[0].reason and not logged[0].ok
    # ... and the log says why the state has none (its own verdict at that tier)
    assert "fails the gate: wrong_output: max rel err" in logged[0].reason
    assert logged[1].ok and logged[1].speedup == pytest.approx(1.25)
