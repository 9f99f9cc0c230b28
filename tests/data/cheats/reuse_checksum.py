"""Cheat: keys its kept outputs on the input buffers' addresses and shape plus a checksum of a
few elements of each input (first, middle, last), so that new values at those
places miss, and returns a kept output when the buffers and the few elements it reads repeat. It
reads those elements' bit patterns as integers, which the gate's check on host reads of device
floating-point values does not see, so that the reuse itself is what must be caught."""
import torch
import triton
import triton.language as tl

_KEPT = {}


@triton.jit
def saxpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _probe(t):
    n = t.numel()
    places = (0, n // 2, n - 1)
    return tuple(int(t.view(-1)[i:i + 1].view(torch.int32)) for i in places)


def run(a, x, y):
    key = (x.data_ptr(), y.data_ptr(), tuple(x.shape), a, _probe(x), _probe(y))
    if key in _KEPT:
        saxpy_kernel[(1,)](x, y, torch.empty_like(x), a, 0, BLOCK=1024)
        return _KEPT[key].clone()
    out = torch.empty_like(x)
    saxpy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, a, x.numel(), BLOCK=1024)
    _KEPT[key] = out
    return out
