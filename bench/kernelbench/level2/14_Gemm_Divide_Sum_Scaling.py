"""sum over the hidden dimension of (x @ W.T) / 2, times 1.5, kept as (batch, 1): a tiled GEMM
writes the product, a second kernel sums each row and scales it.

The row sums cancel (terms of both signs, a result far smaller than its terms), so the
product is computed in full fp32 (`input_precision="ieee"`): with TF32 operands a few sums
miss KernelBench's own check (atol = rtol = 1e-2) at the real sizes."""
import torch
import triton
import triton.language as tl

SCALING = 1.5


@triton.jit
def gemm_nt(x_ptr, w_ptr, t_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    m = tl.program_id(0) * BM + tl.arange(0, BM)
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        k = k0 + tl.arange(0, BK)
        a = tl.load(x_ptr + m[:, None] * K + k[None, :], mask=(m[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(w_ptr + n[None, :] * K + k[:, None], mask=(n[None, :] < N) & (k[:, None] < K), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(t_ptr + m[:, None] * N + n[None, :], acc, mask=(m[:, None] < M) & (n[None, :] < N))


@triton.jit
def row_sum_scale(t_ptr, out_ptr, N, factor, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    s = tl.zeros((BLOCK,), tl.float32)
    for j in range(0, N, BLOCK):
        c = j + tl.arange(0, BLOCK)
        s += tl.load(t_ptr + row * N + c, mask=c < N, other=0.0)
    tl.store(out_ptr + row, tl.sum(s, 0) * factor)


def run(x, weight):
    x = x.contiguous()
    M, K = x.shape
    N = weight.shape[0]
    tmp = torch.empty((M, N), device=x.device, dtype=torch.float32)
    gemm_nt[(triton.cdiv(M, 64), triton.cdiv(N, 64))](x, weight.contiguous(), tmp, M, N, K, BM=64, BN=64, BK=32)
    out = torch.empty((M, 1), device=x.device, dtype=torch.float32)
    row_sum_scale[(M,)](tmp, out, N, 0.5 * SCALING, BLOCK=1024)
    return out
