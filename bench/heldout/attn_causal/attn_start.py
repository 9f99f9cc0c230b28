"""Causal attention: one 32-row query block per program, an online softmax over every key block
(blocks above the diagonal are fully masked, not skipped)."""
import math

import torch
import triton
import triton.language as tl


@triton.jit
def attn_fwd(Q, K, V, O, sm_scale, S,
             stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
             stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_os,
             H: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_m[:, None] < S, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    for start_n in range(0, S, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(K + b * stride_kb + h * stride_kh + cols[None, :] * stride_ks + offs_d[:, None],
                    mask=cols[None, :] < S, other=0.0)
        qk = tl.dot(q, k) * sm_scale
        keep = (cols[None, :] <= offs_m[:, None]) & (cols[None, :] < S)
        qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        # rows whose every key so far is masked keep m = -inf; exp against 0 keeps p = 0 there
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(qk - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vs + offs_d[None, :],
                    mask=cols[:, None] < S, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :]
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=offs_m[:, None] < S)


def run(q, k, v):
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    BLOCK_M, BLOCK_N = 32, 32
    grid = (triton.cdiv(S, BLOCK_M), B * H)
    attn_fwd[grid](q, k, v, o, 1.0 / math.sqrt(D), S,
                   q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                   v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
                   H=H, HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=4)
    return o
