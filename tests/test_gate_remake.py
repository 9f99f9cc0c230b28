"""Input sets dropped between their uses and drawn again where used (`gate.remake`), and a lean
plan's sampled outputs kept on the device where it has room (`gate.memplan.samples_fit`)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import gate
from gate import memplan, remake
from gate.verdict import FailureKind, Tier

SAXPY = Path(__file__).parent / "data" / "cases" / "saxpy"
GIB = 1 << 30


def _lean_gate_of_saxpy_edited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit) -> gate.Verdict:
    """The saxpy kernel gated under a lean plan at the interpret tier against a copy of its
    case whose case.py text `edit` changed (it must change it)."""
    case = tmp_path / "saxpy"
    shutil.copytree(SAXPY, case, ignore=shutil.ignore_patterns("__pycache__"))
    text = (case / "case.py").read_text()
    edited = edit(text)
    assert edited != text
    (case / "case.py").write_text(edited)
    monkeypatch.setenv("KLINEAGE_GATE_SETS", "lean")
    monkeypatch.setenv("KLINEAGE_GATE_COMPARE", "worker")
    return gate.check_file(case / "saxpy_triton.py", case, Tier.INTERPRET, cache=False, timeout=60)


def test_a_digest_tells_equal_sets_from_sets_that_differ_anywhere() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5000, generator=g)
    y = torch.randn(40, 30, generator=g)
    first = remake.digest((1.5, x, y))
    assert remake.digest((1.5, x.clone(), y.clone())) == first
    for i in (0, 2500, 4999):  # one element anywhere
        bumped = x.clone()
        bumped[i] = torch.nextafter(bumped[i], torch.tensor(float("inf")))
        assert remake.digest((1.5, bumped, y)) != first, i
    assert remake.digest((2.0, x, y)) != first  # a scalar
    assert remake.digest((1.5, x, y.t().contiguous().t())) != first  # same values, other strides
    assert remake.digest((1.5, x, y.reshape(30, 40))) != first  # same bytes, other shape
    assert remake.nbytes((1.5, x, y)) == 4 * (5000 + 1200)


def test_a_lean_plan_keeps_sets_in_host_memory_where_the_case_draws_differently_each_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A case whose make_inputs does not draw a set the same twice (here: a generator seeded
    from the system's entropy) cannot have its sets drawn again: the redraw probe says so, and
    every set waits in host memory as before; the gate passes the correct kernel."""
    seeded = 'g = torch.Generator(device="cpu").manual_seed(seed)'
    entropy = 'int.from_bytes(__import__("os").urandom(4), "little")'
    verdict = _lean_gate_of_saxpy_edited(
        tmp_path, monkeypatch, lambda text: text.replace(
            seeded, f'g = torch.Generator(device="cpu").manual_seed(seed ^ {entropy})'))
    assert verdict.ok, verdict.reason
    assert any("5 of 5 input sets wait in host memory" in f for f in verdict.flags), verdict.flags
    assert not any("drawn again" in f for f in verdict.flags), verdict.flags


def test_a_set_drawn_again_that_differs_from_its_first_draw_stops_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A case that draws a seed's set the same twice and differently from then on (as a draw
    changed after the probe would): the set drawn again for its next use is compared with the
    digest of its first draw, and the run stops saying so instead of judging other inputs."""
    head = "def make_inputs(shape: dict, seed: int, device: str) -> tuple:\n"
    ret = "    return (a, x, y)\n"
    verdict = _lean_gate_of_saxpy_edited(
        tmp_path, monkeypatch, lambda text: text.replace(head, "_DRAWS: dict = {}\n\n\n" + head).replace(
            ret, "    _DRAWS[seed] = _DRAWS.get(seed, 0) + 1\n"
                 "    if _DRAWS[seed] > 2:\n"
                 "        x = x + 1e-3\n" + ret))
    assert verdict.failure_kind is FailureKind.TAMPERING, verdict.reason
    assert "differs from its first draw" in verdict.reason


def test_sampled_outputs_stay_on_the_device_only_where_they_fit_beside_the_calls() -> None:
    # two samples, the current output and the next one, and the slack
    need = 4 * 6 * GIB + memplan.SLACK_BYTES
    assert memplan.samples_fit(need, 6 * GIB, 2)
    assert not memplan.samples_fit(need - 1, 6 * GIB, 2)
    assert memplan.samples_fit(memplan.SLACK_BYTES, 0, 2)  # a scalar output: always
    assert not memplan.samples_fit(0, 1, 2)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_the_one_pass_digest_equals_the_torch_one_and_leaves_the_tensor_as_it_was(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`heldcompare.digest_bytes` through `gate.fusedcompare` (here in Triton's interpreter,
    KLINEAGE_GATE_FUSED=1) gives the torch pass's digest and restores the bytes it XORed."""
    from gate import fusedcompare, heldcompare

    monkeypatch.setattr(fusedcompare, "BLOCK", 256)
    g = torch.Generator().manual_seed(9)
    for t in (torch.randn(3000, generator=g), torch.randint(0, 1 << 30, (40, 25), generator=g),
              torch.randn(77, generator=g).to(torch.float16)):  # 154 bytes: the torch pass
        before = t.clone()
        monkeypatch.setenv("KLINEAGE_GATE_FUSED", "0")
        plain = heldcompare.digest_bytes(t)
        monkeypatch.setenv("KLINEAGE_GATE_FUSED", "1")
        assert heldcompare.digest_bytes(t) == plain
        assert torch.equal(t, before)
        bumped = t.clone()
        bumped.view(-1)[-1] += 1
        assert heldcompare.digest_bytes(bumped) != plain


