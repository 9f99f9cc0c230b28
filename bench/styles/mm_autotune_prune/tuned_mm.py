"""Autotuned GEMM whose config list is pruned by an early_config_prune hook before benchmarking."""
import torch
import triton
import triton.language as tl


def _drop_oversized(configs, named_args, **kwargs):
    m = named_args["M"]
    n = named_args["N"]
    kept = [c for c in configs if c.kwargs["BLK_M"] <= max(32, m) and c.kwargs["BLK_N"] <= max(32, n)]
    return kept or configs[:1]


@triton.autotune(
    configs=[
        triton.Config({"BLK_M": 32, "BLK_N": 32, "BLK_K": 32}, num_warps=4, num_stages=2),
        triton.Config({"BLK_M": 16, "BLK_N": 32, "BLK_K": 32}, num_warps=2, num_stages=2),
    ],
    key=["M", "N", "K"],
    prune_configs_by={"early_config_prune": _drop_oversized, "perf_model": None, "top_k": None},
)
@triton.jit
def tuned_mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                    BLK_M: tl.constexpr, BLK_N: tl.constexpr, BLK_K: tl.constexpr):
    pid = tl.program_id(0)
    grid_n = tl.cdiv(N, BLK_N)
    pm = pid // grid_n
    pn = pid % grid_n
    rm = pm * BLK_M + tl.arange(0, BLK_M)
    rn = pn * BLK_N + tl.arange(0, BLK_N)
    rk = tl.arange(0, BLK_K)
    acc = tl.zeros((BLK_M, BLK_N), dtype=tl.float32)
    for k in range(0, K, BLK_K):
        a = tl.load(a_ptr + rm[:, None] * sam + (k + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda META: (triton.cdiv(M, META["BLK_M"]) * triton.cdiv(N, META["BLK_N"]),)
    tuned_mm_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                          c.stride(0), c.stride(1))
    return c
