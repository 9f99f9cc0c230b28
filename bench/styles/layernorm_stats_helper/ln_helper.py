"""LayerNorm with one program per row: a `@triton.jit` helper walks the row in CHUNK-wide
pieces for the mean and variance (Welford-free: sums of x and x^2 in fp32), the kernel then
writes the row in a second chunk loop."""
import torch
import triton
import triton.language as tl


@triton.jit
def _row_moments(row_ptr, n, CHUNK: tl.constexpr):
    s1 = tl.zeros([CHUNK], dtype=tl.float32)
    s2 = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, n, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        v = tl.load(row_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
        s1 += v
        s2 += v * v
    mean = tl.sum(s1, axis=0) / n
    var = tl.sum(s2, axis=0) / n - mean * mean
    return mean, tl.rsqrt(var + 1e-5)


@triton.jit
def ln_fwd(x_ptr, w_ptr, b_ptr, y_ptr, n, stride, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    mean, rstd = _row_moments(x_ptr + row * stride, n, CHUNK)
    for start in range(0, n, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        ok = offs < n
        v = tl.load(x_ptr + row * stride + offs, mask=ok, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        bias = tl.load(b_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride + offs, ((v - mean) * rstd * w + bias).to(tl.float16), mask=ok)


def run(x, weight, bias):
    x = x.contiguous()
    y = torch.empty_like(x)
    M, N = x.shape
    ln_fwd[(M,)](x, weight, bias, y, N, x.stride(0), CHUNK=128, num_warps=2)
    return y
