import torch
import triton
import triton.language as tl

BLOCK = 32


@triton.jit
def bmm_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
               sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
               BLOCK: tl.constexpr):
    # grid: (row tiles, column tiles, batch)
    batch = tl.program_id(2)
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    offs_k = tl.arange(0, BLOCK)
    a_base = a_ptr + batch * sab
    b_base = b_ptr + batch * sbb
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK)):
        kk = k * BLOCK + offs_k
        a_tile = tl.load(a_base + offs_m[:, None] * sam + kk[None, :] * sak,
                         mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0)
        b_tile = tl.load(b_base + kk[:, None] * sbk + offs_n[None, :] * sbn,
                         mask=(kk[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a_tile, b_tile)
    c_ptrs = c_ptr + batch * scb + offs_m[:, None] * scm + offs_n[None, :] * scn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def run(a, b):
    nb, M, K = a.shape
    N = b.shape[2]
    c = torch.empty(nb, M, N, device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, BLOCK), triton.cdiv(N, BLOCK), nb)
    bmm_kernel[grid](a, b, c, M, N, K,
                     a.stride(0), a.stride(1), a.stride(2),
                     b.stride(0), b.stride(1), b.stride(2),
                     c.stride(0), c.stride(1), c.stride(2),
                     BLOCK=BLOCK, num_warps=4)
    return c
