"""No card of the shipped library, materialized by its rule (with and without its sweeps), lowers
the precision a kernel declares for its products: a `tl.dot(..., input_precision="ieee")` stays
ieee (or becomes an exact fp32 broadcast product), never TF32. A kernel whose output needs full
fp32 products (sums that cancel) keeps them through the search; the gate's correctness check
stays the judge of any text that would not."""
from __future__ import annotations

import re
from pathlib import Path

from kir import parse
from lineage.moves import materializations
from lineage.shipped import shipped_library_path
from lineage.skills import Library
from passes.rewriter import DeterministicRewriter

# an fp32 GEMM written elsewhere: K-major weights, a bias, its products declared ieee
IEEE_LINEAR = '''import torch
import triton
import triton.language as tl


@triton.jit
def affine_rows(inp, wt, bias, res, R, C, D, s_in, s_wt, SR: tl.constexpr, SC: tl.constexpr,
                SD: tl.constexpr):
    pr, pc = tl.program_id(0), tl.program_id(1)
    r = pr * SR + tl.arange(0, SR)
    c = pc * SC + tl.arange(0, SC)
    step = tl.arange(0, SD)
    p_in = inp + r[:, None] * s_in + step[None, :]
    p_wt = wt + step[:, None] + c[None, :] * s_wt
    total = tl.zeros((SR, SC), dtype=tl.float32)
    for left in range(D, 0, -SD):
        lhs = tl.load(p_in, mask=(r[:, None] < R) & (step[None, :] < left), other=0.0)
        rhs = tl.load(p_wt, mask=(step[:, None] < left) & (c[None, :] < C), other=0.0)
        total = tl.dot(lhs, rhs, total, input_precision="ieee")
        p_in += SD
        p_wt += SD
    total += tl.load(bias + c, mask=c < C, other=0.0)[None, :]
    tl.store(res + r[:, None] * C + c[None, :], total, mask=(r[:, None] < R) & (c[None, :] < C))


def run(x, w, b):
    rows, depth = x.shape
    cols = w.shape[0]
    y = torch.empty((rows, cols), device=x.device, dtype=torch.float32)
    affine_rows[(triton.cdiv(rows, 64), triton.cdiv(cols, 64))](
        x, w, b, y, rows, cols, depth, x.stride(0), w.stride(0), SR=64, SC=64, SD=32)
    return y
'''


def _text(made) -> str:
    ir = getattr(made, "ir", None)
    return ir.unparse() if ir is not None else str(getattr(made, "source", ""))


def test_no_card_turns_an_ieee_product_into_tf32() -> None:
    ir = parse(IEEE_LINEAR, "triton")
    acted, lowered = 0, []
    for card in Library.open(shipped_library_path()).cards():
        for sweeps in (False, True):
            for made in materializations(card, ir, DeterministicRewriter(), None, sweeps=sweeps,
                                         transplants=False):
                if not made.ok:
                    continue
                text = _text(made)
                assert text, card.id
                acted += 1
                dots = len(re.findall(r"\btl\.dot\(", text))
                ieee = text.count('input_precision="ieee"')
                if "tf32" in text or "allow_tf32=True" in text or ieee < dots:
                    lowered.append(card.id)
    assert acted >= 20  # tiles, orderings, pipelining, autotune lists act on such a kernel
    assert lowered == []
