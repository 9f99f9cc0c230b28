"""Causal attention with block pointers: Q, K^T and V tiles are read through tl.make_block_ptr
and walked with tl.advance. One program per (query block, batch*head)."""
import torch
import triton
import triton.language as tl


@triton.jit
def attn_fwd_bp(Q, K, V, Out, sm_scale, N_CTX,
                stride_qz, stride_qh, stride_qm, stride_qk,
                stride_kz, stride_kh, stride_kn, stride_kk,
                stride_vz, stride_vh, stride_vn, stride_vk,
                stride_oz, stride_oh, stride_om, stride_ok,
                H: tl.constexpr, D_HEAD: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    q_off = off_z * stride_qz + off_h * stride_qh
    k_off = off_z * stride_kz + off_h * stride_kh
    v_off = off_z * stride_vz + off_h * stride_vh
    o_off = off_z * stride_oz + off_h * stride_oh
    Q_block = tl.make_block_ptr(base=Q + q_off, shape=(N_CTX, D_HEAD), strides=(stride_qm, stride_qk),
                                offsets=(start_m * BLOCK_M, 0), block_shape=(BLOCK_M, D_HEAD), order=(1, 0))
    KT_block = tl.make_block_ptr(base=K + k_off, shape=(D_HEAD, N_CTX), strides=(stride_kk, stride_kn),
                                 offsets=(0, 0), block_shape=(D_HEAD, BLOCK_N), order=(0, 1))
    V_block = tl.make_block_ptr(base=V + v_off, shape=(N_CTX, D_HEAD), strides=(stride_vn, stride_vk),
                                offsets=(0, 0), block_shape=(BLOCK_N, D_HEAD), order=(1, 0))
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D_HEAD], dtype=tl.float32)
    q = tl.load(Q_block, boundary_check=(0, 1))
    for start_n in range(0, N_CTX, BLOCK_N):
        k = tl.load(KT_block, boundary_check=(0, 1))
        qk = tl.dot(q, k) * sm_scale
        valid = (offs_m[:, None] >= (start_n + offs_n[None, :])) & ((start_n + offs_n[None, :]) < N_CTX)
        qk = tl.where(valid, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_ij[:, None])
        alpha = tl.exp(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V_block, boundary_check=(0, 1))
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_ij
        KT_block = tl.advance(KT_block, (0, BLOCK_N))
        V_block = tl.advance(V_block, (BLOCK_N, 0))
    acc = acc / l_i[:, None]
    O_block = tl.make_block_ptr(base=Out + o_off, shape=(N_CTX, D_HEAD), strides=(stride_om, stride_ok),
                                offsets=(start_m * BLOCK_M, 0), block_shape=(BLOCK_M, D_HEAD), order=(1, 0))
    tl.store(O_block, acc.to(Out.type.element_ty), boundary_check=(0, 1))


def run(q, k, v):
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    BLOCK_M, BLOCK_N = 32, 32
    grid = (triton.cdiv(S, BLOCK_M), B * H, 1)
    attn_fwd_bp[grid](q, k, v, o, 1.0 / (D ** 0.5), S,
                      q.stride(0), q.stride(1), q.stride(2), q.stride(3),
                      k.stride(0), k.stride(1), k.stride(2), k.stride(3),
                      v.stride(0), v.stride(1), v.stride(2), v.stride(3),
                      o.stride(0), o.stride(1), o.stride(2), o.stride(3),
                      H=H, D_HEAD=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=4, num_stages=1)
    return o
