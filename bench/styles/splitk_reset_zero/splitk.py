"""Split-K GEMM: program (tile, s) reduces the s-th slice of K and atomically adds its partial tile
into an fp32 output. The autotuner zeroes the output between timing runs (reset_to_zero)."""
import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"TM": 32, "TN": 32, "TK": 32, "SPLITS": 2}, num_warps=4),
        triton.Config({"TM": 32, "TN": 32, "TK": 32, "SPLITS": 4}, num_warps=4),
    ],
    key=["M", "N", "K"],
    reset_to_zero=["out"],
)
@triton.jit
def splitk_gemm(a, b, out, M, N, K, sa0, sa1, sb0, sb1, so0, so1,
                TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr, SPLITS: tl.constexpr):
    tile = tl.program_id(0)
    split = tl.program_id(1)
    n_cols = tl.cdiv(N, TN)
    tm = tile // n_cols
    tn = tile % n_cols
    offs_m = tm * TM + tl.arange(0, TM)
    offs_n = tn * TN + tl.arange(0, TN)
    chunk = tl.cdiv(tl.cdiv(K, SPLITS), TK) * TK
    k_lo = split * chunk
    part = tl.zeros((TM, TN), dtype=tl.float32)
    for k in range(k_lo, k_lo + chunk, TK):
        offs_k = k + tl.arange(0, TK)
        kmask = offs_k < K
        x = tl.load(a + offs_m[:, None] * sa0 + offs_k[None, :] * sa1,
                    mask=(offs_m[:, None] < M) & kmask[None, :], other=0.0)
        y = tl.load(b + offs_k[:, None] * sb0 + offs_n[None, :] * sb1,
                    mask=kmask[:, None] & (offs_n[None, :] < N), other=0.0)
        part += tl.dot(x, y)
    tl.atomic_add(out + offs_m[:, None] * so0 + offs_n[None, :] * so1, part,
                  mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    out = torch.zeros((M, N), device=a.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(M, meta["TM"]) * triton.cdiv(N, meta["TN"]), meta["SPLITS"])
    splitk_gemm[grid](a, b, out, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                      out.stride(0), out.stride(1))
    return out
