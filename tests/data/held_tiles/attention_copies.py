"""Attention with an online softmax whose key loop reads copies of the running state, as an
inliner leaves a helper's body: the state goes in as copies (`acc_in = acc`) and comes back by
one tuple assignment."""
import torch
import triton
import triton.language as tl


@triton.jit
def attend(q_ptr, k_ptr, v_ptr, o_ptr, seq, scale,
           HD: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr):
    qb = tl.program_id(0)
    base = tl.program_id(1) * seq * HD
    rows = qb * BQ + tl.arange(0, BQ)
    dims = tl.arange(0, HD)
    q = tl.load(q_ptr + base + rows[:, None] * HD + dims[None, :], mask=rows[:, None] < seq,
                other=0.0)
    top = tl.full([BQ], -1.0e30, tl.float32)
    norm = tl.zeros([BQ], tl.float32)
    acc = tl.zeros([BQ, HD], tl.float32)
    acc_in = acc
    top_in = top
    norm_in = norm
    for start in range(0, seq, BK):
        keys = start + tl.arange(0, BK)
        k = tl.load(k_ptr + base + keys[None, :] * HD + dims[:, None], mask=keys[None, :] < seq,
                    other=0.0)
        s = tl.where(keys[None, :] < seq, tl.dot(q, k) * scale, -1.0e30)
        new_top = tl.maximum(top_in, tl.max(s, 1))
        p = tl.exp(s - new_top[:, None])
        shrink = tl.exp(top_in - new_top)
        norm_in = norm_in * shrink + tl.sum(p, 1)
        v = tl.load(v_ptr + base + keys[:, None] * HD + dims[None, :], mask=keys[:, None] < seq,
                    other=0.0)
        acc_in = acc_in * shrink[:, None]
        acc_in = tl.dot(p.to(v.dtype), v, acc_in)
        top_in = new_top
    (acc, top, norm) = (acc_in, top_in, norm_in)
    tl.store(o_ptr + base + rows[:, None] * HD + dims[None, :], acc / norm[:, None],
             mask=rows[:, None] < seq)


def run(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    batch, heads, seq, dim = q.shape
    o = torch.empty_like(q)
    attend[(triton.cdiv(seq, 32), batch * heads)](q, k, v, o, seq, dim ** -0.5,
                                                   HD=dim, BQ=32, BK=16)
    return o
