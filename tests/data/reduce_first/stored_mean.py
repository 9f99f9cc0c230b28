"""Row means of q @ p (p read from a (N, K) tensor through its transpose's strides), the mean
taken over a block of rows at a time by a second kernel that divides by the width itself."""
import torch
import triton
import triton.language as tl


@triton.jit
def product(q_ptr, p_ptr, o_ptr, M, N, K, sqm, sqk, spk, spn, BM: tl.constexpr, BN: tl.constexpr,
            BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        q = tl.load(q_ptr + rm[:, None] * sqm + rk[None, :] * sqk, mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        p = tl.load(p_ptr + rk[:, None] * spk + rn[None, :] * spn, mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(q, p, acc)
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def mean_rows(t_ptr, out_ptr, M, N, RB: tl.constexpr, CB: tl.constexpr):
    rows = tl.program_id(0) * RB + tl.arange(0, RB)
    cols = tl.arange(0, CB)
    tile = tl.load(t_ptr + rows[:, None] * N + cols[None, :], mask=(rows[:, None] < M) & (cols[None, :] < N), other=0.0)
    tl.store(out_ptr + rows, tl.sum(tile, axis=1) / N, mask=rows < M)


def run(q, p):
    M, K = q.shape
    N = p.shape[0]
    pt = p.t()
    t = torch.empty((M, N), device=q.device, dtype=torch.float32)
    product[(triton.cdiv(M, 16), triton.cdiv(N, 16))](q, pt, t, M, N, K, q.stride(0), q.stride(1),
                                                      pt.stride(0), pt.stride(1), BM=16, BN=16, BK=16)
    out = torch.empty((M, 1), device=q.device, dtype=torch.float32)
    mean_rows[(triton.cdiv(M, 8),)](t, out, M, N, RB=8, CB=triton.next_power_of_2(N))
    return out
