import torch
import triton
import triton.language as tl


@triton.jit
def softmax_row(x_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols, other=-float("inf"))
    x = x.to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(y_ptr + row * y_row_stride + cols, (num / den).to(y_ptr.dtype.element_ty), mask=cols < n_cols)


def run(x):
    rows, cols = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    softmax_row[(rows,)](x, y, cols, x.stride(0), y.stride(0), BLOCK=block, num_warps=4)
    return y
