"""saxpy through tensor descriptors (TMA on Hopper) whose block shape each autotune config sets
in its pre_hook: the static tier must specialize every config with its own block shape."""
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


def _set_block(nargs: dict) -> None:
    for name in ("x_desc", "y_desc", "o_desc"):
        nargs[name].block_shape = [nargs["BLOCK"]]


@triton.autotune(configs=[triton.Config({"BLOCK": 256}, num_warps=4, pre_hook=_set_block),
                          triton.Config({"BLOCK": 512}, num_warps=4, pre_hook=_set_block)],
                 key=["n"])
@triton.jit
def saxpy_desc_kernel(x_desc, y_desc, o_desc, a, n, BLOCK: tl.constexpr):
    start = tl.program_id(0) * BLOCK
    o_desc.store([start], a * x_desc.load([start]) + y_desc.load([start]))


def run(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    descs = [TensorDescriptor(t, [n], [1], [16]) for t in (x, y, out)]  # block set per config
    saxpy_desc_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](*descs, a, n)
    return out
