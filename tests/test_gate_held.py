"""Comparison in the worker against references it holds masked (`gate.heldcompare`), the
device tier's way, run here on the CPU: its figures agree with the parent's numpy comparison,
the held bytes open only with the parent's current key, a subverted comparison is caught by
the parent's sample, and the gate's checks hold at the interpret tier with
`KLINEAGE_GATE_COMPARE=worker` (a reused answer named, a copied held reference and a forged key
request rejected)."""
from __future__ import annotations

import math
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import gate
from gate import FailureKind, Tier
from gate import compare as cmp
from gate import heldcompare, remake
from gate.guards import Captured
from gate.transport import encode_all

DATA = Path(__file__).parent / "data"
SAXPY = DATA / "cases" / "saxpy"


def _numpy_outcome(out, ref, tolerance=1e-5, allclose=None) -> cmp.Outcome:
    cap = Captured.take()
    return cmp.compare(encode_all(out, cap), encode_all(ref, cap), tolerance=tolerance,
                       allclose=allclose)


def _held_outcome(out, ref, tolerance=1e-5, allclose=None) -> tuple[cmp.Outcome, dict]:
    key = cmp.new_key()
    held, summary = heldcompare.hold(ref, key, random.Random(1))
    figures = heldcompare.judge(out, held, key, cmp.new_key(), [], allclose)
    outcome = cmp.held_outcome(heldcompare.headers(out), summary["headers"], figures,
                               tolerance=tolerance, allclose=allclose)
    return outcome, figures


def _cases() -> list[tuple[str, object, object]]:
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(3000, generator=g)
    near = ref + 1e-7 * torch.randn(3000, generator=g)
    far = ref + 1e-2 * torch.randn(3000, generator=g)
    nan_out = near.clone()
    nan_out[1234] = float("nan")
    inf_ref = ref.clone()
    inf_ref[7] = float("inf")
    inf_same, inf_other = near.clone(), near.clone()
    inf_same[7], inf_other[7] = float("inf"), float("-inf")
    tiny = torch.full((64,), 1e-300, dtype=torch.float64)
    bf = ref.to(torch.bfloat16)
    return [
        ("close", near, ref),
        ("far", far, ref),
        ("nan in the output", nan_out, ref),
        ("inf matched", inf_same, inf_ref),
        ("inf of the other sign", inf_other, inf_ref),
        ("zeros for a tiny reference", torch.zeros(64, dtype=torch.float64), tiny),
        ("bf16", (bf.float() * 1.001).to(torch.bfloat16), bf),
        ("two outputs and a scalar", (far, near, 3), (ref, ref, 3)),
    ]


@pytest.mark.parametrize("name,out,ref", _cases(), ids=[c[0] for c in _cases()])
def test_the_worker_figures_agree_with_the_parents_numpy_comparison(
        name: str, out, ref, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heldcompare, "CHUNK_BYTES", 1024)  # several chunks per output
    for allclose in (None, (1e-2, 1e-2)):
        want = _numpy_outcome(out, ref, allclose=allclose)
        got, figures = _held_outcome(out, ref, allclose=allclose)
        assert (got.ok, got.kind) == (want.ok, want.kind), (name, got, want)
        if math.isfinite(want.rel_err):
            assert got.rel_err == pytest.approx(want.rel_err, rel=1e-9, abs=1e-300), name
        else:
            assert (got.rel_err != got.rel_err) == (want.rel_err != want.rel_err), name
        if allclose is not None and not want.ok and want.kind is FailureKind.WRONG_OUTPUT:
            assert want.reason.split(" (relative")[0] in got.reason, (got.reason, want.reason)


def test_the_first_failing_element_is_named() -> None:
    ref = torch.zeros(100)
    out = ref.clone()
    out[41] = 0.5
    outcome, figures = _held_outcome(out, ref, allclose=(1e-2, 1e-2))
    assert not outcome.ok and figures["at"][:2] == (0, 41)
    assert "element 41: 0.5" in outcome.reason


