"""Naive GEMM launched through a small callable class; tile sizes are module constants
passed as keyword constexprs; K walked with `tl.range`."""
import torch
import triton
import triton.language as tl

TILE_ROWS = 32
TILE_COLS = 32
TILE_DEPTH = 32


@triton.jit
def gemm_while_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                      sam, sak, sbk, sbn, scm, scn,
                      BLK_A: tl.constexpr, BLK_B: tl.constexpr, BLK_C: tl.constexpr):
    pa = tl.program_id(0)
    pb = tl.program_id(1)
    offs_a = pa * BLK_A + tl.arange(0, BLK_A)
    offs_b = pb * BLK_B + tl.arange(0, BLK_B)
    offs_c = tl.arange(0, BLK_C)
    acc = tl.zeros((BLK_A, BLK_B), dtype=tl.float32)
    for k in tl.range(0, K, BLK_C):
        kk = k + offs_c
        x = tl.load(a_ptr + offs_a[:, None] * sam + kk[None, :] * sak,
                    mask=(offs_a[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tl.load(b_ptr + kk[:, None] * sbk + offs_b[None, :] * sbn,
                    mask=(kk[:, None] < K) & (offs_b[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
    tl.store(c_ptr + offs_a[:, None] * scm + offs_b[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(offs_a[:, None] < M) & (offs_b[None, :] < N))


class GemmLauncher:
    def __init__(self, warps=4):
        self.warps = warps

    def __call__(self, a, b):
        M, K = a.shape
        _, N = b.shape
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        grid = (triton.cdiv(M, TILE_ROWS), triton.cdiv(N, TILE_COLS))
        gemm_while_kernel[grid](a, b, c, M, N, K,
                                a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                c.stride(0), c.stride(1),
                                BLK_A=TILE_ROWS, BLK_B=TILE_COLS, BLK_C=TILE_DEPTH,
                                num_warps=self.warps)
        return c


_launch = GemmLauncher()


def run(a, b):
    return _launch(a, b)
