"""Case segsum. One program per segment of a CSR offsets array: a `while` loop over the
segment's chunks between its start and end offsets, accumulating a vector and summing once."""
import torch
import triton
import triton.language as tl


@triton.jit
def seg_sum(x_ptr, off_ptr, out_ptr, CH: tl.constexpr):
    seg = tl.program_id(0)
    lo = tl.load(off_ptr + seg)
    hi = tl.load(off_ptr + seg + 1)
    acc = tl.zeros((CH,), dtype=tl.float32)
    pos = lo
    while pos < hi:
        idx = pos + tl.arange(0, CH)
        acc += tl.load(x_ptr + idx, mask=idx < hi, other=0.0)
        pos += CH
    tl.store(out_ptr + seg, tl.sum(acc, axis=0))


def run(x, offsets):
    n = offsets.numel() - 1
    out = torch.empty(n, device=x.device, dtype=x.dtype)
    seg_sum[(n,)](x, offsets, out, CH=64)
    return out
