"""Case attn. Non-causal attention; scores as `tl.dot(q, tl.trans(k))` on a K tile loaded
(keys, D); a 1-D grid split into (batch*head, query tile) by `//` and `%`; the running max
and sum of an online softmax in `tl.exp`, the scale on the scores."""
import torch
import triton
import triton.language as tl


@triton.jit
def flash_fwd(Q, K, V, Out, seq, sm_scale, n_qt,
              BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, HEAD: tl.constexpr):
    pid = tl.program_id(0)
    bh = pid // n_qt
    qt = pid % n_qt
    off = bh * seq * HEAD
    q_idx = qt * BLOCK_Q + tl.arange(0, BLOCK_Q)
    d = tl.arange(0, HEAD)
    q = tl.load(Q + off + q_idx[:, None] * HEAD + d[None, :], mask=q_idx[:, None] < seq, other=0.0)
    mx = tl.zeros((BLOCK_Q,), dtype=tl.float32) - float("inf")
    den = tl.zeros((BLOCK_Q,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_Q, HEAD), dtype=tl.float32)
    for kv in range(0, seq, BLOCK_K):
        k_idx = kv + tl.arange(0, BLOCK_K)
        k = tl.load(K + off + k_idx[:, None] * HEAD + d[None, :], mask=k_idx[:, None] < seq, other=0.0)
        v = tl.load(V + off + k_idx[:, None] * HEAD + d[None, :], mask=k_idx[:, None] < seq, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        s = tl.where(k_idx[None, :] < seq, s, -1.0e30)
        new_mx = tl.maximum(mx, tl.max(s, axis=1))
        p = tl.exp(s - new_mx[:, None])
        corr = tl.exp(mx - new_mx)
        den = den * corr + tl.sum(p, axis=1)
        acc = acc * corr[:, None] + tl.dot(p.to(v.dtype), v)
        mx = new_mx
    tl.store(Out + off + q_idx[:, None] * HEAD + d[None, :], (acc / den[:, None]).to(Out.dtype.element_ty),
             mask=q_idx[:, None] < seq)


def run(q, k, v):
    B, H, S, D = q.shape
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    n_qt = triton.cdiv(S, 32)
    flash_fwd[(B * H * n_qt,)](q, k, v, out, S, D ** -0.5, n_qt, BLOCK_Q=32, BLOCK_K=16, HEAD=D)
    return out
