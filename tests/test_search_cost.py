"""The optimize policy spends a time box where it pays: a move's expected gain per expected gate
second (`lineage.optimize._cost`, `_paced`), measured per kind of move in the run.

The gate is scripted: every candidate passes at a scripted time, and its verdict records the
gate's wall seconds (`phases`) as the real gate does; which move made a candidate is read from
the loop's progress events."""
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import kir
from lineage.control import autotune_control
from lineage.optimize import optimize
from lineage.skills import Library
from passes.rewriter import DeterministicRewriter
from skill_helpers import ROOT, ScriptedGate, packed_library

CASE = str(ROOT / "bench/heldout/mm1024")
START = (ROOT / "bench/heldout/mm1024/mm_naive.py").read_text()


def _jit(source: str) -> str:
    """The text of the module's jit function (from its decorator to the next definition)."""
    start = source.index("@triton.jit")
    end = source.find("\ndef ", source.index("def ", start) + 4)
    return source[start:end if end >= 0 else len(source)]


def _gated(tmp_path: Path, *, deadline: float | None, card_s: float, control_ms: float = 10.0,
           budget: int = 8, seconds: list[float] | None = None) -> tuple[list[str], float | None]:
    """The moves gated in order (card ids; "(start)" first) and the best time, with a start
    gate of 1 s, a configuration's (a candidate whose jit function is the start's: only its
    autotune list or launch differ) of 10 s, and any other candidate's (a structural rewrite:
    new code to compile) of `card_s`; every candidate times 10 ms but the control. `seconds`
    receives each gate's seconds, in the same order."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    target = tmp_path / "mm_naive.py"
    target.write_text(START)
    control = autotune_control(START)
    scripted = ScriptedGate(ms=lambda s: control_ms if s == control else 10.0)

    def gate(source: str, language: object, case: object, tier: object, **kw: object):
        verdict = scripted(source, language, case, tier, **kw)
        took = 1.0 if source == START else 10.0 if _jit(source) == _jit(START) else card_s
        if seconds is not None:
            seconds.append(took)
        return dataclasses.replace(verdict, phases=(("timing", took),))

    events: list[str] = []
    result = optimize(target, CASE, Library.open(packed_library("heldout_all")), tier="device",
                      out=tmp_path / "out", budget_steps=budget, rewriter=DeterministicRewriter(),
                      check_fn=gate, deadline=deadline,
                      progress=lambda kind, data: events.append(data["card"]) if kind == "gate" else None)
    return events, result.best_ms


def test_costly_card_gates_give_way_to_cheap_sweeps_when_the_box_binds(tmp_path: Path) -> None:
    """Card candidates whose gates take 200 times a sweep's (a card's candidate on a kernel
    without an autotuner): bounded by gates alone the run spends its budget on the cards
    (their priors are higher); bounded by a time box that the measured pace cannot fill, once
    a card's gate was measured that dear the start's own sweep comes before another such gate.
    Either way the start's plain sweep (the control) is the first candidate."""
    unpaced, _ = _gated(tmp_path / "a", deadline=None, card_s=2000.0, budget=12)
    took: list[float] = []
    paced, _ = _gated(tmp_path / "b", deadline=time.monotonic() + 600.0, card_s=2000.0,
                      budget=12, seconds=took)
    assert unpaced[:2] == paced[:2] == ["(start)", "sweep.plain"]
    assert "sweep.own" not in unpaced[:6]
    # the cards' prior ranks them first until one of them was measured expensive
    assert paced[2].startswith(("software-pipelining.", "tile-sizes."))
    dear = [i for i, s in enumerate(took) if s == 2000.0]
    assert dear, took  # the box binds: some card's gate was measured dear
    assert "sweep.own" in paced[dear[0]:]
    own = paced.index("sweep.own", dear[0])
    assert not [i for i in dear if dear[0] < i < own], (paced, took)
    # cheap card gates: a binding box changes nothing
    same, _ = _gated(tmp_path / "c", deadline=time.monotonic() + 600.0, card_s=10.0, budget=12)
    assert same == unpaced


def test_the_control_is_the_floor_whatever_the_costs(tmp_path: Path) -> None:
    """The control, the start under the generic autotune list, is gated first and the best is
    at least as fast as it, with card gates cheap or dear and the box binding or not."""
    for i, (deadline, card_s) in enumerate(((None, 1.0), (time.monotonic() + 60.0, 5000.0))):
        events, best_ms = _gated(tmp_path / str(i), deadline=deadline, card_s=card_s,
                                 control_ms=7.0, budget=4)
        assert events[:2] == ["(start)", "sweep.plain"]
        assert best_ms is not None and best_ms <= 7.0


def test_a_moves_cost_is_its_states_gate_times_its_kinds_measured_ratio() -> None:
    """Before its kind was measured a candidate is expected to cost its state's gate; each
    measured candidate of the kind moves the ratio toward what was measured (a prior ratio of 1
    weighted `PRIOR_WEIGHT`). The run is paced only while its box, not its budget, binds."""
    from lineage.graph import Lineage
    from lineage.moves import sweep_card
    from lineage.optimize import PRIOR_WEIGHT, _cost, _Option, _paced, _Run, _State
    from lineage.retrieval import Retriever

    ir = kir.parse(START, "triton")
    run = _Run(None, None, None, Lineage(), "triton", CASE, "cuda", "device", "x",
               lambda e, d: None, 10, None, (), Retriever([]))
    start = _State(START, ir, None, 10.0, seconds=4.0)
    slow_state = _State(START, ir, None, 10.0, seconds=40.0)
    run.states, run.best = [start, slow_state], start
    own = _Option(start, "own", sweep_card("own", "triton"), 0)
    assert _cost(own, run) == 4.0
    assert _cost(_Option(slow_state, "own", own.card, 0), run) == 40.0
    run.costs["own"] = [math.log(3.0)]
    assert _cost(own, run) == 4.0 * math.exp(math.log(3.0) / (PRIOR_WEIGHT + 1))
    assert _cost(_Option(start, "card", own.card, 0), run) == 4.0  # another kind: unmeasured
    assert not _paced(run)  # no box
    run.deadline = time.monotonic() + 100.0
    assert not _paced(run)  # 10 gates at 4 s fit in 100 s
    run.gate_s, run.gated = 4.0 + 96.0, 2  # the pace is now 35 s a gate: 8 more do not fit
    assert _paced(run)


def test_the_control_is_gated_even_when_the_box_is_spent_before_it(tmp_path: Path) -> None:
    """A box already spent when the search starts (the start's gate waited for a busy GPU)
    still gates the start's plain sweep, under the candidates' gate limit and not the box's,
    and nothing after it: the run ends no worse than the control."""
    from lineage import optimize as opt

    target = tmp_path / "mm_naive.py"
    target.write_text(START)
    control = autotune_control(START)
    limits: list[object] = []
    scripted = ScriptedGate(ms=lambda s: 7.0 if s == control else 10.0)

    def gate(source: str, language: object, case: object, tier: object, **kw: object):
        limits.append(kw.get("timeout"))
        return scripted(source, language, case, tier, **kw)

    result = optimize(target, CASE, Library.open(packed_library("heldout_all")), tier="device",
                      out=tmp_path / "out", budget_steps=8, rewriter=DeterministicRewriter(),
                      check_fn=gate, deadline=time.monotonic() - 1.0)
    assert scripted.seen == [START, control]
    assert limits[1] is not None and limits[1] >= opt.CANDIDATE_GATE_FLOOR_S
    assert result.termination == "time-box" and result.gated == 1 and result.best_ms == 7.0
