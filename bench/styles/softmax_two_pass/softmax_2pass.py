"""Row softmax for rows longer than one tile: an online (max, sum) pass over CHUNK-wide pieces,
then a second pass that writes exp(x - max) / sum. Launched through a functools.partial."""
import functools

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_chunked(inp, outp, n_cols, in_stride, out_stride, CHUNK: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    src = inp + r * in_stride
    dst = outp + r * out_stride
    run_max = tl.full((CHUNK,), float("-inf"), tl.float32)
    run_sum = tl.zeros((CHUNK,), tl.float32)
    for c0 in tl.range(0, n_cols, CHUNK):
        idx = c0 + tl.arange(0, CHUNK)
        v = tl.load(src + idx, mask=idx < n_cols, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(run_max, v)
        safe = tl.where(new_max == float("-inf"), 0.0, new_max)
        run_sum = run_sum * tl.exp(run_max - safe) + tl.exp(v - safe)
        run_max = new_max
    row_max = tl.max(run_max, axis=0)
    row_sum = tl.sum(run_sum * tl.exp(run_max - row_max), axis=0)
    for c0 in tl.range(0, n_cols, CHUNK):
        idx = c0 + tl.arange(0, CHUNK)
        v = tl.load(src + idx, mask=idx < n_cols, other=float("-inf")).to(tl.float32)
        tl.store(dst + idx, (tl.exp(v - row_max) / row_sum).to(outp.dtype.element_ty), mask=idx < n_cols)


def _launch(x, y, chunk, warps):
    rows, cols = x.shape
    softmax_chunked[(rows,)](x, y, cols, x.stride(0), y.stride(0), CHUNK=chunk, num_warps=warps)
    return y


launch_softmax = functools.partial(_launch, chunk=128, warps=4)


def run(x):
    y = torch.empty_like(x)
    return launch_softmax(x, y)
