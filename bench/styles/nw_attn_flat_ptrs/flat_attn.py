"""Causal attention. One program axis: the program id is split by // and % into the query block
and the (batch, head) pair; the key and value pointers start at the first key block and are
advanced a block per step; the causal mask is a boolean the scores go through tl.where with."""
import math

import torch
import triton
import triton.language as tl


@triton.jit
def flat_causal_attn(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, n_heads, seq_len,
                     s_b, s_h, s_s, s_d,
                     BQ: tl.constexpr, BKV: tl.constexpr, HD: tl.constexpr):
    pid = tl.program_id(0)
    q_blocks = tl.cdiv(seq_len, BQ)
    qb = pid % q_blocks
    bh = pid // q_blocks
    base = (bh // n_heads) * s_b + (bh % n_heads) * s_h
    rq = qb * BQ + tl.arange(0, BQ)
    rkv = tl.arange(0, BKV)
    rd = tl.arange(0, HD)
    q = tl.load(q_ptr + base + rq[:, None] * s_s + rd[None, :] * s_d, mask=rq[:, None] < seq_len, other=0.0)
    k_ptrs = k_ptr + base + rkv[None, :] * s_s + rd[:, None] * s_d
    v_ptrs = v_ptr + base + rkv[:, None] * s_s + rd[None, :] * s_d
    m_run = tl.full((BQ,), float("-inf"), dtype=tl.float32)
    l_run = tl.zeros((BQ,), dtype=tl.float32)
    o = tl.zeros((BQ, HD), dtype=tl.float32)
    for kv0 in range(0, seq_len, BKV):
        cols = kv0 + rkv
        kt = tl.load(k_ptrs, mask=cols[None, :] < seq_len, other=0.0)
        s = tl.dot(q, kt) * sm_scale
        allowed = (cols[None, :] <= rq[:, None]) & (cols[None, :] < seq_len)
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_run, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        corr = tl.exp(m_run - m_new)
        l_run = l_run * corr + tl.sum(p, axis=1)
        v = tl.load(v_ptrs, mask=cols[:, None] < seq_len, other=0.0)
        o = o * corr[:, None] + tl.dot(p.to(tl.float16), v)
        m_run = m_new
        k_ptrs += BKV * s_s
        v_ptrs += BKV * s_s
    o = o / l_run[:, None]
    tl.store(o_ptr + base + rq[:, None] * s_s + rd[None, :] * s_d, o.to(tl.float16),
             mask=rq[:, None] < seq_len)


def run(q, k, v):
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    grid = (triton.cdiv(S, 32) * B * H,)
    flat_causal_attn[grid](q, k, v, o, 1.0 / math.sqrt(D), H, S,
                           q.stride(0), q.stride(1), q.stride(2), q.stride(3),
                           BQ=32, BKV=32, HD=D)
    return o
