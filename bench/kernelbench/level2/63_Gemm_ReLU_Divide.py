"""relu(x @ W.T + b) / 2.0: a tiled GEMM whose pointers advance along K each step, with a bias,
ReLU and division epilogue."""
import torch
import triton
import triton.language as tl

DIVISOR = 2.0


@triton.jit
def linear_relu_div(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, divisor,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    xp = x_ptr + rm[:, None] * K + rk[None, :]
    wp = w_ptr + rk[:, None] + rn[None, :] * K
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(xp, mask=(rm[:, None] < M) & (k + rk[None, :] < K), other=0.0)
        b = tl.load(wp, mask=(k + rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        xp += BK
        wp += BK
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    acc = tl.maximum(acc, 0.0) / divisor
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(x, weight, bias):
    x = x.contiguous()
    M, K = x.shape
    N = weight.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=torch.float32)
    linear_relu_div[(triton.cdiv(M, 64), triton.cdiv(N, 64))](x, weight.contiguous(), bias, y, M, N, K, DIVISOR,
                                                              BM=64, BN=64, BK=32)
    return y
