"""sum over hidden units of relu-free x @ w.T / d, summed inside the GEMM's epilogue: each
program adds its tile's row sums to the output with an atomic add."""
import torch
import triton
import triton.language as tl


@triton.jit
def gemm_rowsum(x, w, y, rows, hidden, depth, d, TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr):
    i = tl.program_id(0) * TM + tl.arange(0, TM)
    j = tl.program_id(1) * TN + tl.arange(0, TN)
    total = tl.zeros((TM, TN), tl.float32)
    for k0 in range(0, depth, TK):
        kk = k0 + tl.arange(0, TK)
        xt = tl.load(x + i[:, None] * depth + kk[None, :], mask=(i[:, None] < rows) & (kk[None, :] < depth), other=0.0)
        wt = tl.load(w + j[:, None] * depth + kk[None, :], mask=(j[:, None] < hidden) & (kk[None, :] < depth), other=0.0)
        total += tl.dot(xt, tl.trans(wt))
    tl.atomic_add(y + i, tl.sum(total / d, axis=1), mask=i < rows)


def run(x, w, d):
    rows, depth = x.shape
    hidden = w.shape[0]
    y = torch.zeros((rows,), device=x.device, dtype=torch.float32)
    gemm_rowsum[(triton.cdiv(rows, 16), triton.cdiv(hidden, 16))](
        x, w.contiguous(), y, rows, hidden, depth, d, TM=16, TN=16, TK=32)
    return y
