"""Causal attention forward for one head (test data for the passes)."""
import triton
import triton.language as tl


@triton.jit
def attn_kernel(q_ptr, k_ptr, v_ptr, o_ptr, N_CTX, sm_scale,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, IS_CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < N_CTX, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX) if IS_CAUSAL else N_CTX
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_ptr + cols[:, None] * D + offs_d[None, :], mask=cols[:, None] < N_CTX, other=0.0)
        qk = tl.sum(q.to(tl.float32)[:, :, None] * tl.trans(k).to(tl.float32)[None, :, :], axis=1) * sm_scale
        keep = (cols[None, :] < N_CTX) & (not IS_CAUSAL or offs_m[:, None] >= cols[None, :])
        qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        v = tl.load(v_ptr + cols[:, None] * D + offs_d[None, :], mask=cols[:, None] < N_CTX, other=0.0)
        acc = acc * alpha[:, None] + tl.sum(p.to(v.dtype).to(tl.float32)[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new
    tl.store(o_ptr + offs_m[:, None] * D + offs_d[None, :], acc / l_i[:, None], mask=offs_m[:, None] < N_CTX)