def test_a_set_is_drawn_again_only_where_that_is_no_slower_than_a_copy_in() -> None:
    """6 GiB drawn on the device in 20 ms: drawn again; drawn on the host in 4 s (a CPU
    generator, then a copy): it waits in host memory (a copy in takes about half a second); a
    small set's draw below the floor either way."""
    six = 6 << 30
    assert remake.worth_drawing_again(0.02, six)
    assert not remake.worth_drawing_again(4.0, six)
    assert remake.worth_drawing_again(six / remake.COPY_IN_BYTES_PER_S, six)
    assert remake.worth_drawing_again(0.01, 1000) and not remake.worth_drawing_again(0.2, 1000)


def test_a_reference_is_computed_again_only_where_that_is_no_slower_than_its_copies() -> None:
    """A 6 GiB reference copied in and back out at 2 GB/s costs about 6 s a comparison: its
    set drawn in 20 ms and its reference computed in 30 ms, it is computed again; a reference
    that takes seconds to compute waits; a copy rate not measured never decides for it; a small
    reference's below the floor either way. A digest that differs (or none) keeps the held copy."""
    six = 6 << 30
    assert remake.worth_computing_again(0.02, 0.03, six, 2e9)
    assert not remake.worth_computing_again(0.02, 8.0, six, 2e9)
    assert remake.worth_computing_again(0.02, 2 * six / 2e9 - 0.02, six, 2e9)
    assert not remake.worth_computing_again(0.0, 0.0, six, 0.0)
    assert remake.worth_computing_again(0.01, 0.01, 1000, 2e9)
    assert not remake.worth_computing_again(0.1, 0.1, 1000, 2e9)
    assert remake.computes_again("1.2.8", "1.2.8")
    assert not remake.computes_again("1.2.8", "1.3.8") and not remake.computes_again("", "")


def test_a_comparison_that_computes_its_reference_holds_two_sets_and_three_outputs_at_least() -> None:
    """The call's set and clone, its output, the reference computed again and its masked
    copy and the slack; where the reference step peaked higher (temporaries beyond its clone
    of the set and its output), that peak with the call's set, clone and output and the held
    copy, less the clone: one output more than the reference step."""
    got = memplan.recompute_bytes(4 * GIB, 2 * GIB, reference_peak=GIB)
    assert got == 2 * 4 * GIB + 3 * 2 * GIB + memplan.SLACK_BYTES
    peak = 4 * GIB + 2 * GIB + 10 * GIB  # clone, output, 10 GiB of temporaries
    got = memplan.recompute_bytes(4 * GIB, 2 * GIB, reference_peak=peak)
    assert got == 4 * GIB + 2 * 2 * GIB + peak + memplan.SLACK_BYTES
    assert got == memplan.lean_bytes(4 * GIB, 2 * GIB, peak) + 2 * GIB


def test_the_copy_rate_is_measured_once_per_device() -> None:
    from gate import hoststage

    hoststage._RATE.clear()
    rate = hoststage.copy_rate("cpu", 1 << 20)
    assert rate > 0 and hoststage.copy_rate("cpu", 1 << 10) == rate


