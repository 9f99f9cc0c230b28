"""softmax over dim 1 of a (rows, cols) fp32 tensor whose rows are far too long for one block:
one program per row, an online pass for the running max and sum, then a pass that writes."""
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    m = tl.full((BLOCK,), -1e30, tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-1e30)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.where(cols < n_cols, tl.exp(x - m_new), 0.0)
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - row_max), axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0)
        tl.store(y_row + cols, tl.exp(x - row_max) / total, mask=cols < n_cols)


def run(x):
    x = x.contiguous()
    rows, cols = x.shape
    y = torch.empty_like(x)
    softmax_rows[(rows,)](x, y, cols, BLOCK=1024, num_warps=4)
    return y
