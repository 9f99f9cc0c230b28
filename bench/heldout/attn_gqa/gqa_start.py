"""Grouped-query causal attention, written plainly: each program owns BLOCK query rows of one
query head and streams the matching kv head's keys and values (all of them, masked)."""
import torch
import triton
import triton.language as tl


@triton.jit
def gqa_attention(q, k, v, out, scale, seq,
                  q_sb, q_sh, k_sb, k_sh, o_sb, o_sh,
                  n_q_heads: tl.constexpr, group: tl.constexpr, dim: tl.constexpr, BLOCK: tl.constexpr):
    qb = tl.program_id(0)
    pid_bh = tl.program_id(1)
    batch = pid_bh // n_q_heads
    qh = pid_bh % n_q_heads
    kvh = qh // group
    rows = qb * BLOCK + tl.arange(0, BLOCK)
    dims = tl.arange(0, dim)
    q_blk = tl.load(q + batch * q_sb + qh * q_sh + rows[:, None] * dim + dims[None, :],
                    mask=rows[:, None] < seq, other=0.0)
    k_base = k + batch * k_sb + kvh * k_sh
    v_base = v + batch * k_sb + kvh * k_sh
    m = tl.full([BLOCK], -1.0e30, tl.float32)
    denom = tl.zeros([BLOCK], tl.float32)
    acc = tl.zeros([BLOCK, dim], tl.float32)
    n_blocks = tl.cdiv(seq, BLOCK)
    for j in range(n_blocks):
        keys = j * BLOCK + tl.arange(0, BLOCK)
        k_blk = tl.load(k_base + keys[:, None] * dim + dims[None, :], mask=keys[:, None] < seq, other=0.0)
        scores = tl.dot(q_blk, tl.trans(k_blk)).to(tl.float32) * scale
        allowed = (keys[None, :] <= rows[:, None]) & (keys[None, :] < seq)
        scores = tl.where(allowed, scores, -1.0e30)
        m_next = tl.maximum(m, tl.max(scores, 1))
        w = tl.where(allowed, tl.exp(scores - m_next[:, None]), 0.0)
        rescale = tl.exp(m - m_next)
        denom = denom * rescale + tl.sum(w, 1)
        v_blk = tl.load(v_base + keys[:, None] * dim + dims[None, :], mask=keys[:, None] < seq, other=0.0)
        acc = acc * rescale[:, None] + tl.dot(w.to(v_blk.dtype), v_blk)
        m = m_next
    tl.store(out + batch * o_sb + qh * o_sh + rows[:, None] * dim + dims[None, :],
             (acc / denom[:, None]).to(out.dtype.element_ty), mask=rows[:, None] < seq)


def run(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    nb, hq, seq, dim = q.shape
    hkv = k.shape[1]
    out = torch.empty_like(q)
    block = 32
    gqa_attention[(triton.cdiv(seq, block), nb * hq)](
        q, k, v, out, dim ** -0.5, seq,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), out.stride(0), out.stride(1),
        n_q_heads=hq, group=hq // hkv, dim=dim, BLOCK=block, num_warps=4)
    return out
