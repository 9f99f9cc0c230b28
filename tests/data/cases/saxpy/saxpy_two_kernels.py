"""A correct Triton saxpy in two kernels for the gate's tests: `scale_kernel` writes a*x,
reading x `REPEAT` times over with volatile loads, which are neither merged nor hoisted (slow
on purpose), then `add_kernel` adds y. A profile of its
timed calls must find most of the GPU time in the first."""
import torch
import triton
import triton.language as tl

REPEAT = 32


@triton.jit
def scale_kernel(x_ptr, out_ptr, a, n, BLOCK: tl.constexpr, REPEAT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for r in range(REPEAT):
        acc += tl.load(x_ptr + offs, mask=mask, volatile=True)
    tl.store(out_ptr + offs, a * (acc / REPEAT), mask=mask)


@triton.jit
def add_kernel(y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


def run(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, 1024),)
    scale_kernel[grid](x, out, a, n, BLOCK=1024, REPEAT=REPEAT)
    add_kernel[grid](y, out, n, BLOCK=1024)
    return out
