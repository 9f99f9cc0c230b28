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
    assert any("4 of 4 input sets wait in host memory" in f for f in verdict.flags), verdict.flags
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
