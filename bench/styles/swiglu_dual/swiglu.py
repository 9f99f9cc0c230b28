"""Fused SwiGLU projection: out = silu(x @ w_gate) * (x @ w_up). One 1-D grid over output
tiles; both products share the x tile; pointers are bumped by the K step each iteration."""
import torch
import triton
import triton.language as tl


@triton.jit
def swiglu_kernel(x_ptr, wg_ptr, wu_ptr, out_ptr, M, N, K,
                  sxm, sxk, swk, swn, som, son,
                  TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr):
    pid = tl.program_id(axis=0)
    n_tiles_n = tl.cdiv(N, TN)
    tm = pid // n_tiles_n
    tn = pid % n_tiles_n
    rows = tm * TM + tl.arange(0, TM)
    cols = tn * TN + tl.arange(0, TN)
    ks = tl.arange(0, TK)
    x_ptrs = x_ptr + rows[:, None] * sxm + ks[None, :] * sxk
    g_ptrs = wg_ptr + ks[:, None] * swk + cols[None, :] * swn
    u_ptrs = wu_ptr + ks[:, None] * swk + cols[None, :] * swn
    gate = tl.zeros((TM, TN), dtype=tl.float32)
    up = tl.zeros((TM, TN), dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, TK)):
        k_left = K - kk * TK
        xa = tl.load(x_ptrs, mask=(rows[:, None] < M) & (ks[None, :] < k_left), other=0.0)
        wg = tl.load(g_ptrs, mask=(ks[:, None] < k_left) & (cols[None, :] < N), other=0.0)
        wu = tl.load(u_ptrs, mask=(ks[:, None] < k_left) & (cols[None, :] < N), other=0.0)
        gate = tl.dot(xa, wg, gate)
        up = tl.dot(xa, wu, up)
        x_ptrs += TK * sxk
        g_ptrs += TK * swk
        u_ptrs += TK * swk
    act = gate * tl.sigmoid(gate) * up
    tl.store(out_ptr + rows[:, None] * som + cols[None, :] * son, act.to(out_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def run(x, w_gate, w_up):
    M, K = x.shape
    N = w_gate.shape[1]
    out = torch.empty((M, N), device=x.device, dtype=x.dtype)
    TM, TN, TK = 32, 32, 32
    n_prog = triton.cdiv(M, TM) * triton.cdiv(N, TN)
    swiglu_kernel[(n_prog,)](x, w_gate, w_up, out, M, N, K,
                             x.stride(0), x.stride(1), w_gate.stride(0), w_gate.stride(1),
                             out.stride(0), out.stride(1), TM=TM, TN=TN, TK=TK)
    return out
