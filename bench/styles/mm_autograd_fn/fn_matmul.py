"""Matmul as an autograd Function (forward only). The kernel accumulates with tl.dot's acc= keyword."""
import torch
import triton
import triton.language as tl


@triton.jit
def matmul_fwd_kernel(x_ptr, y_ptr, z_ptr, M, N, K,
                      sxm, sxk, syk, syn, szm, szn,
                      TILE_M: tl.constexpr, TILE_N: tl.constexpr, TILE_K: tl.constexpr):
    row_blk = tl.program_id(0)
    col_blk = tl.program_id(1)
    rows = row_blk * TILE_M + tl.arange(0, TILE_M)
    cols = col_blk * TILE_N + tl.arange(0, TILE_N)
    ks = tl.arange(0, TILE_K)
    x_tile_ptrs = x_ptr + rows[:, None] * sxm + ks[None, :] * sxk
    y_tile_ptrs = y_ptr + ks[:, None] * syk + cols[None, :] * syn
    accumulator = tl.zeros((TILE_M, TILE_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, TILE_K)):
        remaining = K - kb * TILE_K
        x_tile = tl.load(x_tile_ptrs, mask=(rows[:, None] < M) & (ks[None, :] < remaining), other=0.0)
        y_tile = tl.load(y_tile_ptrs, mask=(ks[:, None] < remaining) & (cols[None, :] < N), other=0.0)
        accumulator = tl.dot(x_tile, y_tile, acc=accumulator)
        x_tile_ptrs += TILE_K * sxk
        y_tile_ptrs += TILE_K * syk
    z_ptrs = z_ptr + rows[:, None] * szm + cols[None, :] * szn
    tl.store(z_ptrs, accumulator.to(z_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


class TritonMatmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        M, K = x.shape
        _, N = y.shape
        z = torch.empty((M, N), device=x.device, dtype=x.dtype)

        def grid(META):
            return (triton.cdiv(M, META["TILE_M"]), triton.cdiv(N, META["TILE_N"]))

        matmul_fwd_kernel[grid](x, y, z, M, N, K,
                                x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                                z.stride(0), z.stride(1),
                                TILE_M=32, TILE_N=32, TILE_K=32)
        return z


def run(a, b):
    return TritonMatmul.apply(a, b)
