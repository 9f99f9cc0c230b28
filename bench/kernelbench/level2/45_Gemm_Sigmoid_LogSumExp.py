"""logsumexp over features of linear2(sigmoid(linear1(x))): a GEMM with bias and sigmoid
writes the hidden activations, a second GEMM with bias writes the logits, a row kernel reduces
them to log-sum-exp."""
import torch
import triton
import triton.language as tl


@triton.jit
def linear_act(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, SIGMOID: tl.constexpr,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    om = tl.program_id(0) * BM + tl.arange(0, BM)
    on = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        ok = k + tl.arange(0, BK)
        a = tl.load(x_ptr + om[:, None].to(tl.int64) * K + ok[None, :], mask=(om[:, None] < M) & (ok[None, :] < K), other=0.0)
        w = tl.load(w_ptr + on[None, :] * K + ok[:, None], mask=(on[None, :] < N) & (ok[:, None] < K), other=0.0)
        acc += tl.dot(a, w)
    acc += tl.load(b_ptr + on, mask=on < N, other=0.0)[None, :]
    if SIGMOID:
        acc = 1.0 / (1.0 + tl.exp(-acc))
    tl.store(y_ptr + om[:, None].to(tl.int64) * N + on[None, :], acc, mask=(om[:, None] < M) & (on[None, :] < N))


@triton.jit
def logsumexp_rows(z_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    z = tl.load(z_ptr + row * N + cols, mask=cols < N, other=float("-inf"))
    mx = tl.max(z, 0)
    tl.store(out_ptr + row, mx + tl.log(tl.sum(tl.exp(z - mx), 0)))


def run(x, w1, b1, w2, b2):
    x = x.contiguous()
    M, K = x.shape
    H = w1.shape[0]
    O = w2.shape[0]
    h = torch.empty((M, H), device=x.device, dtype=torch.float32)
    linear_act[(triton.cdiv(M, 64), triton.cdiv(H, 64))](x, w1.contiguous(), b1, h, M, H, K, SIGMOID=True,
                                                         BM=64, BN=64, BK=32)
    z = torch.empty((M, O), device=x.device, dtype=torch.float32)
    linear_act[(triton.cdiv(M, 64), triton.cdiv(O, 64))](h, w2.contiguous(), b2, z, M, O, H, SIGMOID=False,
                                                         BM=64, BN=64, BK=32)
    out = torch.empty((M,), device=x.device, dtype=torch.float32)
    logsumexp_rows[(M,)](z, out, O, BLOCK=triton.next_power_of_2(O))
    return out
