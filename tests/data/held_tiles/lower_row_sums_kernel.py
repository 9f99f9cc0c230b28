"""Row sums of the lower triangle: each program sums a block of rows over the columns up to
each row's index. Columns left of the block's first row are summed whole, up to the last whole
column block (`// BC * BC`); the rest, up to the block's last row, under the triangle's mask.
The launch grid counts row blocks through a host helper that reads the autotuner's tiles."""
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BR": 16, "BC": 16}, num_warps=2)],
                 key=["n_rows", "n_cols"])
@triton.jit
def lower_row_sums(x_ptr, out_ptr, n_rows, n_cols, stride,
                   BR: tl.constexpr, BC: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BR + tl.arange(0, BR)
    live = rows[:, None] < n_rows
    acc = tl.zeros([BR], dtype=tl.float32)
    whole = tl.minimum(pid * BR, n_cols) // BC * BC
    for c in range(0, whole, BC):
        cols = c + tl.arange(0, BC)
        v = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=live, other=0.0)
        acc += tl.sum(v.to(tl.float32), axis=1)
    for c in range(whole, tl.minimum(pid * BR + BR, n_cols), BC):
        cols = c + tl.arange(0, BC)
        keep = live & (cols[None, :] <= rows[:, None]) & (cols[None, :] < n_cols)
        v = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=keep, other=0.0)
        acc += tl.sum(v.to(tl.float32), axis=1)
    tl.store(out_ptr + rows, acc, mask=rows < n_rows)


def _programs(n_rows, meta):
    return (triton.cdiv(n_rows, meta["BR"]),)


def run(x):
    x = x.contiguous()
    n_rows, n_cols = x.shape
    out = torch.empty(n_rows, device=x.device, dtype=torch.float32)
    lower_row_sums[lambda meta: _programs(n_rows, meta)](x, out, n_rows, n_cols, x.stride(0))
    return out.to(x.dtype)
