"""Fused layer norm (forward) with a two-pass reduction over column blocks.

Parser test input for KLineage: plain @triton.jit, a while loop, tl.static_range, an
explicit barrier and module-level constants; non-ASCII in comments (σ, μ) to check byte spans.
"""
import torch
import triton
import triton.language as tl

DEFAULT_EPS = 1e-5  # ε
MAX_FUSED = 65536 // 4


@triton.jit
def _layer_norm_fwd(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_N: tl.constexpr,
                    UNROLL: tl.constexpr = 2):
    row = tl.program_id(0)
    X += row * stride
    Y += row * stride
    # μ: running mean over column blocks
    _mean = tl.zeros([BLOCK_N], dtype=tl.float32)
    off = 0
    while off < N:
        cols = off + tl.arange(0, BLOCK_N)
        a = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        _mean += a
        off += BLOCK_N
    mean = tl.sum(_mean, axis=0) / N
    # σ²: variance
    _var = tl.zeros([BLOCK_N], dtype=tl.float32)
    for off in range(0, N, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        x = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.0)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    tl.debug_barrier()
    for off in range(0, N, BLOCK_N):
        for u in tl.static_range(UNROLL):
            cols = off + tl.arange(0, BLOCK_N)
            mask = cols < N
            w = tl.load(W + cols, mask=mask)
            b = tl.load(B + cols, mask=mask)
            x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
            y = (x - mean) * rstd * w + b
            tl.store(Y + cols, y, mask=mask)


def run(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
        eps: float = DEFAULT_EPS) -> torch.Tensor:
    m, n = x.shape
    y = torch.empty_like(x)
    mean = torch.empty((m,), dtype=torch.float32, device=x.device)
    rstd = torch.empty((m,), dtype=torch.float32, device=x.device)
    block_n = min(MAX_FUSED, triton.next_power_of_2(n))
    _layer_norm_fwd[(m,)](x, y, weight, bias, mean, rstd, x.stride(0), n, eps,
                          BLOCK_N=block_n, num_warps=4)
    return y
