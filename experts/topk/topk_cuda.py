"""Host module of the CUDA `topk` expert (`topk_cuda.cu` beside it).

Compiles the `.cu` with NVRTC through `experts.cudahost` (once per row length, k and block
size: they are compile-time constants of the kernel) and launches one thread block per row on
torch's current stream. Torch only allocates the outputs and provides pointers. The loaded
kernel is kept per shape in this module, so a repeated call costs one launch and no hashing
of the source (the `.cu` is read when a shape is first launched).
"""
from __future__ import annotations

from pathlib import Path

import torch

from experts import cudahost

_SOURCE_PATH = Path(__file__).with_suffix(".cu")
KERNEL = "topk_radix_select"
MAX_KPOW2 = 4096  # the sort buffer is static shared memory: 8 bytes per slot
# Compile-time switches of the kernel (see the .cu for each default); the benchmark times each
# one off to check that it pays.
SWITCHES = {"aggregate": "TOPK_AGGREGATE", "early_exit": "TOPK_EARLY_EXIT", "warp_sync": "TOPK_WARP_SYNC"}
_FUNCTIONS: dict[tuple, object] = {}


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def defines(length: int, k: int, threads: int, vec: bool, **switches: bool) -> dict[str, int]:
    """The kernel's compile-time shape for rows of `length`, `k` winners, `threads` per block,
    plus any `SWITCHES` given (True/False)."""
    items = -(-length // threads)
    if vec:
        items = -(-items // 4) * 4
    unknown = set(switches) - set(SWITCHES)
    if unknown:
        raise ValueError(f"unknown switches {sorted(unknown)}; known: {sorted(SWITCHES)}")
    return {
        "TOPK_THREADS": threads,
        "TOPK_ITEMS": items,
        "TOPK_KPOW2": max(2, _next_pow2(k)),
        "TOPK_VEC": int(vec),
        **{SWITCHES[name]: int(on) for name, on in switches.items()},
    }


def compile_for(length: int, k: int, threads: int = 512, vec: bool = True,
                arch: str | None = None, **switches: bool) -> cudahost.Compiled:
    """NVRTC-compile the kernel for one shape (cached by cudahost); needs no GPU."""
    return cudahost.compile_source(
        _SOURCE_PATH.read_text(), name=_SOURCE_PATH.name, arch=arch,
        defines=defines(length, k, threads, vec, **switches),
    )


def launch(x: torch.Tensor, k: int, threads: int = 512,
           **switches: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Like `run`, with the block size and `SWITCHES` chosen by the caller (the benchmark
    sweeps them)."""
    if x.dim() != 2 or x.dtype != torch.float32 or not x.is_cuda:
        raise ValueError("expects a 2-D float32 CUDA tensor")
    rows, length = x.shape
    if not 0 < k <= length < 65536:
        raise ValueError(f"need 0 < k <= L < 65536, got k={k}, L={length}")
    if _next_pow2(k) > MAX_KPOW2:
        raise ValueError(f"k={k} exceeds the sort buffer ({MAX_KPOW2})")
    if x.stride(-1) != 1:
        x = x.contiguous()
    vec = length % 4 == 0 and x.stride(0) % 4 == 0 and x.data_ptr() % 16 == 0
    key = (length, k, threads, vec, x.device.index or 0, tuple(sorted(switches.items())))
    func = _FUNCTIONS.get(key)
    if func is None:
        compiled = compile_for(length, k, threads, vec, **switches)
        func = _FUNCTIONS[key] = cudahost.get_function(compiled, KERNEL)
    values = torch.empty((rows, k), device=x.device, dtype=x.dtype)
    indices = torch.empty((rows, k), device=x.device, dtype=torch.int64)
    if rows:
        cudahost.launch(func, rows, threads, 0, (x, values, indices, length, k, x.stride(0)),
                        torch.cuda.current_stream(x.device))
    return values, indices


def run(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.topk(x, k, dim=-1) for a 2-D float32 CUDA tensor: (values, int64 indices), sorted
    descending; tied values may be returned in any order."""
    threads = 512 if x.shape[-1] >= 4096 else 256
    return launch(x, k, threads)
