"""Every anti-cheat check of the gate rejects its own cheat kernel (tests/data/cheats/).

These run at the interpret tier on the CPU: the Triton-side checks (launch counting through
the interpreter's launch path, knockout, the torch op trace, tampering, poisoning, fresh
inputs, re-validation, output types, precision) are the same code the device tier runs.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import gate
from gate import FailureKind, Tier

DATA = Path(__file__).parent / "data"
CHEATS = DATA / "cheats"
SAXPY = DATA / "cases" / "saxpy"


def _gate(name: str, case: str | Path = SAXPY, **kwargs: object) -> gate.Verdict:
    return gate.check_file(CHEATS / f"{name}.py", case, Tier.INTERPRET, cache=False, timeout=60, **kwargs)


def test_the_honest_kernel_passes_every_check() -> None:
    verdict = gate.check_file(SAXPY / "saxpy_triton.py", SAXPY, Tier.INTERPRET, cache=False)
    assert verdict.ok, verdict.reason
    assert verdict.correctness is not None and verdict.correctness.max_rel_err < 1e-6
    phases = [r.phase for r in verdict.correctness.results]
    assert phases.count("seed") == 3
    # The repeated calls ran on the same buffers refilled with each set of the pool.
    assert phases.count("refill") >= 4
    assert len({r.seed for r in verdict.correctness.results if r.phase == "refill"}) >= 4
    assert phases.count("sealed") == 1  # inputs visible only to its kernels (`guards.Seal`)
    assert len(set(verdict.correctness.seeds)) == 5  # a fresh seed for every check


@pytest.mark.parametrize(
    ("cheat", "kind"),
    [
        ("no_launch", FailureKind.NO_LAUNCH),             # own kernel must launch
        ("knockout_numpy", FailureKind.FALLBACK),         # knockout: answer from elsewhere
        ("torch_fallback", FailureKind.TORCH_COMPUTE),    # torch compute while it runs
        ("try_except", FailureKind.FALLBACK),             # try/except returning torch's answer
        ("tamper_compare", FailureKind.TAMPERING),        # allclose / norms / assert_close
        ("tamper_timer", FailureKind.TAMPERING),          # do_bench / synchronize / timers
        ("tamper_gate", FailureKind.TAMPERING),           # the gate's own modules
        ("tamper_during_run", FailureKind.TAMPERING),     # patching after the import check
        ("mutate_input", FailureKind.INPUT_MUTATION),     # writes into its inputs
        ("no_write", FailureKind.NAN_OUTPUT),             # leaves poisoned output unwritten
        ("cache_outputs", FailureKind.REUSED_OUTPUT),     # replays an earlier answer (by shape)
        ("reuse_data_ptr", FailureKind.REUSED_OUTPUT),    # ... keyed on its inputs' addresses
        ("reuse_id", FailureKind.REUSED_OUTPUT),          # ... keyed on the input objects' id()
        ("reuse_checksum", FailureKind.REUSED_OUTPUT),    # ... on addresses + a few elements' values
        ("lazy_after_warmup", FailureKind.STALE_OUTPUT),  # stops working after the checks
        ("lazy_output", FailureKind.BAD_OUTPUT),          # tensor subclass output
        ("precision", FailureKind.PRECISION_DOWNGRADE),   # fp32 case computed in fp16
    ],
)
def test_cheat_is_rejected(cheat: str, kind: FailureKind) -> None:
    verdict = _gate(cheat)
    assert not verdict.ok
    assert verdict.failure_kind is kind, (verdict.failure_kind, verdict.reason)
    assert verdict.reason


def test_tampering_names_what_was_patched() -> None:
    verdict = _gate("tamper_timer")
    assert "triton.testing.do_bench" in verdict.reason
    assert "torch.cuda.synchronize" in verdict.reason


def test_a_call_of_the_reference_is_named_as_such() -> None:
    verdict = _gate("reference_call", case="gemm")
    assert verdict.failure_kind is FailureKind.REFERENCE_CALL, verdict.reason


def test_all_zeros_fails_even_when_the_answer_is_tiny() -> None:
    # |out - ref| is below 1e-28 everywhere: an absolute tolerance would accept zeros.
    verdict = _gate("zeros", case=DATA / "cases" / "tiny")
    assert verdict.failure_kind is FailureKind.WRONG_OUTPUT
    assert verdict.correctness is not None and verdict.correctness.max_rel_err == pytest.approx(1.0)


def test_an_input_independent_case_is_refused() -> None:
    verdict = _gate("zeros", case=DATA / "cases" / "constant")
    assert verdict.failure_kind is FailureKind.BAD_CASE


def test_a_reused_result_is_named_with_the_inputs_it_answers() -> None:
    # The cheat keys its answers on its inputs' addresses, which the allocator picks. The
    # knockout call (the first seed's set again, in fresh buffers) runs before the repeated
    # calls; where its buffers get the addresses of the first correctness call's, the cheat
    # replays there and the knockout's launch check names the cache; otherwise the repeated
    # calls' compare names whose answer the output is. Either is the reuse, named.
    verdict = _gate("reuse_data_ptr")
    assert verdict.failure_kind is FailureKind.REUSED_OUTPUT, verdict.reason
    by_compare = "answer to other inputs" in verdict.reason and "reused across calls" in verdict.reason
    by_knockout = (verdict.reason.startswith("on the knockout run the candidate's launches")
                   and "a set it has seen (a cache of answers)" in verdict.reason)
    assert by_compare or by_knockout, verdict.reason


@pytest.mark.parametrize("cheat", ["foreign_cupy", "foreign_ctypes_cublas", "foreign_dynamic_jax"])
def test_another_gpu_library_is_refused_before_anything_runs(cheat: str) -> None:
    # Refused at every tier from the text alone, with the line of the import / library load.
    for tier in (Tier.STATIC, Tier.INTERPRET):
        verdict = gate.check_file(CHEATS / f"{cheat}.py", "gemm", tier, cache=False)
        assert verdict.failure_kind is FailureKind.FOREIGN_LIBRARY, (tier, verdict.reason)
        assert "line " in verdict.reason and verdict.phases == ()  # no worker ran


def test_an_honest_kernel_behind_a_custom_op_passes() -> None:
    # Its launchers are torch.library custom operators (one with register_fake, one without):
    # the op trace runs their Python implementations under itself and sees allocations and
    # launches alone. tests/data/exploits/custom_op.py, torch compute behind one, stays refused.
    verdict = gate.check_file(SAXPY / "saxpy_custom_op.py", SAXPY, Tier.INTERPRET, cache=False)
    assert verdict.ok, verdict.reason
    exploit = gate.check_file(DATA / "exploits" / "custom_op.py", SAXPY, Tier.INTERPRET, cache=False)
    assert exploit.failure_kind is FailureKind.TORCH_COMPUTE, exploit.reason
    assert "add, mul" in exploit.reason  # the compute inside the operator, named


def test_an_honest_kernel_behind_a_triton_op_passes() -> None:
    # torch.library.triton_op launching through wrap_triton, as PyTorch recommends for Triton
    # kernels torch.compile can trace: the decorator imports torch._dynamo at the candidate's
    # import, whose wrapper around torch.manual_seed is torch's own, not the candidate's.
    verdict = gate.check_file(SAXPY / "saxpy_triton_op.py", SAXPY, Tier.INTERPRET, cache=False)
    assert verdict.ok, verdict.reason


def _traced(fn: Callable[[], object]) -> list[str]:
    from gate import guards

    trace = guards.OpTrace(("", ""), poison=False)
    with trace:
        fn()
    return sorted(set(trace.violations))


@pytest.fixture(scope="module")
def ops() -> SimpleNamespace:
    """Operators of a namespace of this test's: custom_op ones (torch compute inside, a copy
    inside, one writing into its argument, one calling another) and one registered through
    `torch.library.Library`, whose Python kernel the op trace cannot reach."""
    @torch.library.custom_op("optrace_test::axpy", mutates_args=())
    def axpy(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return a * x + y

    @torch.library.custom_op("optrace_test::copy", mutates_args=())
    def copy(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        out.copy_(x)
        return out

    @copy.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    @torch.library.custom_op("optrace_test::copy_into", mutates_args=("out",))
    def copy_into(x: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_(x)

    @torch.library.custom_op("optrace_test::outer", mutates_args=())
    def outer(x: torch.Tensor) -> torch.Tensor:
        return axpy(2.0, copy(x), x)

    lib = torch.library.Library("optrace_test", "FRAGMENT")
    lib.define("plain(Tensor x) -> Tensor")
    lib.impl("plain", lambda x: x.clone(), "CompositeExplicitAutograd")
    return SimpleNamespace(axpy=axpy, copy=copy, copy_into=copy_into, outer=outer,
                           plain=torch.ops.optrace_test.plain, lib=lib)


def test_the_op_trace_looks_into_a_custom_op(ops: SimpleNamespace) -> None:
    x, y = torch.randn(8), torch.randn(8)
    assert _traced(lambda: ops.axpy(2.0, x, y)) == ["add", "mul"]  # its compute, not its name
    assert _traced(lambda: ops.outer(x)) == ["add", "mul"]  # through an operator inside one
    got = []
    assert _traced(lambda: got.append(ops.copy(x))) == []  # allocation and copy alone
    assert torch.equal(got[0], x)
    out = torch.empty(8)
    assert _traced(lambda: ops.copy_into(x, out)) == []
    assert torch.equal(out, x)


def test_the_op_trace_refuses_an_operator_it_cannot_look_into(ops: SimpleNamespace) -> None:
    # A Library registration keeps no record of its Python kernel that the trace could run.
    x = torch.randn(8)
    assert _traced(lambda: ops.plain(x)) == ["plain"]
