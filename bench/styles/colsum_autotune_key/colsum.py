"""Sum over dim 0 of an (M, N) matrix: each program owns BLOCK_N columns and walks the rows in
BLOCK_M chunks; autotuned on (M, N) with a pruner that drops tiles wider than the matrix."""
import torch
import triton
import triton.language as tl


def _prune(configs, named_args, **kwargs):
    n = named_args["N"]
    kept = [c for c in configs if c.kwargs["BLOCK_N"] <= max(16, triton.next_power_of_2(n))]
    return kept or configs[:1]


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=2),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4),
    ],
    key=["M", "N"],
    prune_configs_by={"early_config_prune": _prune},
)
@triton.jit
def colsum_kernel(x_ptr, out_ptr, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for m0 in range(0, M, BLOCK_M):
        rows = m0 + tl.arange(0, BLOCK_M)
        acc += tl.load(x_ptr + rows[:, None] * stride_m + cols[None, :],
                       mask=(rows[:, None] < M) & (cols[None, :] < N), other=0.0)
    tl.store(out_ptr + cols, tl.sum(acc, axis=0), mask=cols < N)


def run(x):
    M, N = x.shape
    out = torch.empty(N, device=x.device, dtype=x.dtype)
    colsum_kernel[lambda meta: (triton.cdiv(N, meta["BLOCK_N"]),)](x, out, M, N, x.stride(0))
    return out
