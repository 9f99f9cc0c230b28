"""Grouped GEMM: a 3-D grid of (row tile within the group, column tile, group)."""
import torch
import triton
import triton.language as tl


@triton.jit
def grouped_mm(a_ptr, b_ptr, out_ptr, offsets_ptr, N, K,
               stride_am, stride_bg, stride_bk, stride_om,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    tile = tl.program_id(0)
    col_tile = tl.program_id(1)
    group = tl.program_id(2)
    start = tl.load(offsets_ptr + group)
    end = tl.load(offsets_ptr + group + 1)
    if tile * BLOCK_M < end - start:
        rows = start + tile * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = col_tile * BLOCK_N + tl.arange(0, BLOCK_N)
        ks = tl.arange(0, BLOCK_K)
        row_mask = rows < end
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = tl.load(a_ptr + rows[:, None] * stride_am + (k0 + ks)[None, :],
                        mask=row_mask[:, None] & ((k0 + ks)[None, :] < K), other=0.0)
            b = tl.load(b_ptr + group * stride_bg + (k0 + ks)[:, None] * stride_bk + cols[None, :],
                        mask=((k0 + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc += tl.dot(a, b)
        tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :], acc.to(out_ptr.dtype.element_ty),
                 mask=row_mask[:, None] & (cols[None, :] < N))


def run(a, b, offsets):
    a = a.contiguous()
    b = b.contiguous()
    G, K, N = b.shape
    out = torch.empty(a.shape[0], N, dtype=a.dtype, device=a.device)
    bounds = offsets.tolist()
    largest = max(hi - lo for lo, hi in zip(bounds[:-1], bounds[1:]))
    BLOCK_M, BLOCK_N, BLOCK_K = 32, 32, 32
    grid = (triton.cdiv(largest, BLOCK_M), triton.cdiv(N, BLOCK_N), G)
    grouped_mm[grid](a, b, out, offsets, N, K, a.stride(0), b.stride(0), b.stride(1), out.stride(0),
                     BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=4)
    return out
