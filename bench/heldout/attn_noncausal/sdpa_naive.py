import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _sdpa_fwd(q_ptr, k_ptr, v_ptr, o_ptr, seq_len, qk_scale,
              D: tl.constexpr, TILE_Q: tl.constexpr, TILE_KV: tl.constexpr):
    # contiguous (B, H, S, D) tensors: the (batch, head) slice is a dense S x D matrix
    tile = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    base = head * seq_len * D
    rq = tile * TILE_Q + tl.arange(0, TILE_Q)
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + base + rq[:, None] * D + rd[None, :], mask=rq[:, None] < seq_len, other=0.0)
    row_max = tl.zeros([TILE_Q], dtype=tl.float32) - float("inf")
    row_sum = tl.zeros([TILE_Q], dtype=tl.float32)
    out = tl.zeros([TILE_Q, D], dtype=tl.float32)
    for kv0 in tl.range(0, seq_len, TILE_KV):
        rk = kv0 + tl.arange(0, TILE_KV)
        kt = tl.load(k_ptr + base + rk[None, :] * D + rd[:, None], mask=rk[None, :] < seq_len, other=0.0)
        s = tl.dot(q, kt) * qk_scale
        s = tl.where(rk[None, :] < seq_len, s, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(s, axis=1))
        p = tl.exp2(s - new_max[:, None])
        corr = tl.exp2(row_max - new_max)
        row_sum = row_sum * corr + tl.sum(p, axis=1)
        vt = tl.load(v_ptr + base + rk[:, None] * D + rd[None, :], mask=rk[:, None] < seq_len, other=0.0)
        out = out * corr[:, None] + tl.dot(p.to(vt.dtype), vt)
        row_max = new_max
    out = out / row_sum[:, None]
    tl.store(o_ptr + base + rq[:, None] * D + rd[None, :], out.to(o_ptr.dtype.element_ty),
             mask=rq[:, None] < seq_len)


def run(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    batch, heads, seq_len, d = q.shape
    o = torch.empty_like(q)
    grid = lambda meta: (triton.cdiv(seq_len, meta["TILE_Q"]), batch * heads)
    _sdpa_fwd[grid](q, k, v, o, seq_len, LOG2E / d ** 0.5, D=d, TILE_Q=32, TILE_KV=32)
    return o
