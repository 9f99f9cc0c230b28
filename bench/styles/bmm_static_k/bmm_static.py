"""Batched GEMM: batch on grid axis 0, the (row, col) tile flattened on axis 1; K is a constexpr
and the K walk is fully unrolled with tl.static_range."""
import torch
import triton
import triton.language as tl


@triton.jit
def bmm_static(a_ptr, b_ptr, c_ptr, M, N, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
               K: tl.constexpr, TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr):
    bid = tl.program_id(0)
    tile = tl.program_id(1)
    tiles_n = tl.cdiv(N, TN)
    tm = tile // tiles_n
    tn = tile % tiles_n
    rows = tm * TM + tl.arange(0, TM)
    cols = tn * TN + tl.arange(0, TN)
    ks = tl.arange(0, TK)
    a_base = a_ptr + bid * sab
    b_base = b_ptr + bid * sbb
    acc = tl.zeros((TM, TN), dtype=tl.float32)
    for kt in tl.static_range(K // TK):
        kidx = kt * TK + ks
        x = tl.load(a_base + rows[:, None] * sam + kidx[None, :] * sak, mask=rows[:, None] < M, other=0.0)
        y = tl.load(b_base + kidx[:, None] * sbk + cols[None, :] * sbn, mask=cols[None, :] < N, other=0.0)
        acc = tl.dot(x, y, acc)
    tl.store(c_ptr + bid * scb + rows[:, None] * scm + cols[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def make_bmm(tm=32, tn=32, tk=32, warps=4):
    def launch(a, b):
        nb, M, K = a.shape
        N = b.shape[2]
        assert K % tk == 0
        c = torch.empty((nb, M, N), device=a.device, dtype=a.dtype)
        grid = (nb, triton.cdiv(M, tm) * triton.cdiv(N, tn))
        bmm_static[grid](a, b, c, M, N, *a.stride(), *b.stride(), *c.stride(),
                         K=K, TM=tm, TN=tn, TK=tk, num_warps=warps)
        return c
    return launch


run = make_bmm()
