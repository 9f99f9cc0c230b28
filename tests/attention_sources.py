"""Test helper: a small causal attention kernel (one program per query block, an online
softmax over key blocks, the causal mask a `tl.where` of the scores), the text the masking
tests edit."""
from __future__ import annotations

CAUSAL = '''
import triton
import triton.language as tl

@triton.jit
def attend(q, k, v, o, n, scale, D: tl.constexpr, BQ: tl.constexpr, BKV: tl.constexpr):
    qi = tl.program_id(0)
    rows = qi * BQ + tl.arange(0, BQ)
    d = tl.arange(0, D)
    qb = tl.load(q + rows[:, None] * D + d[None, :], mask=rows[:, None] < n, other=0.0)
    m = tl.full([BQ], -1.0e30, tl.float32)
    s = tl.zeros([BQ], tl.float32)
    acc = tl.zeros([BQ, D], tl.float32)
    for j in range(0, n, BKV):
        keys = j + tl.arange(0, BKV)
        kb = tl.load(k + keys[:, None] * D + d[None, :], mask=keys[:, None] < n, other=0.0)
        x = tl.dot(qb, tl.trans(kb)) * scale
        x = tl.where(rows[:, None] >= keys[None, :], x, -1.0e30)
        mn = tl.maximum(m, tl.max(x, 1))
        p = tl.exp(x - mn[:, None])
        a = tl.exp(m - mn)
        s = s * a + tl.sum(p, 1)
        vb = tl.load(v + keys[:, None] * D + d[None, :], mask=keys[:, None] < n, other=0.0)
        acc = acc * a[:, None] + tl.dot(p.to(vb.dtype), vb)
        m = mn
    tl.store(o + rows[:, None] * D + d[None, :], acc / s[:, None], mask=rows[:, None] < n)
'''
