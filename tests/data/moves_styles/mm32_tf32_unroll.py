"""Case mm32. C = A @ B with tf32 products; B read along N (row-major, as given); the K loop a
`tl.range(..., loop_unroll_factor=2)`; a pointer pair bumped each step."""
import torch
import triton
import triton.language as tl


@triton.jit
def mm_tf32(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    pa = A + rm[:, None] * sam + rk[None, :] * sak
    pb = B + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K, loop_unroll_factor=2):
        a = tl.load(pa, mask=(rm[:, None] < M) & (rk[None, :] + k < K), other=0.0)
        b = tl.load(pb, mask=(rk[:, None] + k < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="tf32")
        pa += BLOCK_K * sak
        pb += BLOCK_K * sbk
    tl.store(C + rm[:, None] * scm + rn[None, :] * scn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    mm_tf32[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, a.stride(0), a.stride(1),
                                                     b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                                                     BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    return c
