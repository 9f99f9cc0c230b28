"""Case mm_rowsum. out[m] = sum_n (A @ B)[m, n]: each program computes its (BM, BN) tile of the
product and adds the tile's row sums into `out` with `tl.atomic_add` (out zeroed on the host)."""
import torch
import triton
import triton.language as tl


@triton.jit
def mm_rowsum(a_ptr, b_ptr, out_ptr, M, N, K, s_am, s_ak, s_bk, s_bn,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * s_am + (k + rk)[None, :] * s_ak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * s_bk + rn[None, :] * s_bn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.atomic_add(out_ptr + rm, tl.sum(acc, axis=1), mask=rm < M)


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    out = torch.zeros(M, device=a.device, dtype=torch.float32)
    mm_rowsum[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, out, M, N, K, a.stride(0), a.stride(1),
                                                       b.stride(0), b.stride(1), BM=32, BN=32, BK=32)
    return out
