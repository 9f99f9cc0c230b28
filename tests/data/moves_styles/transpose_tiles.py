"""Case transpose. out = x^T: each program loads a (TR, TC) tile of x and stores it
`tl.trans`ed at the mirrored tile of out."""
import torch
import triton
import triton.language as tl


@triton.jit
def transpose2d(x_ptr, o_ptr, R, C, sx, so, TR: tl.constexpr, TC: tl.constexpr):
    r = tl.program_id(0) * TR + tl.arange(0, TR)
    c = tl.program_id(1) * TC + tl.arange(0, TC)
    tile = tl.load(x_ptr + r[:, None] * sx + c[None, :], mask=(r[:, None] < R) & (c[None, :] < C))
    tl.store(o_ptr + c[:, None] * so + r[None, :], tl.trans(tile), mask=(c[:, None] < C) & (r[None, :] < R))


def run(x):
    R, C = x.shape
    out = torch.empty((C, R), device=x.device, dtype=x.dtype)
    transpose2d[(triton.cdiv(R, 32), triton.cdiv(C, 16))](x, out, R, C, x.stride(0), out.stride(0), TR=32, TC=16)
    return out
