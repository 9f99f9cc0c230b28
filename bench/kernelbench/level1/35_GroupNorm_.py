"""GroupNorm: the channels of each image fall into groups (as many as the weight has channels
over the group size, fixed by the problem: 8 groups); a group's values are contiguous, one
program per (image, group) computes their statistics and writes the affine result."""
import torch
import triton
import triton.language as tl

GROUPS = 8


@triton.jit
def group_norm(X, W, B, Y, C, HW, G, eps, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    g = pid % G
    cpg = C // G
    size = cpg * HW
    base = pid.to(tl.int64) * size
    acc = tl.zeros((BLOCK,), tl.float32)
    acc2 = tl.zeros((BLOCK,), tl.float32)
    for i in range(0, size, BLOCK):
        o = i + tl.arange(0, BLOCK)
        v = tl.load(X + base + o, mask=o < size, other=0.0)
        acc += v
        acc2 += v * v
    mean = tl.sum(acc, 0) / size
    var = tl.sum(acc2, 0) / size - mean * mean
    rstd = tl.rsqrt(var + eps)
    for i in range(0, size, BLOCK):
        o = i + tl.arange(0, BLOCK)
        m = o < size
        ch = g * cpg + o // HW
        v = tl.load(X + base + o, mask=m, other=0.0)
        w = tl.load(W + ch, mask=m, other=1.0)
        b = tl.load(B + ch, mask=m, other=0.0)
        tl.store(Y + base + o, (v - mean) * rstd * w + b, mask=m)


def run(x, weight, bias):
    x = x.contiguous()
    n, c = x.shape[0], x.shape[1]
    hw = x.numel() // (n * c)
    y = torch.empty_like(x)
    group_norm[(n * GROUPS,)](x, weight, bias, y, c, hw, GROUPS, 1e-5, BLOCK=1024, num_warps=4)
    return y