def _misses_in_the_precision_band() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """fp32 outputs whose relative-norm error lies between an fp32 tolerance (1e-5) and the
    lower-precision band's end (2e-2): one element in 512 left zero in an otherwise exact
    output (those elements' reference magnitude 0.2 puts the norm at 9e-3), every element
    rounded to bf16, and an fp16 multiply-add whose sum cancels (elements near zero off by a
    large part of themselves)."""
    g = torch.Generator().manual_seed(3)
    ref = torch.randn(1 << 13, generator=g)
    ref[511::512] = 0.2 * torch.sign(ref[511::512])
    holed = ref.clone()
    holed[511::512] = 0.0
    x, y = torch.randn(1 << 13, generator=g), torch.randn(1 << 13, generator=g)
    axpy = 1.7 * x + y
    return {"unwritten": (holed, ref), "bf16": (ref.to(torch.bfloat16).float(), ref),
            "fp16": ((1.7 * x).half().float() + y.half().float(), axpy)}


@pytest.mark.parametrize("name,want", [("unwritten", FailureKind.WRONG_OUTPUT),
                                       ("bf16", FailureKind.PRECISION_DOWNGRADE),
                                       ("fp16", FailureKind.PRECISION_DOWNGRADE)])
def test_a_few_wrong_elements_are_a_wrong_output_not_a_precision_downgrade(
        name: str, want: FailureKind) -> None:
    """Lower precision moves every element by a little of itself; an output with a few
    elements entirely wrong is wrong, though its norm is as small as rounding's. Judged alike
    by the parent (numpy), the worker's torch path and its one-pass kernel (on the GPU where
    there is one, else interpreted)."""
    out, ref = _misses_in_the_precision_band()[name]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cap = Captured.take()
    for allclose in (None, (1e-4, 1e-4)):
        parent = cmp.compare(encode_all(out, cap), encode_all(ref, cap), tolerance=1e-5,
                             low_tolerance=2e-2, allclose=allclose)
        assert 1e-5 < parent.rel_err < 2e-2, (name, parent.rel_err)
        assert parent.kind is want, (name, allclose, parent.reason)
        for fused in (False, True):
            key = cmp.new_key()
            held, summary = heldcompare.hold(ref.to(device), key, random.Random(1), fused=fused)
            figures = heldcompare.judge(out.to(device), held, key, cmp.new_key(), [], allclose)
            got = cmp.held_outcome(heldcompare.headers(out), summary["headers"], figures,
                                   tolerance=1e-5, low_tolerance=2e-2, allclose=allclose)
            assert got.kind is want, (name, allclose, fused, got.reason)
            assert figures["gross"][0] == pytest.approx(cmp.gross_share(out.numpy(), ref.numpy()),
                                                        rel=1e-9, abs=1e-12), (name, fused)


def test_held_bytes_open_only_under_the_current_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heldcompare, "CHUNK_BYTES", 4096)
    ref = torch.randn(10_000)
    key, fresh = cmp.new_key(), cmp.new_key()
    [held], summary = heldcompare.hold(ref, key)
    raw = ref.view(torch.uint8)
    # the reference cannot be read from what the worker keeps
    assert (held.masked == raw).float().mean() < 0.05
    clear = torch.cat([c for _, c in held.pieces(key)])
    assert torch.equal(clear, ref)
    figures = heldcompare.judge(ref.clone(), [held], key, fresh, [], None)
    assert figures["err"] == 0.0
    # after a comparison the old key opens noise, the fresh one the reference
    assert not torch.equal(torch.cat([c for _, c in held.pieces(key)]).view(torch.uint8), raw)
    assert torch.equal(torch.cat([c for _, c in held.pieces(fresh)]), ref)
    assert summary["headers"] == [("tensor", "float32", (10_000,), None)]
    places, values = summary["samples"][0]
    assert values == [float(ref[p]) for p in places]


def test_figures_forged_to_say_match_are_caught_by_the_parents_sample() -> None:
    ref = torch.randn(5000)
    garbage = torch.randn(5000)
    key = cmp.new_key()
    held, summary = heldcompare.hold(ref, key)
    samples = summary["samples"]
    picks = [random.sample(range(len(samples[0][0])), cmp.SAMPLE_ASKED)]
    places = [[samples[0][0][k] for k in picks[0]]]
    honest = heldcompare.judge(garbage, held, key, cmp.new_key(), places, None)
    forged = {**honest, "err": 0.0}  # a subverted comparison claims a match
    outcome = cmp.held_outcome(heldcompare.headers(garbage), summary["headers"], forged,
                               tolerance=1e-5)
    assert outcome.ok
    why = cmp.sample_contradicts(outcome, samples, picks, forged["values"], tolerance=1e-5)
    assert why is not None and "sample" in why
    close = ref + 1e-7 * torch.randn(5000)
    fine = heldcompare.judge(close, held, cmp.new_key(), cmp.new_key(), places, None)
    assert fine["err"] > 1e3  # the key moved on: the old one opens noise
    again, summary2 = heldcompare.hold(ref, key)
    fine = heldcompare.judge(close, again, key, cmp.new_key(), places, None)
    ok = cmp.held_outcome(heldcompare.headers(close), summary2["headers"], fine, tolerance=1e-5)
    assert ok.ok and cmp.sample_contradicts(ok, samples, picks, fine["values"], tolerance=1e-5) is None
    assert np.isfinite(fine["values"][0]).all()


