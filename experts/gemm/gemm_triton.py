"""Expert Triton GEMM: C = A @ B for row-major A (M x K) and B (K x N), output in A's dtype.

Two kernels share one tiling scheme:
- `matmul_kernel`: one program per output tile, pointer loads, an unmasked fast path when K is a
  multiple of BLOCK_K (`EVEN_K`), masks only where a tile crosses the matrix edge.
- `matmul_kernel_tma_persistent`: a persistent grid (one program per SM walking the tiles) that
  loads through tensor descriptors (TMA on Hopper); used on Hopper when the strides suit TMA.
Both: autotuned tile sizes / warps / pipelining depth, GROUP_M-swizzled tile order for L2 reuse,
tensor-core `tl.dot` accumulating in fp32.
"""
from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

# The CPU interpreter runs every program in Python: one small config keeps it to seconds.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# Which kernel `run` uses on Hopper; chosen from measurements (bench/results/gemm.md).
USE_TMA_PERSISTENT = True


def _configs() -> list[triton.Config]:
    if INTERPRET:
        return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4},
                              num_warps=4, num_stages=1)]
    # (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): large tiles with 3-4 stages keep the
    # tensor cores fed on Hopper (each stage of 128x256x64 bf16 is 48 KiB of shared memory).
    shapes = [
        (128, 256, 64, 8, 3),
        (128, 256, 64, 8, 4),
        (256, 128, 64, 8, 3),
        (128, 128, 64, 8, 4),
        (64, 128, 64, 4, 4),
    ]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                          num_warps=w, num_stages=s) for bm, bn, bk, w, s in shapes]


def _prune_configs(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """Drop tiles far larger than the problem (they only add masked work), keep at least one."""
    m, n = named_args["M"], named_args["N"]
    kept = [c for c in configs
            if c.kwargs["BLOCK_M"] <= max(32, triton.next_power_of_2(m))
            and c.kwargs["BLOCK_N"] <= max(32, triton.next_power_of_2(n))]
    return kept or configs[-1:]


@triton.autotune(configs=_configs(), key=["M", "N", "K"],
                 prune_configs_by={"early_config_prune": _prune_configs})
@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, EVEN_K: tl.constexpr,
):
    # Grouped ordering: GROUP_M row-tiles share each column-tile of B while it is in L2.
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # Row/column offsets wrap modulo M/N so edge tiles load in-bounds rows; the store masks them.
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_am = tl.max_contiguous(tl.multiple_of(offs_am, BLOCK_M), BLOCK_M)
    offs_bn = tl.max_contiguous(tl.multiple_of(offs_bn, BLOCK_N), BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = accumulator.to(c_ptr.dtype.element_ty)

    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


def _tma_configs() -> list[triton.Config]:
    shapes = [
        (128, 256, 64, 8, 3),
        (128, 256, 64, 8, 4),
        (256, 128, 64, 8, 3),
        (256, 128, 64, 8, 4),
        (128, 256, 128, 8, 2),
        (128, 128, 64, 8, 4),
    ]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                          num_warps=w, num_stages=s) for bm, bn, bk, w, s in shapes]


@triton.autotune(configs=_tma_configs(), key=["M", "N", "K"])
@triton.jit
def matmul_kernel_tma_persistent(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
):
    # Tensor descriptors: the TMA engine fetches whole tiles (zero-filled past the edges).
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])

    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    num_pid_in_group = GROUP_M * num_pid_n

    # Persistent grid: each program walks tiles start_pid, start_pid + NUM_SMS, ...; flattening
    # lets the next tile's loads start while this tile's epilogue runs.
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):
        group_id = tile_id // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + (tile_id % group_size_m)
        pid_n = (tile_id % num_pid_in_group) // group_size_m
        offs_am = pid_m * BLOCK_M
        offs_bn = pid_n * BLOCK_N

        accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            offs_k = ki * BLOCK_K
            a = a_desc.load([offs_am, offs_k])
            b = b_desc.load([offs_k, offs_bn])
            accumulator = tl.dot(a, b, accumulator)
        c_desc.store([offs_am, offs_bn], accumulator.to(c_ptr.dtype.element_ty))


def _tma_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    # Device-side tensor descriptors live in a global scratch buffer Triton asks us for.
    return torch.empty(size, device="cuda", dtype=torch.int8)


@functools.lru_cache(maxsize=None)
def _device_info(index: int) -> tuple[int, int]:
    """(compute capability major, SM count) of a CUDA device; run() is on the timed path."""
    props = torch.cuda.get_device_properties(index)
    return props.major, props.multi_processor_count


def _device_index(t: torch.Tensor) -> int:
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


def _use_tma(a: torch.Tensor, b: torch.Tensor) -> bool:
    """TMA needs Hopper or newer and 16-byte aligned row strides and base addresses."""
    if INTERPRET or a.device.type != "cuda" or _device_info(_device_index(a))[0] < 9:
        return False
    esize = a.element_size()
    return (a.shape[1] * esize) % 16 == 0 and (b.shape[1] * esize) % 16 == 0 and \
        a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0


def _check_operands(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"expected A (M, K) and B (K, N), got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise ValueError(f"A and B must share a dtype, got {a.dtype} and {b.dtype}")


def matmul_tiled(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B through `matmul_kernel` (any strides, any shape)."""
    _check_operands(a, b)
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)

    def grid(meta: dict) -> tuple[int]:
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
    )
    return c


def matmul_tma_persistent(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B through `matmul_kernel_tma_persistent` (Hopper+, 16-byte aligned rows)."""
    _check_operands(a, b)
    a = a.contiguous()
    b = b.contiguous()
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    triton.set_allocator(_tma_scratch)
    num_sms = _device_info(_device_index(a))[1]

    def grid(meta: dict) -> tuple[int]:
        tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
        return (min(num_sms, tiles),)

    matmul_kernel_tma_persistent[grid](a, b, c, M, N, K, NUM_SMS=num_sms)
    return c


def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B in A's dtype (fp32 accumulation); same signature and output as the case's
    reference. Uses the TMA persistent kernel where `_use_tma` allows, else the tiled one."""
    if USE_TMA_PERSISTENT and _use_tma(a, b):
        return matmul_tma_persistent(a, b)
    return matmul_tiled(a, b)
