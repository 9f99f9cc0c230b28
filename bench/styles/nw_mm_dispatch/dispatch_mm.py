"""C = A @ B with two kernels the host picks between by the row count: a skinny one (every row
in one tile, a 1-D grid over column tiles) and a tiled one whose indices are 64-bit and clamped
with tl.minimum, the K tail zeroed by tl.where after unmasked loads."""
import torch
import triton
import triton.language as tl


@triton.jit
def skinny_mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
              ROWS: tl.constexpr, COLS: tl.constexpr, DEPTH: tl.constexpr):
    col0 = tl.program_id(0) * COLS
    r = tl.arange(0, ROWS)
    c = col0 + tl.arange(0, COLS)
    d = tl.arange(0, DEPTH)
    acc = tl.zeros((ROWS, COLS), dtype=tl.float32)
    for k0 in range(0, K, DEPTH):
        a = tl.load(a_ptr + r[:, None] * sam + (k0 + d)[None, :] * sak,
                    mask=(r[:, None] < M) & (k0 + d[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + d)[:, None] * sbk + c[None, :] * sbn,
                    mask=(k0 + d[:, None] < K) & (c[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + r[:, None] * scm + c[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(r[:, None] < M) & (c[None, :] < N))


@triton.jit
def tiled_mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1).to(tl.int64)
    rm = i * BM + tl.arange(0, BM)
    rn = j * BN + tl.arange(0, BN)
    am = tl.minimum(rm, M - 1)
    bn = tl.minimum(rn, N - 1)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        kc = tl.minimum(kk, K - 1)
        a = tl.load(a_ptr + am[:, None] * sam + kc[None, :] * sak)
        b = tl.load(b_ptr + kc[:, None] * sbk + bn[None, :] * sbn)
        a = tl.where(kk[None, :] < K, a, 0.0)
        b = tl.where(kk[:, None] < K, b, 0.0)
        acc += tl.dot(a.to(b_ptr.dtype.element_ty), b.to(b_ptr.dtype.element_ty))
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    strides = (a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    if M <= 16:
        skinny_mm[(triton.cdiv(N, 64),)](a, b, c, M, N, K, *strides, ROWS=16, COLS=64, DEPTH=32)
    else:
        tiled_mm[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, *strides,
                                                          BM=32, BN=32, BK=32)
    return c
