"""Causal GQA forward. Scores are computed in the log2 domain: the softmax scale is multiplied by
log2(e) once on the host and the kernel uses tl.math.exp2. Grid: (query blocks, query heads, batch)."""
import math
import torch
import triton
import triton.language as tl


@triton.jit
def _gqa_fwd(Q, Kc, Vc, O, qk_scale_log2, seqlen, heads_q, heads_kv,
             sqz, sqh, sqs, skz, skh, sks, soz, soh, sos,
             HEAD_DIM: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr):
    start_q = tl.program_id(axis=0)
    hq = tl.program_id(axis=1)
    z = tl.program_id(axis=2)
    hkv = hq // (heads_q // heads_kv)
    offs_q = start_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + z * sqz + hq * sqh + offs_q[:, None] * sqs + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_q[:, None] < seqlen, other=0.0)
    k_base = Kc + z * skz + hkv * skh
    v_base = Vc + z * skz + hkv * skh
    m_i = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_Q], tl.float32)
    o_acc = tl.zeros([BLOCK_Q, HEAD_DIM], tl.float32)
    for start_kv in range(0, seqlen, BLOCK_KV):
        offs_kv = start_kv + tl.arange(0, BLOCK_KV)
        kt = tl.load(k_base + offs_kv[None, :] * sks + offs_d[:, None], mask=offs_kv[None, :] < seqlen, other=0.0)
        s = tl.dot(q, kt) * qk_scale_log2
        keep = (offs_kv[None, :] <= offs_q[:, None]) & (offs_kv[None, :] < seqlen)
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + offs_kv[:, None] * sks + offs_d[None, :], mask=offs_kv[:, None] < seqlen, other=0.0)
        o_acc = o_acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    o_acc = o_acc / l_i[:, None]
    tl.store(O + z * soz + hq * soh + offs_q[:, None] * sos + offs_d[None, :], o_acc.to(O.dtype.element_ty),
             mask=offs_q[:, None] < seqlen)


def run(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    batch, hq, seqlen, hd = q.shape
    hkv = k.shape[1]
    o = torch.empty_like(q)
    scale = (1.0 / math.sqrt(hd)) * 1.4426950408889634
    grid = (triton.cdiv(seqlen, 32), hq, batch)
    _gqa_fwd[grid](q, k, v, o, scale, seqlen, hq, hkv,
                   q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                   o.stride(0), o.stride(1), o.stride(2),
                   HEAD_DIM=hd, BLOCK_Q=32, BLOCK_KV=32, num_warps=4, num_stages=1)
    return o
