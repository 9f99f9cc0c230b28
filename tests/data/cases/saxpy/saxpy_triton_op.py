"""A correct Triton saxpy written as PyTorch recommends for Triton kernels that torch.compile
can trace: its launchers are `torch.library.triton_op` operators that launch through
`torch.library.wrap_triton`. `scale` (a * x) allocates its output and launches `scale_kernel`;
`add` (s + y) does the same with `add_kernel`. Importing `triton_op` loads torch._dynamo (torch's
own rebinding of `torch.manual_seed` comes with it). Host code does nothing but allocate and
launch, inside the operators."""
import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton


@triton.jit
def scale_kernel(x_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def add_kernel(s_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(s_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


@triton_op("saxpy_triton_lib::scale", mutates_args=())
def scale(a: float, x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    wrap_triton(scale_kernel)[(triton.cdiv(n, 1024),)](x, out, a, n, BLOCK=1024)
    return out


@triton_op("saxpy_triton_lib::add", mutates_args=())
def add(s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(s)
    n = s.numel()
    wrap_triton(add_kernel)[(triton.cdiv(n, 1024),)](s, y, out, n, BLOCK=1024)
    return out


def run(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return add(scale(a, x), y)
