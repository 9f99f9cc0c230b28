"""Case attn. Non-causal attention in base 2: `qk_scale = sm_scale * 1.44269504` bound in the
kernel, the scores `tl.dot(q, kt) * qk_scale` masked to -inf past the keys' end, `tl.exp2`;
the running max and sum carried as `m_i`, `l_i`; a 3-D grid (query tile, head, batch)."""
import math

import torch
import triton
import triton.language as tl


@triton.jit
def attn2(Q, K, V, O, S, sm_scale, sb, sh, ss,
          BQ: tl.constexpr, BKV: tl.constexpr, D: tl.constexpr):
    qt = tl.program_id(0)
    base = tl.program_id(2) * sb + tl.program_id(1) * sh
    rq = qt * BQ + tl.arange(0, BQ)
    rd = tl.arange(0, D)
    qk_scale = sm_scale * 1.44269504
    q = tl.load(Q + base + rq[:, None] * ss + rd[None, :], mask=rq[:, None] < S, other=0.0)
    m_i = tl.full((BQ,), float("-inf"), tl.float32)
    l_i = tl.zeros((BQ,), tl.float32)
    acc = tl.zeros((BQ, D), tl.float32)
    for start in range(0, S, BKV):
        rk = start + tl.arange(0, BKV)
        kt = tl.load(K + base + rk[None, :] * ss + rd[:, None], mask=rk[None, :] < S, other=0.0)
        s = tl.dot(q, kt) * qk_scale
        s = tl.where(rk[None, :] < S, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(V + base + rk[:, None] * ss + rd[None, :], mask=rk[:, None] < S, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
        m_i = m_new
    tl.store(O + base + rq[:, None] * ss + rd[None, :], (acc / l_i[:, None]).to(tl.float16), mask=rq[:, None] < S)


def run(q, k, v):
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    attn2[(triton.cdiv(S, 16), H, B)](q, k, v, o, S, 1.0 / math.sqrt(D), q.stride(0), q.stride(1), q.stride(2),
                                      BQ=16, BKV=16, D=D)
    return o
