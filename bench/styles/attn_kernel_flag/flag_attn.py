"""Attention over (batch, seq, heads, dim) tensors. The causal mask is a constexpr switch of the
kernel (the launch sets CAUSAL=True); masked scores get an additive -inf. Grid: (query tiles,
batch * heads), pointers built from the four strides."""
import torch
import triton
import triton.language as tl


@triton.jit
def flash_fwd(q_ptr, k_ptr, v_ptr, out_ptr, seq, heads, softmax_scale,
              s_b, s_s, s_h, HEAD_DIM: tl.constexpr, TILE_Q: tl.constexpr,
              TILE_KV: tl.constexpr, CAUSAL: tl.constexpr):
    tile = tl.program_id(0)
    bh = tl.program_id(1)
    head_off = (bh // heads) * s_b + (bh % heads) * s_h
    q_pos = tile * TILE_Q + tl.arange(0, TILE_Q)
    dim = tl.arange(0, HEAD_DIM)
    q_blk = tl.load(q_ptr + head_off + q_pos[:, None] * s_s + dim[None, :],
                    mask=q_pos[:, None] < seq, other=0.0)
    run_max = tl.zeros([TILE_Q], dtype=tl.float32) - float("inf")
    run_sum = tl.zeros([TILE_Q], dtype=tl.float32)
    out = tl.zeros([TILE_Q, HEAD_DIM], dtype=tl.float32)
    for kv0 in range(0, seq, TILE_KV):
        kv_pos = kv0 + tl.arange(0, TILE_KV)
        inside = kv_pos < seq
        k_blk = tl.load(k_ptr + head_off + kv_pos[:, None] * s_s + dim[None, :],
                        mask=inside[:, None], other=0.0)
        scores = tl.dot(q_blk, tl.trans(k_blk)) * softmax_scale
        scores += tl.where(inside[None, :], 0.0, float("-inf"))
        if CAUSAL:
            scores += tl.where(kv_pos[None, :] <= q_pos[:, None], 0.0, float("-inf"))
        new_max = tl.maximum(run_max, tl.max(scores, axis=1))
        safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
        probs = tl.exp(scores - safe_max[:, None])
        rescale = tl.exp(run_max - safe_max)
        run_sum = run_sum * rescale + tl.sum(probs, axis=1)
        v_blk = tl.load(v_ptr + head_off + kv_pos[:, None] * s_s + dim[None, :],
                        mask=inside[:, None], other=0.0)
        out = out * rescale[:, None] + tl.dot(probs.to(v_blk.dtype), v_blk)
        run_max = new_max
    out = out / run_sum[:, None]
    tl.store(out_ptr + head_off + q_pos[:, None] * s_s + dim[None, :],
             out.to(out_ptr.dtype.element_ty), mask=q_pos[:, None] < seq)


def run(q, k, v):
    batch, seq, heads, dim = q.shape
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    launch = (triton.cdiv(seq, 32), batch * heads)
    flash_fwd[launch](q, k, v, out, seq, heads, dim ** -0.5,
                      q.stride(0), q.stride(1), q.stride(2),
                      HEAD_DIM=dim, TILE_Q=32, TILE_KV=32, CAUSAL=True)
    return out
