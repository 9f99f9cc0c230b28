"""Causal attention whose mask names what to drop: future keys and keys past the end are set
to -inf with `tl.where(future, -inf, s)`. One program per (query block, batch*head)."""
import torch
import triton
import triton.language as tl


@triton.jit
def causal_fwd(Q, K, V, O, scale, S, D: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr):
    qb = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh * S * D
    rows = qb * BQ + tl.arange(0, BQ)
    cols = tl.arange(0, D)
    q = tl.load(Q + base + rows[:, None] * D + cols[None, :], mask=rows[:, None] < S, other=0.0)
    m = tl.full([BQ], float("-inf"), tl.float32)
    l = tl.zeros([BQ], tl.float32)
    acc = tl.zeros([BQ, D], tl.float32)
    for start in range(0, S, BK):
        keys = start + tl.arange(0, BK)
        k = tl.load(K + base + keys[:, None] * D + cols[None, :], mask=keys[:, None] < S, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        future = (keys[None, :] > rows[:, None]) | (keys[None, :] >= S)
        s = tl.where(future, float("-inf"), s)
        m_new = tl.maximum(m, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_use[:, None])
        a = tl.exp(m - m_use)
        l = l * a + tl.sum(p, 1)
        v = tl.load(V + base + keys[:, None] * D + cols[None, :], mask=keys[:, None] < S, other=0.0)
        acc = acc * a[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    tl.store(O + base + rows[:, None] * D + cols[None, :], (acc / l[:, None]).to(O.dtype.element_ty),
             mask=rows[:, None] < S)


def run(q, k, v):
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    causal_fwd[(triton.cdiv(S, 32), B * H)](q, k, v, o, D ** -0.5, S, D=D, BQ=32, BK=32)
    return o
