"""sum(x^2): stage 1 writes one partial per 256-element block into a host buffer of
cdiv(n, 256) entries; stage 2 (one program) adds the partials."""
import torch
import triton
import triton.language as tl


@triton.jit
def partial_sumsq(x_ptr, part_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(part_ptr + pid, tl.sum(v * v, axis=0))


@triton.jit
def finish_sum(part_ptr, out_ptr, n_parts, RBLOCK: tl.constexpr):
    acc = tl.zeros([RBLOCK], tl.float32)
    for i in range(0, n_parts, RBLOCK):
        idx = i + tl.arange(0, RBLOCK)
        acc += tl.load(part_ptr + idx, mask=idx < n_parts, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0))


def run(x):
    n = x.numel()
    n_parts = triton.cdiv(n, 256)
    parts = torch.empty(n_parts, device=x.device, dtype=torch.float32)
    out = torch.empty(1, device=x.device, dtype=torch.float32)
    partial_sumsq[(triton.cdiv(n, 256),)](x, parts, n, BLOCK=256)
    finish_sum[(1,)](parts, out, n_parts, RBLOCK=1024)
    return out
