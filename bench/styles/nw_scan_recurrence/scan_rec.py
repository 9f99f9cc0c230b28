"""h[t] = a[t] * h[t-1] + x[t] for several rows per program: each chunk of time steps is
scanned with tl.associative_scan over (a, x) pairs with a jit combine function, and the state
carried into the next chunk; returns every state and the last one (two outputs)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _affine_compose(a_lo, b_lo, a_hi, b_hi):
    return a_hi * a_lo, a_hi * b_lo + b_hi


@triton.jit
def linear_scan(a_ptr, x_ptr, h_ptr, last_ptr, n_rows, T, stride_row,
                R: tl.constexpr, CHUNK: tl.constexpr):
    rows = tl.program_id(0) * R + tl.arange(0, R)
    steps = tl.arange(0, CHUNK)
    row_ok = rows < n_rows
    carry = tl.zeros((R,), dtype=tl.float32)
    for t0 in range(0, T, CHUNK):
        t = t0 + steps
        ok = row_ok[:, None] & (t[None, :] < T)
        offs = rows[:, None] * stride_row + t[None, :]
        a = tl.load(a_ptr + offs, mask=ok, other=1.0)
        x = tl.load(x_ptr + offs, mask=ok, other=0.0)
        a_run, b_run = tl.associative_scan((a, x), 1, _affine_compose)
        h = a_run * carry[:, None] + b_run
        tl.store(h_ptr + offs, h, mask=ok)
        carry = tl.sum(tl.where(t[None, :] == tl.minimum(t0 + CHUNK, T) - 1, h, 0.0), axis=1)
    tl.store(last_ptr + rows, carry, mask=row_ok)


def run(decay, x):
    B, T = x.shape
    h = torch.empty_like(x)
    last = torch.empty((B,), device=x.device, dtype=x.dtype)
    linear_scan[(triton.cdiv(B, 4),)](decay, x, h, last, B, T, x.stride(0), R=4, CHUNK=64,
                                      num_warps=4)
    return h, last
