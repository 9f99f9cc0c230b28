"""Cross attention, non-causal, Sq != Skv. Grid (q tiles, batch, head) on three axes, strides passed.
Q is scaled once before the key loop; K is loaded as (BLOCK_N, D) and transposed in tl.dot."""
import torch
import triton
import triton.language as tl


@triton.jit
def cross_attn_fwd(Q, K, V, O, sm_scale, seq_q, seq_kv,
                   sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos,
                   HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    bz = tl.program_id(1)
    hz = tl.program_id(2)
    q_base = Q + bz * sqb + hz * sqh
    k_base = K + bz * skb + hz * skh
    v_base = V + bz * svb + hz * svh
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_base + offs_m[:, None] * sqs + offs_d[None, :], mask=offs_m[:, None] < seq_q, other=0.0)
    q = (q * sm_scale).to(Q.dtype.element_ty)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    for start_n in range(0, seq_kv, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_ok = offs_n < seq_kv
        k = tl.load(k_base + offs_n[:, None] * sks + offs_d[None, :], mask=kv_ok[:, None], other=0.0)
        qk = tl.dot(q, tl.trans(k))
        qk = tl.where(kv_ok[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + offs_n[:, None] * svs + offs_d[None, :], mask=kv_ok[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    o_base = O + bz * sob + hz * soh
    tl.store(o_base + offs_m[:, None] * sos + offs_d[None, :], acc.to(O.dtype.element_ty),
             mask=offs_m[:, None] < seq_q)


def run(q, k, v):
    B, H, SQ, D = q.shape
    SKV = k.shape[2]
    o = torch.empty_like(q)
    grid = (triton.cdiv(SQ, 32), B, H)
    cross_attn_fwd[grid](q, k, v, o, 1.0 / D ** 0.5, SQ, SKV,
                         q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                         v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
                         HEAD_DIM=D, BLOCK_M=32, BLOCK_N=32, num_warps=4)
    return o
