"""Inlining `@triton.jit` helpers (`passes.triton.inline`) and cards acting through it."""
from __future__ import annotations

from pathlib import Path

import kir
import pytest

from passes import get_pass
from passes.triton.inline import inline_helpers

ROOT = Path(__file__).resolve().parents[1]
HELPER_CASE = ROOT / "bench" / "styles" / "mm_helper"
HELPER_SOURCE = (HELPER_CASE / "mm_helper.py").read_text()


def _open_sites(name: str, ir: kir.KernelIR) -> int:
    return sum(not s.present for s in get_pass(name)().sites(ir))


def test_a_helpers_k_loop_is_written_into_the_kernel() -> None:
    ir = kir.parse(HELPER_SOURCE, "triton")
    out = inline_helpers(ir)
    assert out is not None
    text = out.unparse()
    kernel = text[text.index("def matmul_kernel"):text.index("def run")]
    assert "_mma_tile(" not in kernel and "tl.dot(a, b)" in kernel
    assert "def _mma_tile(" in text  # the helper stays defined
    compile(text, "inlined.py", "exec")
    # what the helper hid is a site now
    assert _open_sites("tma-descriptors", ir) == 0 < _open_sites("tma-descriptors", out)
    assert _open_sites("grouped-ordering", ir) == 0 < _open_sites("grouped-ordering", out)
    assert inline_helpers(out) is None  # nothing left to inline


def test_arguments_that_are_expressions_are_bound_first_and_clashing_names_renamed() -> None:
    text = '''import triton
import triton.language as tl


@triton.jit
def _scaled(x, s):
    y = x * s
    return y + 1


@triton.jit
def k(p, n, BLOCK: tl.constexpr):
    y = tl.arange(0, BLOCK)
    v = tl.load(p + y, mask=y < n)
    out = _scaled(v, n * 2)
    tl.store(p + y, out + y, mask=y < n)


def run(x):
    k[(1,)](x, x.numel(), BLOCK=64)
    return x
'''
    out = inline_helpers(kir.parse(text, "triton")).unparse()
    body = out[out.index("def k("):out.index("def run")]
    assert "s = n * 2" in body and "y_scaled = v * s" in body and "out = y_scaled + 1" in body
    assert "tl.store(p + y, out + y" in body  # the kernel's own `y` is untouched


@pytest.mark.parametrize("change", [
    ("    return acc\n", "    if K < 0:\n        return acc\n    return acc\n"),  # two returns
    ("    acc = _mma_tile(a_ptr", "    acc = 1 + _mma_tile(a_ptr"),  # not `name = helper(...)`
])
def test_helpers_that_cannot_be_inlined_as_written_are_left(change: tuple[str, str]) -> None:
    text = HELPER_SOURCE.replace(*change)
    assert text != HELPER_SOURCE
    assert inline_helpers(kir.parse(text, "triton")) is None


@pytest.mark.slow
def test_the_inlined_kernel_computes_the_same() -> None:
    gate = pytest.importorskip("gate")
    out = inline_helpers(kir.parse(HELPER_SOURCE, "triton"))
    verdict = gate.check(out.unparse(), "triton", str(HELPER_CASE), tier="interpret", cache=False)
    assert verdict.ok, (verdict.stage, verdict.reason)


def test_a_card_without_a_site_acts_on_the_kernel_with_its_helpers_inlined() -> None:
    from lineage.optimize import materializations
    from lineage.skills import Library
    from passes.base import PassContext
    from passes.rewriter import DeterministicRewriter

    lib = Library.open(ROOT / "bench/results/heldout/libraries/all")
    card = next(c for c in lib.cards() if c.id == "tma-descriptors.triton.7de2c2db")
    ir = kir.parse(HELPER_SOURCE, "triton")
    ctx = PassContext.for_case(str(HELPER_CASE), tier="device")
    made = next(iter(materializations(card, ir, DeterministicRewriter(), ctx)))
    assert made.ok and "helpers inlined" in made.refusals
    assert "make_tensor_descriptor(" in made.ir.unparse()
