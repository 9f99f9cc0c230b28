"""LayerNorm, one row per program, three walks over the row in chunks: the mean, then the
variance around it, then the normalized output; the row's offset is 64-bit and its 1/std is a
second output."""
import torch
import triton
import triton.language as tl


@triton.jit
def ln_three_pass(x_ptr, w_ptr, b_ptr, y_ptr, rstd_ptr, N, row_stride, eps,
                  CHUNK: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * row_stride
    cols = tl.arange(0, CHUNK)
    total = tl.zeros((CHUNK,), dtype=tl.float32)
    for start in range(0, N, CHUNK):
        c = start + cols
        total += tl.load(x_ptr + base + c, mask=c < N, other=0.0).to(tl.float32)
    mean = tl.sum(total, axis=0) / N
    sq = tl.zeros((CHUNK,), dtype=tl.float32)
    for start in range(0, N, CHUNK):
        c = start + cols
        v = tl.load(x_ptr + base + c, mask=c < N, other=0.0).to(tl.float32)
        d = tl.where(c < N, v - mean, 0.0)
        sq += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(sq, axis=0) / N + eps)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, N, CHUNK):
        c = start + cols
        m = c < N
        v = tl.load(x_ptr + base + c, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c, mask=m, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + c, mask=m, other=0.0).to(tl.float32)
        tl.store(y_ptr + base + c, ((v - mean) * rstd * w + b).to(tl.float16), mask=m)


def run(x, w, b):
    M, N = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty((M,), device=x.device, dtype=torch.float32)
    ln_three_pass[(M,)](x, w, b, y, rstd, N, x.stride(0), 1e-5, CHUNK=128, num_warps=4)
    return y, rstd
