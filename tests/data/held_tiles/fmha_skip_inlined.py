"""The fmha expert's flash-attention forward as a search reached it: its key-loop helper
inlined at both calls (the running state copied in and out), the causal loop cut at whole key
blocks below the diagonal (`// BLOCK_N * BLOCK_N`) with the diagonal block a masked loop of its
own. The launch grid (a def of the meta-parameters) counts query blocks alone."""
from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def _boxes(nargs: dict) -> None:
    head_dim = nargs["HEAD_DIM"]
    nargs["q_desc"].block_shape = [1, nargs["BLOCK_M"], head_dim]
    nargs["o_desc"].block_shape = [1, nargs["BLOCK_M"], head_dim]
    nargs["k_desc"].block_shape = [1, nargs["BLOCK_N"], head_dim]
    nargs["v_desc"].block_shape = [1, nargs["BLOCK_N"], head_dim]


def _prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    if _INTERPRET:
        return configs[:1]
    kept = [c for c in configs if c.kwargs["BLOCK_M"] % c.kwargs["BLOCK_N"] == 0]
    return kept or configs[:1]


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=2, num_stages=1, pre_hook=_boxes),
        triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4, num_stages=1, pre_hook=_boxes),
        triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=8, num_stages=1, pre_hook=_boxes),
        triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=1, num_stages=1, pre_hook=_boxes),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=2, num_stages=1, pre_hook=_boxes),
        triton.Config({"BLOCK_M": 16, "BLOCK_N": 32}, num_warps=2, num_stages=1, pre_hook=_boxes),
    ],
    key=["seq_len", "HEAD_DIM", "CAUSAL"],
    prune_configs_by={"early_config_prune": _prune},
)
@triton.heuristics({"EVEN_N": lambda args: args["seq_len"] % args["BLOCK_N"] == 0})
@triton.jit
def _attn_fwd(q_desc, k_desc, v_desc, o_desc, seq_len, sm_scale,
              HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr):
    num_m = tl.num_programs(0)
    if CAUSAL:
        # Later query blocks see more keys: launch them first so the tail of the grid is short.
        start_m = num_m - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    bh = tl.program_id(1)
    qk_scale = sm_scale  # log2(e): the softmax runs on exp2
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    q = q_desc.load([bh, start_m * BLOCK_M, 0]).reshape(BLOCK_M, HEAD_DIM)

    if CAUSAL:
        acc_attn_fwd_inner = acc
        l_i_attn_fwd_inner = l_i
        m_i_attn_fwd_inner = m_i
        offs_n = tl.arange(0, BLOCK_N)
        below_diagonal = tl.minimum(tl.minimum(seq_len, start_m * BLOCK_M + BLOCK_M), start_m * BLOCK_M) // BLOCK_N * BLOCK_N
        for start_n in tl.range(0, below_diagonal, BLOCK_N, num_stages=4):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            k = k_desc.load([bh, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
            qk = tl.dot(q, tl.trans(k))
            qk = qk * qk_scale + 0.0
            m_ij = tl.maximum(m_i_attn_fwd_inner, tl.max(qk, 1))
            qk = qk - m_ij[:, None]
            p = tl.math.exp(qk)
            alpha = tl.math.exp(m_i_attn_fwd_inner - m_ij)
            l_i_attn_fwd_inner = l_i_attn_fwd_inner * alpha + tl.sum(p, 1)
            acc_attn_fwd_inner = acc_attn_fwd_inner * alpha[:, None]
            v = v_desc.load([bh, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
            acc_attn_fwd_inner = tl.dot(p.to(v.dtype), v, acc_attn_fwd_inner)
            m_i_attn_fwd_inner = m_ij
        for start_n in tl.range(below_diagonal, tl.minimum(seq_len, start_m * BLOCK_M + BLOCK_M), BLOCK_N, num_stages=4):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            k = k_desc.load([bh, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
            qk = tl.dot(q, tl.trans(k))
            keep = offs_m[:, None] >= (start_n + offs_n)[None, :]
            qk = qk * qk_scale + tl.where(keep, 0.0, -1000000.0)
            m_ij = tl.maximum(m_i_attn_fwd_inner, tl.max(qk, 1))
            qk = qk - m_ij[:, None]
            p = tl.math.exp(qk)
            alpha = tl.math.exp(m_i_attn_fwd_inner - m_ij)
            l_i_attn_fwd_inner = l_i_attn_fwd_inner * alpha + tl.sum(p, 1)
            acc_attn_fwd_inner = acc_attn_fwd_inner * alpha[:, None]
            v = v_desc.load([bh, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
            acc_attn_fwd_inner = tl.dot(p.to(v.dtype), v, acc_attn_fwd_inner)
            m_i_attn_fwd_inner = m_ij
        (acc, l_i, m_i) = (acc_attn_fwd_inner, l_i_attn_fwd_inner, m_i_attn_fwd_inner)
    else:
        acc_attn_fwd_inner2 = acc
        l_i_attn_fwd_inner2 = l_i
        m_i_attn_fwd_inner2 = m_i
        MASK_SEQ = not EVEN_N
        offs_n_attn_fwd_inner = tl.arange(0, BLOCK_N)
        for start_n_attn_fwd_inner in tl.range(0, seq_len, BLOCK_N, num_stages=4):
            start_n_attn_fwd_inner = tl.multiple_of(start_n_attn_fwd_inner, BLOCK_N)
            k_attn_fwd_inner = k_desc.load([bh, start_n_attn_fwd_inner, 0]).reshape(BLOCK_N, HEAD_DIM)
            qk_attn_fwd_inner = tl.dot(q, tl.trans(k_attn_fwd_inner))
            if MASK_SEQ:
                keep_attn_fwd_inner = (start_n_attn_fwd_inner + offs_n_attn_fwd_inner)[None, :] < seq_len
                qk_attn_fwd_inner = qk_attn_fwd_inner * qk_scale + tl.where(keep_attn_fwd_inner, 0.0, -1000000.0)
                m_ij_attn_fwd_inner = tl.maximum(m_i_attn_fwd_inner2, tl.max(qk_attn_fwd_inner, 1))
                qk_attn_fwd_inner = qk_attn_fwd_inner - m_ij_attn_fwd_inner[:, None]
            else:
                m_ij_attn_fwd_inner = tl.maximum(m_i_attn_fwd_inner2, tl.max(qk_attn_fwd_inner, 1) * qk_scale)
                qk_attn_fwd_inner = qk_attn_fwd_inner * qk_scale - m_ij_attn_fwd_inner[:, None]
            p_attn_fwd_inner = tl.math.exp(qk_attn_fwd_inner)
            alpha_attn_fwd_inner = tl.math.exp(m_i_attn_fwd_inner2 - m_ij_attn_fwd_inner)
            l_i_attn_fwd_inner2 = l_i_attn_fwd_inner2 * alpha_attn_fwd_inner + tl.sum(p_attn_fwd_inner, 1)
            acc_attn_fwd_inner2 = acc_attn_fwd_inner2 * alpha_attn_fwd_inner[:, None]
            v_attn_fwd_inner = v_desc.load([bh, start_n_attn_fwd_inner, 0]).reshape(BLOCK_N, HEAD_DIM)
            acc_attn_fwd_inner2 = tl.dot(p_attn_fwd_inner.to(v_attn_fwd_inner.dtype), v_attn_fwd_inner, acc_attn_fwd_inner2)
            m_i_attn_fwd_inner2 = m_ij_attn_fwd_inner
        (acc, l_i, m_i) = (acc_attn_fwd_inner2, l_i_attn_fwd_inner2, m_i_attn_fwd_inner2)
    acc = acc / l_i[:, None]
    # Rows past seq_len fall outside the descriptor's box and are not written.
    o_desc.store([bh, start_m * BLOCK_M, 0], acc.to(o_desc.dtype).reshape(1, BLOCK_M, HEAD_DIM))


def _descriptor(x: torch.Tensor) -> TensorDescriptor:
    flat = x.reshape(-1, x.shape[-2], x.shape[-1])
    return TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [1, 16, flat.shape[-1]])


def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    batch, heads, seq_len, head_dim = q.shape
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty_like(q)
    descs = [_descriptor(t) for t in (q, k, v, o)]

    def grid(meta: dict) -> tuple[int, int]:
        return (triton.cdiv(seq_len, meta["BLOCK_M"]), batch * heads)

    _attn_fwd[grid](*descs, seq_len, 1.0 / math.sqrt(head_dim),
                    HEAD_DIM=head_dim, CAUSAL=bool(causal))
    return o
