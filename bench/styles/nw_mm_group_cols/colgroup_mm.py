"""C = A @ B on a 1-D grid whose tiles are grouped by hand along N (GROUP_N column blocks walk
the row blocks together); BK is chosen by `@triton.heuristics` from K; the K loop is a
`tl.range` with `loop_unroll_factor`; the grid is a lambda over the meta-parameters."""
import torch
import triton
import triton.language as tl


@triton.heuristics({"BK": lambda args: 64 if args["K"] % 64 == 0 else 32})
@triton.jit
def colgroup_matmul(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_N: tl.constexpr):
    pid = tl.program_id(0)
    n_m = tl.cdiv(M, BM)
    n_n = tl.cdiv(N, BN)
    width = GROUP_N * n_m
    g = pid // width
    first_n = g * GROUP_N
    gsize = tl.minimum(n_n - first_n, GROUP_N)
    pn = first_n + (pid % width) % gsize
    pm = (pid % width) // gsize
    om = pm * BM + tl.arange(0, BM)
    on = pn * BN + tl.arange(0, BN)
    ok = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, K, BK, loop_unroll_factor=2):
        a = tl.load(a_ptr + om[:, None] * s_am + (k + ok)[None, :] * s_ak,
                    mask=(om[:, None] < M) & ((k + ok)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + ok)[:, None] * s_bk + on[None, :] * s_bn,
                    mask=((k + ok)[:, None] < K) & (on[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + om[:, None] * s_cm + on[None, :] * s_cn, acc.to(tl.float16),
             mask=(om[:, None] < M) & (on[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = lambda META: (triton.cdiv(M, META["BM"]) * triton.cdiv(N, META["BN"]),)
    colgroup_matmul[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                          c.stride(0), c.stride(1), BM=32, BN=32, GROUP_N=2)
    return c
