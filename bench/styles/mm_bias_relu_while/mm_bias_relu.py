"""relu(A @ B + bias). Axis 0 of the grid walks column tiles, axis 1 row tiles; the K walk is a
while loop; launch parameters live in a module-level config dict."""
import torch
import triton
import triton.language as tl


@triton.jit
def fused_linear_relu(A, B, Bias, C, M, N, K, sam, sak, sbk, sbn, scm, scn,
                      X: tl.constexpr, Y: tl.constexpr, Z: tl.constexpr):
    col_blk = tl.program_id(0)
    row_blk = tl.program_id(1)
    i = row_blk * X + tl.arange(0, X)
    j = col_blk * Y + tl.arange(0, Y)
    t = tl.arange(0, Z)
    s = tl.zeros((X, Y), dtype=tl.float32)
    k0 = 0
    while k0 < K:
        kk = k0 + t
        lhs = tl.load(A + i[:, None] * sam + kk[None, :] * sak, mask=(i[:, None] < M) & (kk[None, :] < K), other=0.0)
        rhs = tl.load(B + kk[:, None] * sbk + j[None, :] * sbn, mask=(kk[:, None] < K) & (j[None, :] < N), other=0.0)
        s += tl.dot(lhs, rhs)
        k0 += Z
    bias = tl.load(Bias + j, mask=j < N, other=0.0).to(tl.float32)
    s = tl.maximum(s + bias[None, :], 0.0)
    tl.store(C + i[:, None] * scm + j[None, :] * scn, s.to(C.dtype.element_ty), mask=(i[:, None] < M) & (j[None, :] < N))


CONFIG = {"X": 32, "Y": 32, "Z": 32, "num_warps": 4}


def run(a, b, bias):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(N, CONFIG["Y"]), triton.cdiv(M, CONFIG["X"]))
    fused_linear_relu[grid](a, b, bias, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                            c.stride(0), c.stride(1), **CONFIG)
    return c