def test_a_lean_plan_computes_its_references_again_where_compared(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sets drawn again (the seeds', the timed and the configuration one) have their held
    references dropped and computed again at each comparison (KLINEAGE_GATE_RECOMPUTE=1: the
    cost test skipped; the probe's same bytes twice still asked), the crossovers' too (each
    made again from its two sets); the sealed set's waits as before. The correct kernel passes and a reused answer is still named, with whose it is."""
    monkeypatch.setenv("KLINEAGE_GATE_RECOMPUTE", "1")
    monkeypatch.setenv("KLINEAGE_GATE_SETS", "lean")
    monkeypatch.setenv("KLINEAGE_GATE_COMPARE", "worker")
    verdict = gate.check_file(SAXPY / "saxpy_triton.py", SAXPY, Tier.INTERPRET, cache=False, timeout=60)
    assert verdict.ok, verdict.reason
    assert any("7 held reference(s) are dropped between their uses and computed again" in f
               for f in verdict.flags), verdict.flags
    reused = gate.check_file(SAXPY.parent.parent / "cheats" / "reuse_data_ptr.py", SAXPY,
                             Tier.INTERPRET, cache=False, timeout=60)
    # a set drawn again can land at an earlier set's address, where the cheat's answer for
    # that address comes back: the knockout may name it first (the answer is not the kernel's)
    assert reused.failure_kind in (FailureKind.REUSED_OUTPUT, FailureKind.FALLBACK), reused.reason
    if reused.failure_kind is FailureKind.REUSED_OUTPUT:
        assert "answer to other inputs" in reused.reason
    monkeypatch.setenv("KLINEAGE_GATE_RECOMPUTE", "0")
    verdict = gate.check_file(SAXPY / "saxpy_triton.py", SAXPY, Tier.INTERPRET, cache=False, timeout=60)
    assert verdict.ok and not any("computed again" in f for f in verdict.flags), verdict.flags


def test_a_reference_not_the_same_twice_keeps_its_held_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference whose bytes vary between computations (here a relative 1e-6 of noise, within
    the tolerance) cannot be checked against its first computation's digest: the probe says so
    and the references wait in host memory; the gate passes the correct kernel."""
    monkeypatch.setenv("KLINEAGE_GATE_RECOMPUTE", "1")
    verdict = _lean_gate_of_saxpy_edited(
        tmp_path, monkeypatch, lambda text: text.replace(
            "    return a * x + y\n", "    return (a * x + y) * (1 + 1e-6 * torch.rand_like(y))\n"))
    assert verdict.ok, verdict.reason
    assert any("gave different bytes" in f for f in verdict.flags), verdict.flags
    assert not any("are dropped between their uses and computed again" in f for f in verdict.flags), \
        verdict.flags


# A reference the same on a set's first computation and on the probe's second one, then other
# bytes on any later computation of a set already computed: the probe's set from its third
# computation, every other set from its second (where it is computed again for a comparison,
# whichever sets a plan drops), as ops candidate code replaced after the probe would give.
CHANGES_AFTER_ITS_PROBE = (
    "_SEEN: dict = {}\n_PROBED: list = []\n\n\nREF"
    "    k = (float(x.reshape(-1)[0]), float(y.reshape(-1)[0]))\n"
    "    _SEEN[k] = _SEEN.get(k, 0) + 1\n"
    "    if _SEEN[k] == 2 and not _PROBED:\n"
    "        _PROBED.append(k)\n"
    "        return a * x + y\n"
    "    return a * x + y + (1e-3 if _SEEN[k] > 1 else 0.0)\n")


def test_a_reference_computed_again_that_differs_from_its_first_stops_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference that gives the same bytes twice on a set and other bytes from then on (as
    one whose ops candidate code replaced would): its computation again for a comparison is
    checked against the first's digest, and the run stops saying so instead of judging
    against it."""
    monkeypatch.setenv("KLINEAGE_GATE_RECOMPUTE", "1")
    ref = "def reference(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:\n"
    verdict = _lean_gate_of_saxpy_edited(
        tmp_path, monkeypatch, lambda text: text.replace(
            ref + "    return a * x + y\n",
            CHANGES_AFTER_ITS_PROBE.replace("REF", ref)))
    assert verdict.failure_kind is FailureKind.TAMPERING, verdict.reason
    assert "differs from its first computation" in verdict.reason


@pytest.mark.gpu
def test_on_the_gpu_a_lean_plan_computes_references_again_where_compared(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The saxpy case drawing its vectors on the device, under a lean plan with no room kept
    (KLINEAGE_GATE_SETS=lean): its sets are drawn again where used, and the held references of
    those sets are computed again at each comparison (the probe measures a warm draw and
    computation against the copy rate measured on this GPU); the correct kernel passes, a
    reused answer is still named, and a reference that changes after its probe stops the run."""
    draw = ('    x = torch.randn(shape["N"], generator=g).to(device)\n'
            '    y = torch.randn(shape["N"], generator=g).to(device)\n')
    on_device = ('    gd = torch.Generator(device=device).manual_seed(seed)\n'
                 '    x = torch.randn(shape["N"], generator=gd, device=device)\n'
                 '    y = torch.randn(shape["N"], generator=gd, device=device)\n')
    case = tmp_path / "saxpy"
    shutil.copytree(SAXPY, case, ignore=shutil.ignore_patterns("__pycache__"))
    text = (case / "case.py").read_text()
    assert draw in text
    (case / "case.py").write_text(text.replace(draw, on_device))
    monkeypatch.setenv("KLINEAGE_GATE_SETS", "lean")
    verdict = gate.check_file(case / "saxpy_triton.py", case, Tier.DEVICE, cache=False)
    assert verdict.ok, verdict.reason
    assert any("drawn again on the device" in f for f in verdict.flags), verdict.flags
    assert any("are dropped between their uses and computed again where compared" in f
               for f in verdict.flags), verdict.flags
    reused = gate.check_file(SAXPY.parent.parent / "cheats" / "reuse_data_ptr.py", case, Tier.DEVICE,
                             cache=False)
    assert reused.failure_kind in (FailureKind.REUSED_OUTPUT, FailureKind.FALLBACK), reused.reason
    ref = "def reference(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:\n"
    text = (case / "case.py").read_text()
    (case / "case.py").write_text(text.replace(
        ref + "    return a * x + y\n",
        CHANGES_AFTER_ITS_PROBE.replace("REF", ref)))
    changed = gate.check_file(case / "saxpy_triton.py", case, Tier.DEVICE, cache=False)
    assert changed.failure_kind is FailureKind.TAMPERING, changed.reason
    assert "differs from its first computation" in changed.reason
