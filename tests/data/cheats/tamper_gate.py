"""Cheat: reaches into the gate's own modules in its process and neuters them."""
import sys

import torch
import triton
import triton.language as tl

for name, module in list(sys.modules.items()):
    if name == "gate" or name.startswith("gate."):
        for attr in ("compare", "relative_error", "check_call", "check_tamper", "encode", "encode_all"):
            if hasattr(module, attr):
                setattr(module, attr, lambda *args, **kwargs: None)


@triton.jit
def fill_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.full((BLOCK,), 0.0, tl.float32), mask=offs < n)


def run(a, x, y):
    out = torch.empty_like(x)
    fill_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
