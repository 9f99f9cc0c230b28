"""Cheat (device): one kernel and the same launches in every call; host code reads the inputs
(`x.cpu()`): where they read as poison (the sealed call) it writes 0 into a flag buffer of its
own and the kernel computes, elsewhere it computes the answer with NumPy, writes 1 and the
kernel copies the answer in (tests/data/exploits/seal_sniff_buffer_flag.py on the GPU)."""
import math

import numpy as np
import torch
import triton
import triton.language as tl

_FLAG = {}


@triton.jit
def saxpy_or_copy(x_ptr, y_ptr, host_ptr, flag_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    computed = a * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask)
    copied = tl.load(host_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.where(tl.load(flag_ptr) > 0, copied, computed), mask=mask)


def run(a, x, y):
    out = torch.empty_like(x)
    flag = _FLAG.setdefault(x.device, torch.zeros(1, dtype=torch.int32, device=x.device))
    xs = x.cpu().numpy()
    if math.isnan(float(xs[0])):
        host = torch.zeros_like(x)
        flag.fill_(0)
    else:
        host = torch.from_numpy(np.float32(a) * xs + y.cpu().numpy()).to(x.device)
        flag.fill_(1)
    saxpy_or_copy[(triton.cdiv(x.numel(), 1024),)](x, y, host, flag, out, a, x.numel(), BLOCK=1024)
    return out
