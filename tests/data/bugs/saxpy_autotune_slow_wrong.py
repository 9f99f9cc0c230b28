"""A saxpy autotuned over two configurations: the fast one is right, the slow one (32-element
blocks, one warp) drops the last element of each block. The autotuner picks the fast one, so
the candidate's own calls are right; its slow configuration is wrong wherever it is picked."""
import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 1024, "SHORT": 0}, num_warps=4),
        triton.Config({"BLOCK": 32, "SHORT": 1}, num_warps=1),
    ],
    key=["n"],
)
@triton.jit
def saxpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr, SHORT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    val = a * x + y
    if SHORT:
        val = tl.where(tl.arange(0, BLOCK) == BLOCK - 1, 0.0, val)
    tl.store(out_ptr + offs, val, mask=mask)


def run(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    saxpy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, a, n)
    return out
