"""Counted `while` loops read as `for` loops over a range (`passes.triton.loops`): the rewrite
keeps the kernel's results, refuses where the reading is not exact, and lets a card whose rule
recognises only the `for` form act on a kernel that counts its K loop by hand
(`lineage.moves._normalized`)."""
from __future__ import annotations

from functools import cache

import pytest

import gate
import kir
from lineage.moves import materializations
from passes.rewriter import DeterministicRewriter
from passes.triton.loops import counted_loops

torch = pytest.importorskip("torch")

# A GEMM that counts its K loop by hand, grid axes swapped, pointers in parentheses.
WHILE_GEMM = '''import torch
import triton
import triton.language as tl


@triton.jit
def gemm_counted(A, B, C, M, N, K, lda, ldb, ldc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    m_block = tl.program_id(axis=1)
    n_block = tl.program_id(axis=0)
    rows = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = n_block * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    k = 0
    while k < K:
        a_tile = tl.load(A + (rows[:, None] * lda + (k + ks)[None, :]),
                         mask=(rows[:, None] < M) & ((k + ks)[None, :] < K), other=0.)
        b_tile = tl.load(B + ((k + ks)[:, None] * ldb + cols[None, :]),
                         mask=((k + ks)[:, None] < K) & (cols[None, :] < N), other=0.)
        total = total + tl.dot(a_tile, b_tile)
        k += BLOCK_K
    tl.store(C + (rows[:, None] * ldc + cols[None, :]), total.to(C.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    gemm_counted[(triton.cdiv(N, 32), triton.cdiv(M, 32))](a, b, c, M, N, K, a.stride(0), b.stride(0),
                                                           c.stride(0), BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    return c
'''


def test_a_counted_while_loop_becomes_a_range_and_the_kernel_stays_right() -> None:
    out = counted_loops(kir.parse(WHILE_GEMM, "triton"))
    assert out is not None
    text = out.unparse()
    assert "for k in range(0, K, BLOCK_K):" in text
    assert "while" not in text and "k += BLOCK_K" not in text and "k = 0" not in text
    verdict = gate.check(text, "triton", "gemm", "interpret", cache=False)
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize(("change", "why"), [
    (("        k += BLOCK_K\n", "        k += BLOCK_K\n    k_end = k\n"), "the counter read after the loop"),
    (("        total = total + tl.dot(a_tile, b_tile)\n",
      "        total = total + tl.dot(a_tile, b_tile)\n        if K < 0:\n            break\n"), "a break"),
    (("        total = total + tl.dot(a_tile, b_tile)\n",
      "        total = total + tl.dot(a_tile, b_tile)\n        k = k + 0\n"), "another write of the counter"),
    (("        total = total + tl.dot(a_tile, b_tile)\n",
      "        total = total + tl.dot(a_tile, b_tile)\n        K = K - 1\n"), "the bound written in the loop"),
    (("    while k < K:\n", "    while k <= K:\n"), "a test other than counter < bound"),
    (("        k += BLOCK_K\n", "        k *= BLOCK_K\n"), "a step that is not an addition"),
])
def test_a_loop_whose_reading_is_not_exact_is_left_as_it_is(change: tuple[str, str], why: str) -> None:
    text = WHILE_GEMM.replace(*change)
    assert text != WHILE_GEMM, why
    assert counted_loops(kir.parse(text, "triton")) is None, why


def test_a_counter_read_outside_the_loop_leaves_it_as_it_is() -> None:
    """A read of the counter before the loop (after its start) is outside the loop as much as
    one after it: the recognizer software-pipelining shares leaves such a loop alone."""
    text = WHILE_GEMM.replace("    k = 0\n    while k < K:\n", "    k = 0\n    first = k\n    while k < K:\n")
    assert counted_loops(kir.parse(text, "triton")) is None


def test_software_pipelining_writes_the_same_for_loop_over_tl_range() -> None:
    """One recognizer and one writer (`counted_while`, `as_for`) serve the normalization and
    the software-pipelining rule: the same header, over `tl.range` with its depth."""
    from passes.registry import get_pass

    ir = kir.parse(WHILE_GEMM, "triton")
    rule = get_pass("software-pipelining")
    rule = rule() if isinstance(rule, type) else rule
    site = next(s for s in rule.sites(ir) if s.detail.get("while"))
    text = rule.optimize(ir, site).ir.unparse()
    assert "for k in tl.range(0, K, BLOCK_K, num_stages=3):" in text
    assert counted_loops(ir).unparse() == text.replace("tl.range(0, K, BLOCK_K, num_stages=3)",
                                                       "range(0, K, BLOCK_K)")


@cache
def _gemm_cards() -> dict[str, object]:
    from lineage.shipped import open_library

    return {c.id: c for c in open_library(None)[0].cards() if c.pass_name == "tma-descriptors"}


def test_a_card_that_needs_the_for_form_acts_on_a_hand_counted_loop() -> None:
    """The shipped tensor-descriptor cards find no K loop in the kernel as written; asked again
    on its normalized text, they act, and the candidate has no `while` left."""
    cards = _gemm_cards()
    assert cards, "no tma-descriptors card shipped"
    ir = kir.parse(WHILE_GEMM, "triton")
    made = [m for card in cards.values()
            for m in materializations(card, ir, DeterministicRewriter(), None, sweeps=False,
                                      transplants=False)]
    ok = [m for m in made if m.ok]
    assert ok, [m.refusals for m in made]
    assert all("while" not in m.ir.unparse() for m in ok)
