"""Flash-attention forward in Triton: online softmax over K/V blocks, causal masking.

Parser test input for KLineage (autotune + heuristics decorators, tl.static_range,
tl.dot, tl.where, a launch with a grid lambda).
"""
import torch
import triton
import triton.language as tl


@triton.heuristics({"EVEN_N": lambda args: args["N_CTX"] % args["BLOCK_N"] == 0})
@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_stages=2, num_warps=4),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_stages=3, num_warps=8),
    ],
    key=["N_CTX", "HEAD_DIM"],
)
@triton.jit
def attn_fwd(Q, K, V, Out, sm_scale, stride_qm, stride_kn, stride_vn, stride_om, N_CTX,
             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             CAUSAL: tl.constexpr, EVEN_N: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + off_hz * N_CTX * stride_qm + offs_m[:, None] * stride_qm + offs_d[None, :])
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504  # log2(e): exp2 is cheaper than exp
    hi = (start_m + 1) * BLOCK_M if CAUSAL else N_CTX
    for start_n in tl.range(0, hi, BLOCK_N, num_stages=2):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k_ptrs = K + off_hz * N_CTX * stride_kn + (start_n + offs_n)[None, :] * stride_kn
        if EVEN_N:
            k = tl.load(k_ptrs + offs_d[:, None])
        else:
            k = tl.load(k_ptrs + offs_d[:, None], mask=(start_n + offs_n)[None, :] < N_CTX,
                        other=0.0)
        qk = tl.dot(q, k) * qk_scale
        if CAUSAL:
            qk = tl.where(offs_m[:, None] >= (start_n + offs_n)[None, :], qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(V + off_hz * N_CTX * stride_vn + (start_n + offs_n)[:, None] * stride_vn
                    + offs_d[None, :])
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(Out + off_hz * N_CTX * stride_om + offs_m[:, None] * stride_om + offs_d[None, :],
             acc.to(Out.type.element_ty))


def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    batch_heads, n_ctx, head_dim = q.shape
    out = torch.empty_like(q)
    grid = lambda meta: (triton.cdiv(n_ctx, meta["BLOCK_M"]), batch_heads)  # noqa: E731
    attn_fwd[grid](q, k, v, out, head_dim ** -0.5, q.stride(1), k.stride(1), v.stride(1),
                   out.stride(1), n_ctx, HEAD_DIM=head_dim, CAUSAL=causal)
    return out