def _gate_held(path: Path, monkeypatch: pytest.MonkeyPatch) -> gate.Verdict:
    monkeypatch.setenv("KLINEAGE_GATE_COMPARE", "worker")
    return gate.check_file(path, SAXPY, Tier.INTERPRET, cache=False, timeout=60)


def test_an_interpret_gate_with_held_references_passes_the_honest_kernel_with_its_phases(
        monkeypatch: pytest.MonkeyPatch) -> None:
    verdict = _gate_held(SAXPY / "saxpy_triton.py", monkeypatch)
    assert verdict.ok, verdict.reason
    phases = [r.phase for r in verdict.correctness.results]
    assert phases.count("seed") == 3 and phases.count("sealed") == 1 and phases.count("refill") >= 4
    assert verdict.correctness.max_rel_err < 1e-6
    names = dict(verdict.phases)
    assert {"references", "correctness", "knockout", "sealed", "repeat"} <= set(names)


def test_with_held_references_a_reused_answer_is_named_with_its_inputs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    verdict = _gate_held(DATA / "cheats" / "reuse_data_ptr.py", monkeypatch)
    assert verdict.failure_kind is FailureKind.REUSED_OUTPUT, verdict.reason
    # Named by the comparison (an output that is the answer to another set's inputs), or, where
    # the first seed's set comes back at the address it had (the fork server's allocations
    # decide), by the knockout call's launches first: the cache answers without its work.
    assert "answer to other inputs" in verdict.reason or \
        "it launches otherwise on a set it has seen (a cache of answers)" in verdict.reason, verdict.reason


def test_a_held_reference_copied_by_the_candidate_is_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    verdict = _gate_held(DATA / "exploits" / "held_reference_copy.py", monkeypatch)
    assert not verdict.ok
    assert verdict.failure_kind in (FailureKind.WRONG_OUTPUT, FailureKind.NAN_OUTPUT), verdict.reason


def test_a_key_asked_for_by_candidate_code_is_a_forged_message(monkeypatch: pytest.MonkeyPatch) -> None:
    verdict = _gate_held(DATA / "exploits" / "held_key_request.py", monkeypatch)
    assert verdict.failure_kind is FailureKind.TAMPERING, verdict.reason
    assert "pipe" in verdict.reason


