"""Causal attention: one program per (query tile, batch*head); the key walk is a helper."""
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _walk_keys(o_acc, row_sum, row_max, q_tile, k_base, v_base, q_idx, start, stop, seq,
               softmax_scale, KV_TILE: tl.constexpr, HEAD: tl.constexpr,
               APPLY_CAUSAL: tl.constexpr):
    kv_idx = tl.arange(0, KV_TILE)
    d_idx = tl.arange(0, HEAD)
    for kv_start in range(start, stop, KV_TILE):
        kv_pos = kv_start + kv_idx
        k_tile = tl.load(k_base + kv_pos[:, None] * HEAD + d_idx[None, :],
                         mask=kv_pos[:, None] < seq, other=0.0)
        logits = tl.dot(q_tile, tl.trans(k_tile)) * softmax_scale
        logits = tl.where(kv_pos[None, :] < seq, logits, float("-inf"))
        if APPLY_CAUSAL:
            logits = tl.where(q_idx[:, None] >= kv_pos[None, :], logits, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(logits, axis=1))
        probs = tl.exp(logits - new_max[:, None])
        rescale = tl.exp(row_max - new_max)
        v_tile = tl.load(v_base + kv_pos[:, None] * HEAD + d_idx[None, :],
                         mask=kv_pos[:, None] < seq, other=0.0)
        o_acc = o_acc * rescale[:, None] + tl.dot(probs.to(v_tile.dtype), v_tile)
        row_sum = row_sum * rescale + tl.sum(probs, axis=1)
        row_max = new_max
    return o_acc, row_sum, row_max


@triton.jit
def causal_attention_kernel(Q, K, V, Out, seq, softmax_scale,
                            Q_TILE: tl.constexpr, KV_TILE: tl.constexpr, HEAD: tl.constexpr):
    tile = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh * seq * HEAD
    q_idx = tile * Q_TILE + tl.arange(0, Q_TILE)
    d_idx = tl.arange(0, HEAD)
    q_tile = tl.load(Q + base + q_idx[:, None] * HEAD + d_idx[None, :],
                     mask=q_idx[:, None] < seq, other=0.0)
    o_acc = tl.zeros((Q_TILE, HEAD), dtype=tl.float32)
    row_sum = tl.zeros((Q_TILE,), dtype=tl.float32)
    row_max = tl.full((Q_TILE,), float("-inf"), dtype=tl.float32)
    o_acc, row_sum, row_max = _walk_keys(o_acc, row_sum, row_max, q_tile, K + base, V + base,
                                         q_idx, 0, seq, seq, softmax_scale,
                                         KV_TILE, HEAD, True)
    out = o_acc / row_sum[:, None]
    tl.store(Out + base + q_idx[:, None] * HEAD + d_idx[None, :], out.to(Out.dtype.element_ty),
             mask=q_idx[:, None] < seq)


def run(q, k, v):
    batch, heads, seq, head = q.shape
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    grid = (triton.cdiv(seq, 32), batch * heads)
    causal_attention_kernel[grid](q, k, v, out, seq, 1.0 / math.sqrt(head),
                                  Q_TILE=32, KV_TILE=32, HEAD=head, num_warps=4)
    return out
