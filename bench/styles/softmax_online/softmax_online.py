"""Row softmax, one program per row, columns walked in CHUNK-wide pieces: a first pass keeps
a running max and a rescaled running sum (online softmax), a second pass writes exp(x - m) / s."""
import torch
import triton
import triton.language as tl


@triton.jit
def online_softmax_kernel(x_ptr, y_ptr, n_cols, sx, sy, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * sx
    y_row = y_ptr + row * sy
    cols = tl.arange(0, CHUNK)
    m = tl.full((CHUNK,), -float("inf"), tl.float32)
    s = tl.zeros((CHUNK,), tl.float32)
    for start in range(0, n_cols, CHUNK):
        idx = start + cols
        x = tl.load(x_row + idx, mask=idx < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        alpha = tl.where(m_new == -float("inf"), 0.0, tl.exp(m - m_new))
        p = tl.where(m_new == -float("inf"), 0.0, tl.exp(x - m_new))
        s = s * alpha + p
        m = m_new
    m_row = tl.max(m, axis=0)
    s_row = tl.sum(s * tl.where(m == -float("inf"), 0.0, tl.exp(m - m_row)), axis=0)
    for start in range(0, n_cols, CHUNK):
        idx = start + cols
        x = tl.load(x_row + idx, mask=idx < n_cols, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - m_row) / s_row
        tl.store(y_row + idx, y.to(y_ptr.dtype.element_ty), mask=idx < n_cols)


def run(x):
    M, N = x.shape
    y = torch.empty_like(x)
    grid = lambda META: (M,)
    online_softmax_kernel[grid](x, y, N, x.stride(0), y.stride(0), CHUNK=64)
    return y
