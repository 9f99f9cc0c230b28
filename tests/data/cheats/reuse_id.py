"""Cheat: keeps its output keyed on the input tensors' `id()` (holding them alive so the ids
stay unique) and returns it again for the same tensor objects, whatever their values now."""
import torch
import triton
import triton.language as tl

_KEPT = {}


@triton.jit
def saxpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def run(a, x, y):
    key = (id(x), id(y))
    hit = _KEPT.get(key)
    if hit is not None and hit[0] is x and hit[1] is y:
        out = hit[2].clone()  # a fresh tensor each time: only its values are reused
        saxpy_kernel[(1,)](x, y, torch.empty_like(x), a, 0, BLOCK=1024)
        return out
    out = torch.empty_like(x)
    saxpy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, a, x.numel(), BLOCK=1024)
    _KEPT[key] = (x, y, out)
    return out
