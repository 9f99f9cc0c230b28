"""gelu_tanh(A @ B + bias). The program id is split column-major (`pid % tiles_m` is the row
block); bias and activation live in `@triton.jit` helpers the kernel calls on its accumulator."""
import torch
import triton
import triton.language as tl


@triton.jit
def _tanh(x):
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def _gelu_tanh(x):
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + _tanh(inner))


@triton.jit
def _bias_act(acc, bias_ptr, cols, N):
    bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    return _gelu_tanh(acc + bias[None, :])


@triton.jit
def linear_gelu(x_ptr, w_ptr, bias_ptr, y_ptr, M, N, K,
                sxm, sxk, swk, swn, sym, syn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(axis=0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    bm = pid % tiles_m
    bn = pid // tiles_m
    rows = bm * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = bn * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + rows[:, None] * sxm + (k + ks)[None, :] * sxk,
                    mask=(rows[:, None] < M) & ((k + ks)[None, :] < K), other=0.0)
        w = tl.load(w_ptr + (k + ks)[:, None] * swk + cols[None, :] * swn,
                    mask=((k + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(x, w)
    out = _bias_act(acc, bias_ptr, cols, N)
    tl.store(y_ptr + rows[:, None] * sym + cols[None, :] * syn, out.to(y_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def run(x, w, bias):
    M, K = x.shape
    N = w.shape[1]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    programs = triton.cdiv(M, 32) * triton.cdiv(N, 32)
    linear_gelu[(programs,)](x, w, bias, y, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                             y.stride(0), y.stride(1), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return y
