"""Case layernorm. One program per row; a first loop over column chunks sums x and x*x, a
second loop normalizes and writes; the variance as E[x^2] - mean^2."""
import torch
import triton
import triton.language as tl


@triton.jit
def ln_fwd(x_ptr, w_ptr, b_ptr, y_ptr, row_stride, N, eps, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * row_stride
    y_row = y_ptr + row * row_stride
    s1 = tl.zeros((CHUNK,), dtype=tl.float32)
    s2 = tl.zeros((CHUNK,), dtype=tl.float32)
    for c in range(0, N, CHUNK):
        cols = c + tl.arange(0, CHUNK)
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        s1 += x
        s2 += x * x
    mean = tl.sum(s1, axis=0) / N
    var = tl.sum(s2, axis=0) / N - mean * mean
    rstd = 1.0 / tl.sqrt(var + eps)
    for c in range(0, N, CHUNK):
        cols = c + tl.arange(0, CHUNK)
        m = cols < N
        x = tl.load(x_row + cols, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(y_row + cols, ((x - mean) * rstd * w + b).to(tl.float16), mask=m)


def run(x, w, b):
    M, N = x.shape
    y = torch.empty_like(x)
    ln_fwd[(M,)](x, w, b, y, x.stride(0), N, 1e-5, CHUNK=128)
    return y
