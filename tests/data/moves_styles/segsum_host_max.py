"""Case segsum. A 2-D grid (segment, chunk): the chunk count read on the host from the
longest segment (`max(hi - lo ...)` over `offsets.tolist()`), each program adding its chunk's sum with
`tl.atomic_add`; a program past its segment's end returns at once."""
import torch
import triton
import triton.language as tl


@triton.jit
def seg_chunks(x_ptr, off_ptr, out_ptr, sx, CH: tl.constexpr):
    seg = tl.program_id(0)
    chunk = tl.program_id(1)
    lo = tl.load(off_ptr + seg)
    hi = tl.load(off_ptr + seg + 1)
    if chunk * CH >= hi - lo:
        return
    idx = lo + chunk * CH + tl.arange(0, CH)
    part = tl.sum(tl.load(x_ptr + idx * sx, mask=idx < hi, other=0.0), axis=0)
    tl.atomic_add(out_ptr + seg, part)


def run(x, offsets):
    n = offsets.numel() - 1
    out = torch.zeros(n, device=x.device, dtype=x.dtype)
    bounds = offsets.tolist()
    longest = max(hi - lo for lo, hi in zip(bounds[:-1], bounds[1:]))
    seg_chunks[(n, triton.cdiv(longest, 32))](x, offsets, out, x.stride(0), CH=32)
    return out
