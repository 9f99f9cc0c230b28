"""Expert Triton GEMM: C = A @ B for row-major A (M x K) and B (K x N), output in A's dtype.

One kernel, `matmul_kernel_tma_persistent`, run on every device and in the interpreter:
- a persistent grid: min(#SMs, #tiles) programs, each walking the tiles start, start + NUM_SMS,
  ... (flattened, so the next tile's loads overlap this tile's epilogue);
- GROUP_M-swizzled tile order, so GROUP_M row-tiles share each column-tile of B while in L2;
- tensor descriptors (TMA on Hopper): whole tiles fetched, zero-filled past the matrix edges;
- tensor-core `tl.dot` accumulating in fp32;
- autotuned tile sizes / warps / pipelining depth (num_stages), best-measured config first
  (bench/results/gemm.md: 128x256x64, 8 warps, 3 stages on an H200).
Under the interpreter (TRITON_INTERPRET=1) autotuning is pruned to the first config, so the CPU
runs exactly the config a pinned (de-autotuned) kernel runs on the device.
Tensor descriptors need 16-byte aligned row strides: `run` raises ValueError otherwise.
"""
from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

# The CPU interpreter runs every program in Python: autotuning there is pruned to one config.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# Programs of the persistent grid on a CPU (no SMs there): fewer than the small shapes' tiles,
# so each program walks more than one tile and the persistent loop is exercised.
CPU_PROGRAMS = 2


def _first_config_when_interpreted(configs: list[triton.Config], named_args: dict,
                                   **kwargs) -> list[triton.Config]:
    """The interpreter tries only the first (best-measured) config; the device tries them all."""
    return configs[:1] if INTERPRET else configs


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=4),
        triton.Config({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
        triton.Config({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=4),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8}, num_warps=8, num_stages=2),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=4),
    ],
    key=["M", "N", "K"],
    prune_configs_by={"early_config_prune": _first_config_when_interpreted},
)
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


def _cuda_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    # Device-side tensor descriptors live in a global scratch buffer Triton asks us for.
    return torch.empty(size, device="cuda", dtype=torch.int8)


def _cpu_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    # The interpreter asks for the same scratch buffer, in host memory.
    return torch.empty(size, device="cpu", dtype=torch.int8)


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    """SM count of a CUDA device, cached: run() is on the timed path."""
    return torch.cuda.get_device_properties(index).multi_processor_count


def _programs(t: torch.Tensor) -> int:
    """Size of the persistent grid's program pool for `t`'s device."""
    if t.device.type != "cuda":
        return CPU_PROGRAMS
    return _sm_count(t.device.index if t.device.index is not None else torch.cuda.current_device())


def _check_operands(a: torch.Tensor, b: torch.Tensor) -> None:
    """Raise ValueError for operands the kernel cannot take (see `run`)."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"expected A (M, K) and B (K, N), got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise ValueError(f"A and B must share a dtype, got {a.dtype} and {b.dtype}")
    esize = a.element_size()
    if (a.shape[1] * esize) % 16 or (b.shape[1] * esize) % 16:
        raise ValueError(f"tensor descriptors need rows of a multiple of 16 bytes: K={a.shape[1]}, "
                         f"N={b.shape[1]} of {esize}-byte {a.dtype} are not")


def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B in A's dtype (fp32 accumulation); same signature and output as the case's
    reference. Raises ValueError unless A is (M, K) and B (K, N) of one dtype with K and N
    multiples of 16 bytes' worth of elements (rows a tensor descriptor can address)."""
    _check_operands(a, b)
    # Dense rows: a no-op for the case's inputs; fresh tensors are 16-byte aligned as TMA needs.
    a = a.contiguous()
    b = b.contiguous()
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    triton.set_allocator(_cuda_scratch if a.device.type == "cuda" else _cpu_scratch)
    num_sms = _programs(a)

    def grid(meta: dict) -> tuple[int]:
        tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
        return (min(num_sms, tiles),)

    matmul_kernel_tma_persistent[grid](a, b, c, M, N, K, NUM_SMS=num_sms)
    return c
