"""Case mm_bias_silu. C = silu(A @ B + bias); the epilogue (bias add and SiLU) lives in a
@triton.jit helper that takes the accumulator and returns the activated tile."""
import torch
import triton
import triton.language as tl


@triton.jit
def _bias_silu(acc, bias_ptr, cols, N):
    bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    z = acc + bias[None, :]
    return z / (1.0 + tl.exp(-z))


@triton.jit
def mm_bias_silu(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, sam, sbk, scm,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rows[:, None] * sam + (k0 + ks)[None, :],
                    mask=(rows[:, None] < M) & ((k0 + ks)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + ks)[:, None] * sbk + cols[None, :],
                    mask=((k0 + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    out = _bias_silu(acc, bias_ptr, cols, N)
    tl.store(c_ptr + rows[:, None] * scm + cols[None, :], out.to(tl.float16),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def run(a, b, bias):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    mm_bias_silu[grid](a, b, bias, c, M, N, K, a.stride(0), b.stride(0), c.stride(0),
                       BM=32, BN=32, BK=32)
    return c
