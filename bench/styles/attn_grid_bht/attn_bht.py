"""Non-causal attention over (batch, heads, seq, dim) tensors with a 3-D grid: batch on axis 0,
head on axis 1, query tile on axis 2. K is read transposed through its strides; the running
max and sum are (rows, 1) columns kept with `keep_dims=True`."""
import torch
import triton
import triton.language as tl


@triton.jit
def attn_fwd_bht(Q, K, V, O, seq, scale,
                 sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos,
                 ROWS: tl.constexpr, COLS: tl.constexpr, HEAD_DIM: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    t = tl.program_id(2)
    rows = t * ROWS + tl.arange(0, ROWS)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqs + dims[None, :],
                mask=rows[:, None] < seq, other=0.0)
    m = tl.full((ROWS, 1), float("-inf"), dtype=tl.float32)
    den = tl.zeros((ROWS, 1), dtype=tl.float32)
    acc = tl.zeros((ROWS, HEAD_DIM), dtype=tl.float32)
    for start in range(0, seq, COLS):
        cols = start + tl.arange(0, COLS)
        kt = tl.load(K + b * skb + h * skh + dims[:, None] + cols[None, :] * sks,
                     mask=cols[None, :] < seq, other=0.0)
        s = tl.dot(q, kt) * scale
        s = tl.where(cols[None, :] < seq, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1, keep_dims=True))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m - m_new)
        den = den * alpha + tl.sum(p, axis=1, keep_dims=True)
        v = tl.load(V + b * svb + h * svh + cols[:, None] * svs + dims[None, :],
                    mask=cols[:, None] < seq, other=0.0)
        acc = acc * alpha + tl.dot(p.to(v.dtype), v)
        m = m_new
    out = acc / den
    tl.store(O + b * sob + h * soh + rows[:, None] * sos + dims[None, :],
             out.to(O.dtype.element_ty), mask=rows[:, None] < seq)


def run(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    batch, heads, seq, dim = q.shape
    o = torch.empty_like(q)
    grid = (batch, heads, triton.cdiv(seq, 32))
    attn_fwd_bht[grid](q, k, v, o, seq, dim ** -0.5,
                       q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1),
                       k.stride(2), v.stride(0), v.stride(1), v.stride(2), o.stride(0),
                       o.stride(1), o.stride(2), ROWS=32, COLS=32, HEAD_DIM=dim)
    return o
