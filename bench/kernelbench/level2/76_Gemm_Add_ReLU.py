"""x @ W.T (a Linear without bias), plus a separate bias vector, then ReLU. The Model's own
bias parameter comes first among the trailing inputs, then the Linear's weight."""
import torch
import triton
import triton.language as tl


@triton.jit
def gemm_bias_relu(X, Wt, Bias, Y, M, N, K, TILE_M: tl.constexpr, TILE_N: tl.constexpr,
                   TILE_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * TILE_M + tl.arange(0, TILE_M)
    offs_n = pid_n * TILE_N + tl.arange(0, TILE_N)
    offs_k = tl.arange(0, TILE_K)
    x_ptrs = X + offs_m[:, None] * K + offs_k[None, :]
    w_ptrs = Wt + offs_n[:, None] * K + offs_k[None, :]
    acc = tl.zeros((TILE_M, TILE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, TILE_K)):
        rem = K - k * TILE_K
        xa = tl.load(x_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < rem), other=0.0)
        wa = tl.load(w_ptrs, mask=(offs_n[:, None] < N) & (offs_k[None, :] < rem), other=0.0)
        acc = tl.dot(xa, tl.trans(wa), acc)
        x_ptrs += TILE_K
        w_ptrs += TILE_K
    acc += tl.load(Bias + offs_n, mask=offs_n < N, other=0.0)[None, :]
    acc = tl.maximum(acc, 0.0)
    tl.store(Y + offs_m[:, None] * N + offs_n[None, :], acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def run(x, bias, weight):
    x = x.contiguous()
    M, K = x.shape
    N = weight.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=torch.float32)
    gemm_bias_relu[(triton.cdiv(M, 64), triton.cdiv(N, 64))](x, weight.contiguous(), bias, y, M, N, K,
                                                            TILE_M=64, TILE_N=64, TILE_K=32, num_warps=4)
    return y