@pytest.mark.parametrize("redraw", ["1", "0"])
def test_input_sets_that_do_not_fit_wait_in_host_memory(redraw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A set the device cannot hold (`gate.memplan`; forced here with KLINEAGE_GATE_PARK=1)
    is dropped and drawn again where used (`gate.remake`; the sealed set, and every set with
    KLINEAGE_GATE_REDRAW=0, is parked on the host) with its held reference in host memory: the
    gate's checks run as before on the sets brought back, and the verdict says how many sets
    waited, and how."""
    monkeypatch.setenv("KLINEAGE_GATE_PARK", "1")
    monkeypatch.setenv("KLINEAGE_GATE_REDRAW", redraw)
    for mode in ("worker", "parent"):
        monkeypatch.setenv("KLINEAGE_GATE_COMPARE", mode)
        verdict = gate.check_file(SAXPY / "saxpy_triton.py", SAXPY, Tier.INTERPRET, cache=False,
                                  timeout=60)
        assert verdict.ok, (mode, verdict.reason)
        # of the six sets (three seeds, timed, configuration, sealed), the first seed's and the
        # timed stay; of the other four, the sealed one alone cannot be drawn again
        wanted = ["3 of 6 input sets are dropped between their uses and drawn again",
                  "1 of 6 input sets wait in host memory"] if redraw == "1" else \
            ["4 of 6 input sets wait in host memory"]
        for text in wanted:
            assert any(text in f for f in verdict.flags), (text, verdict.flags)
        assert redraw == "1" or not any("drawn again" in f for f in verdict.flags), verdict.flags
        cheat = gate.check_file(DATA / "cheats" / "reuse_data_ptr.py", SAXPY, Tier.INTERPRET,
                                cache=False, timeout=60)
        # a set drawn again can land at an address an earlier set had, where the cheat's
        # answer for that address comes back: the knockout then names it first (the answer
        # does not come from the kernel), as in the lean GPU tests
        assert cheat.failure_kind in (FailureKind.REUSED_OUTPUT, FailureKind.FALLBACK), \
            (mode, cheat.reason)


@pytest.mark.parametrize("redraw", ["1", "0"])
def test_a_lean_plan_keeps_the_checks_with_every_set_waiting_between_its_uses(
        redraw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lean plan (`gate.memplan.lean_plan`; forced here with KLINEAGE_GATE_SETS=lean): every
    input set leaves the device between its uses, the first seed's and the timed set too
    (dropped and drawn again where used, `gate.remake`; the sealed set, and every set with
    KLINEAGE_GATE_REDRAW=0, in host memory), and every held reference waits in host memory; the
    checks run as before on the sets brought back (a correct kernel passes; a reused answer, a
    knockout fallback and a write into the inputs are named)."""
    monkeypatch.setenv("KLINEAGE_GATE_SETS", "lean")
    monkeypatch.setenv("KLINEAGE_GATE_COMPARE", "worker")
    monkeypatch.setenv("KLINEAGE_GATE_REDRAW", redraw)
    verdict = gate.check_file(SAXPY / "saxpy_triton.py", SAXPY, Tier.INTERPRET, cache=False, timeout=60)
    assert verdict.ok, verdict.reason
    assert any("leaves the device between its uses" in f for f in verdict.flags), verdict.flags
    # two seeds, the timed, configuration and sealed sets: every one waits
    wanted = ["4 of 5 input sets are dropped between their uses and drawn again",
              "1 of 5 input sets wait in host memory"] if redraw == "1" else \
        ["5 of 5 input sets wait in host memory"]
    for text in wanted:
        assert any(text in f for f in verdict.flags), (text, verdict.flags)
    for name, kind in (("reuse_data_ptr", FailureKind.REUSED_OUTPUT), ("reuse_checksum", FailureKind.REUSED_OUTPUT),
                       ("knockout_numpy", FailureKind.FALLBACK), ("mutate_input", FailureKind.INPUT_MUTATION)):
        cheat = gate.check_file(DATA / "cheats" / f"{name}.py", SAXPY, Tier.INTERPRET, cache=False, timeout=60)
        if name.startswith("reuse_") and cheat.failure_kind is FailureKind.FALLBACK:
            # a set brought back can land at the address it had before: a cache then answers
            # the knockout call with its kept answer to those very values, named there first
            assert "kernel launches skipped" in cheat.reason, cheat.reason
            continue
        assert cheat.failure_kind is kind, (name, cheat.reason)


def test_a_knockout_call_that_fails_as_it_should_opens_no_other_reference() -> None:
    """The other sets' keys go to the worker only for a failure that rejects the run: a
    knockout call's wrong output (what it should give) leaves every other key unsent."""
    from gate.cases import load_case
    from gate.runner import _Judge
    from gate.verdict import Tier as T

    judge = _Judge(load_case(SAXPY), T.INTERPRET)
    header = [("tensor", "float32", (8,), None)]
    for phase, seed in (("seed", 1), ("seed", 2), ("sealed", 3)):
        judge.handle(("ref", "default", phase, seed,
                      {"held": True, "headers": header, "samples": [None], "zero": False,
                       "digest": str(seed), "key": seed}, None))
    judge.handle(("refs_done",))
    judge.handle(("out", "default", "knockout", 1, {"held": True, "headers": header}, 1))
    assert judge.outbox and judge.outbox[-1][0] == "judge"
    judge.handle(("judged", "default", "knockout", 1, {"err": 1.0, "misses": [8], "values": [None]}))
    assert judge.verdict is None and judge.outbox[-1] == ("more", [])
    judge.handle(("out", "default", "seed", 2, {"held": True, "headers": header}, 1))
    judge.handle(("judged", "default", "seed", 2, {"err": 1.0, "misses": [8], "values": [None]}))
    more = judge.outbox[-1]
    assert more[0] == "more" and {tuple(k) for k, _, _ in more[1]} == {
        ("default", "seed", 1), ("default", "sealed", 3)}


def test_a_key_asked_for_under_a_configuration_name_is_a_forged_message(
        monkeypatch: pytest.MonkeyPatch) -> None:
    verdict = _gate_held(DATA / "exploits" / "held_config_request.py", monkeypatch)
    assert verdict.failure_kind is FailureKind.TAMPERING, verdict.reason
    assert "configuration outputs" in verdict.reason


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["worker", "parent"])
def test_on_the_gpu_both_comparison_modes_give_the_same_verdicts(
        mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLINEAGE_GATE_COMPARE", mode)
    verdict = gate.check_file(SAXPY / "saxpy_triton.py", SAXPY, Tier.DEVICE, cache=False)
    assert verdict.ok, verdict.reason
    assert verdict.correctness.max_rel_err < 1e-6
    phases = [r.phase for r in verdict.correctness.results]
    # three seeds, or fewer where the gate's plan says the device's memory left to it cut them
    # (beside other gates on the GPU: `memplan.plan_sets`)
    cut = any("sized to the device's memory" in f and "of 3 seeds" in f for f in verdict.flags)
    assert phases.count("seed") == 3 or (cut and phases.count("seed") >= 2), verdict.flags
    assert "reverify" in phases and "refill" in phases
    wrong = gate.check_file(DATA / "bugs" / "saxpy_autotune_slow_wrong.py", SAXPY, Tier.DEVICE,
                            cache=False)
    assert wrong.failure_kind is FailureKind.WRONG_OUTPUT, wrong.reason
    assert "config 1 of saxpy_kernel" in wrong.reason
    reused = gate.check_file(DATA / "cheats" / "reuse_data_ptr.py", SAXPY, Tier.DEVICE, cache=False)
    assert reused.failure_kind is FailureKind.REUSED_OUTPUT, reused.reason


@pytest.mark.gpu
@pytest.mark.parametrize("samples", ["host", "measured"])
def test_on_the_gpu_a_lean_plan_checks_the_timed_runs_from_host_memory(
        samples: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lean plan on the device (KLINEAGE_GATE_SETS=lean): the pool is drawn again for the
    timed runs and leaves after, their sampled outputs wait in host memory (forced with
    KLINEAGE_GATE_SAMPLES=host; else on the device, where it has room) and are compared against
    references held in host memory or computed again; a kernel that goes wrong once timed is
    caught. The case draws on the host (a CPU generator, then a copy): its sets are drawn again
    only where a warm draw is no slower than a copy in, and the flag that says otherwise gives
    a draw time that is."""
    monkeypatch.setenv("KLINEAGE_GATE_SETS", "lean")
    monkeypatch.setenv("KLINEAGE_GATE_SAMPLES", samples)
    verdict = gate.check_file(SAXPY / "saxpy_triton.py", SAXPY, Tier.DEVICE, cache=False)
    assert verdict.ok, verdict.reason
    assert any("leaves the device between its uses" in f for f in verdict.flags), verdict.flags
    slower = [re.search(r"a draw took ([\d.]+) s for ([\d.]+) GiB", f) for f in verdict.flags]
    slower = [m for m in slower if m is not None]
    assert any("drawn again on the device" in f for f in verdict.flags) or slower, verdict.flags
    for m in slower:
        assert not remake.worth_drawing_again(float(m[1]), int(float(m[2]) * 2**30)), verdict.flags
    phases = [r.phase for r in verdict.correctness.results]
    assert phases.count("seed") == 2 and "reverify" in phases and phases.count("refill") >= 2
    stale = gate.check_file(DATA / "cheats" / "lazy_after_warmup.py", SAXPY, Tier.DEVICE, cache=False)
    # its unwritten output may hold an earlier call's answer: reused, else stale
    assert stale.failure_kind in (FailureKind.STALE_OUTPUT, FailureKind.REUSED_OUTPUT), stale.reason
    assert "refill" in stale.reason or "timed" in stale.reason, stale.reason
    reused = gate.check_file(DATA / "cheats" / "reuse_data_ptr.py", SAXPY, Tier.DEVICE, cache=False)
    # sets brought back to the device may land at their earlier addresses: the knockout (its
    # kernels skipped, the answer still right) can name the reuse before the reuse check does
    assert reused.failure_kind in (FailureKind.REUSED_OUTPUT, FailureKind.FALLBACK), reused.reason
