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

import pytest

from lineage.admission import admit, held_out_contexts, trial
from lineage.graph import Lineage
from lineage.skills import Library
from passes.rewriter import DeterministicRewriter
from skill_helpers import DATA, ROOT, ScriptedGate, gemm_cards, library, lineage


def test_held_out_contexts_exclude_the_source_lineage_and_present_features() -> None:
    cards = gemm_cards(admitted=False)
    assert held_out_contexts(cards["autotune"], [lineage("gemm")]) == []
    contexts = held_out_contexts(cards["software-pipelining"], [lineage("gemm"), lineage("conv2d")])
    assert contexts and all(c.case == "conv2d" for c in contexts)
    # The conv2d expert already pipelines its loop: only states without the feature remain,
    # the naive root first.
    conv = lineage("conv2d")
    assert contexts[0].state == conv.roles("naive")[0]
    assert all("num_stages" not in c.source for c in contexts)


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
                                       id="persistent-grid.triton.x", pass_name="persistent-grid"))
    report = admit(lib, [lineage("conv2d")], tier="interpret", rewriter=DeterministicRewriter(),
                   check_fn=ScriptedGate())
    assert report.untried == (card.id,) and report.trials == 0
    assert lib.get(card.id).verification == ()
