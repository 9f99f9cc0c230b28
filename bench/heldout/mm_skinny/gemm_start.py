"""GEMM for contiguous row-major operands; strides are derived inside the kernel."""
import torch
import triton
import triton.language as tl

TILE_M = 32
TILE_N = 32
TILE_K = 32


@triton.jit
def gemm(x, w, y, M, N, K, TILE_M: tl.constexpr, TILE_N: tl.constexpr, TILE_K: tl.constexpr):
    row0 = tl.program_id(0) * TILE_M
    col0 = tl.program_id(1) * TILE_N
    rows = row0 + tl.arange(0, TILE_M)
    cols = col0 + tl.arange(0, TILE_N)
    ks = tl.arange(0, TILE_K)
    row_ok = rows < M
    col_ok = cols < N
    total = tl.zeros([TILE_M, TILE_N], tl.float32)
    for kk in range(0, tl.cdiv(K, TILE_K)):
        k_idx = kk * TILE_K + ks
        k_ok = k_idx < K
        x_tile = tl.load(x + rows[:, None] * K + k_idx[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w_tile = tl.load(w + k_idx[:, None] * N + cols[None, :], mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        total += tl.dot(x_tile, w_tile)
    tl.store(y + rows[:, None] * N + cols[None, :], total.to(y.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])


class Gemm:
    """Launches `gemm` over a grid of TILE_M x TILE_N output tiles."""

    def __init__(self, tile_m=TILE_M, tile_n=TILE_N, tile_k=TILE_K, warps=4):
        self.tile_m, self.tile_n, self.tile_k, self.warps = tile_m, tile_n, tile_k, warps

    def __call__(self, x, w):
        x = x.contiguous()
        w = w.contiguous()
        M, K = x.shape
        N = w.shape[1]
        y = torch.empty(M, N, dtype=x.dtype, device=x.device)
        grid = ((M + self.tile_m - 1) // self.tile_m, (N + self.tile_n - 1) // self.tile_n)
        gemm[grid](x, w, y, M, N, K, TILE_M=self.tile_m, TILE_N=self.tile_n, TILE_K=self.tile_k,
                   num_warps=self.warps)
        return y


_GEMM = Gemm()


def run(a, b):
    return _GEMM(a, b)
