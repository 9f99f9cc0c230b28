"""Flash-attention forward in Triton: the expert kernel for the `fmha` case.

`run(q, k, v, causal)` takes (B, H, S, D) tensors as scaled_dot_product_attention does and
returns softmax(q k^T / sqrt(D)) v in q's dtype. Expert decisions, each a plain Triton idiom:
online softmax in base 2 with log2(e) folded into the scale, causal block skipping (the key loop
stops at the diagonal and the masked diagonal block is a separate stage), heaviest query blocks
scheduled first, tensor descriptors (TMA on Hopper) for every tile, autotuned tile sizes,
warps and pipeline depth.
"""
from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
LOG2E = 1.4426950408889634


def _boxes(nargs: dict) -> None:
    # The descriptors are built before autotuning picks a tile, so each config names its boxes.
    head_dim = nargs["HEAD_DIM"]
    nargs["q_desc"].block_shape = [1, nargs["BLOCK_M"], head_dim]
    nargs["o_desc"].block_shape = [1, nargs["BLOCK_M"], head_dim]
    nargs["k_desc"].block_shape = [1, nargs["BLOCK_N"], head_dim]
    nargs["v_desc"].block_shape = [1, nargs["BLOCK_N"], head_dim]


def _prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    # The interpreter runs the first config only: exactly what a pinned kernel runs on the device.
    if _INTERPRET:
        return configs[:1]
    # The causal diagonal stage walks whole key blocks inside one query block.
    kept = [c for c in configs if c.kwargs["BLOCK_M"] % c.kwargs["BLOCK_N"] == 0]
    return kept or configs[:1]


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, k_desc, v_desc, bh, offs_m, lo, hi, seq_len, qk_scale,
                    BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                    MASK_CAUSAL: tl.constexpr, MASK_SEQ: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = k_desc.load([bh, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        qk = tl.sum(q.to(tl.float32)[:, :, None] * tl.trans(k).to(tl.float32)[None, :, :], axis=1)
        if MASK_CAUSAL:
            keep = offs_m[:, None] >= (start_n + offs_n)[None, :]
            qk = qk * qk_scale + tl.where(keep, 0.0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_ij[:, None]
        elif MASK_SEQ:
            keep = (start_n + offs_n)[None, :] < seq_len
            qk = qk * qk_scale + tl.where(keep, 0.0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp(qk)
        alpha = tl.math.exp(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = v_desc.load([bh, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        acc = acc + tl.sum(p.to(v.dtype).to(tl.float32)[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)
        m_i = m_ij
    return acc, l_i, m_i


@triton.autotune(configs=[
    triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_stages=1, pre_hook=_boxes),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=3, pre_hook=_boxes),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3, pre_hook=_boxes),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4, num_stages=3, pre_hook=_boxes),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128}, num_warps=8, num_stages=2, pre_hook=_boxes),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=4, pre_hook=_boxes),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=4, pre_hook=_boxes),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 32}, num_warps=4, num_stages=4, pre_hook=_boxes),
][:1], key=["seq_len", "HEAD_DIM", "CAUSAL"], prune_configs_by={"early_config_prune": _prune})
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
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_desc, v_desc, bh, offs_m,
                                        0, seq_len, seq_len,
                                        qk_scale, BLOCK_N, HEAD_DIM, True, False)
    else:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_desc, v_desc, bh, offs_m,
                                        0, seq_len, seq_len, qk_scale,
                                        BLOCK_N, HEAD_DIM, False, not EVEN_N)
    acc = acc / l_i[:, None]
    # Rows past seq_len fall outside the descriptor's box and are not written.
    o_desc.store([bh, start_m * BLOCK_M, 0], acc.to(o_desc.dtype).reshape(1, BLOCK_M, HEAD_DIM))


def _descriptor(x: torch.Tensor) -> TensorDescriptor:
    flat = x.reshape(-1, x.shape[-2], x.shape[-1])
    # The box is a placeholder: the chosen config's pre_hook sets it before launch.
    return TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [1, 16, flat.shape[-1]])


def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Attention over (B, H, S, D) tensors; the result has q's shape and dtype.

    Raises ValueError unless k and v have q's shape and D is a power of two from 16 to 256.
    """
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must share one (B, H, S, D) shape, got {q.shape}, {k.shape}, "
                         f"{v.shape}")
    batch, heads, seq_len, head_dim = q.shape
    if head_dim not in (16, 32, 64, 128, 256):
        raise ValueError(f"head dim {head_dim} is not a power of two from 16 to 256")
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty_like(q)
    descs = [_descriptor(t) for t in (q, k, v, o)]

    def grid(meta: dict) -> tuple[int, int]:
        return (triton.cdiv(seq_len, meta["BLOCK_M"]), batch * heads)

    _attn_fwd[grid](*descs, seq_len, 1.0 / math.sqrt(head_dim),
                    HEAD_DIM=head_dim, CAUSAL=bool(causal))
    return o
