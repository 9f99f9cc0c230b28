"""Host of the tensor-core tiled CUDA C++ GEMM (`gemm_cuda_tiles.cu`): C = A @ B, row-major.

`run(a, b)` compiles the `.cu` beside this file with NVRTC (once per process) and launches
`gemm_tiles_bf16` or `gemm_tiles_fp16` on a (N / 128, M / 128) grid of 256-thread blocks. Any
M, N, K; A and B are made contiguous. Torch only allocates the output and hands over pointers
and the current stream.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch

SOURCE_PATH = Path(__file__).with_suffix(".cu")
TILE_M, TILE_N, THREADS = 128, 128, 256  # the .cu's TILE_M, TILE_N, THREADS
_SUFFIX = {torch.bfloat16: "bf16", torch.float16: "fp16"}
_FUNCS: dict[str, Any] = {}


def _cudahost() -> Any:
    """experts/cudahost.py, imported by path when this module runs from a copy outside the
    package (the gate copies a candidate with its host into a scratch folder)."""
    name = "experts.cudahost"
    if name in sys.modules:
        return sys.modules[name]
    try:
        import experts.cudahost as module  # noqa: PLC0415
        return module
    except ImportError:
        path = Path(__file__).resolve().parents[1] / "cudahost.py"
        spec = importlib.util.spec_from_file_location("klineage_cudahost", path)
        if spec is None or spec.loader is None:
            raise
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
        return module


def _func(dtype: torch.dtype) -> Any:
    name = f"gemm_tiles_{_SUFFIX[dtype]}"
    if name not in _FUNCS:
        host = _cudahost()
        _FUNCS[name] = host.get_function(host.compile_source(SOURCE_PATH.read_text(),
                                                             name=SOURCE_PATH.name), name)
    return _FUNCS[name]


def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B in A's dtype (bf16 or fp16), fp32 accumulation."""
    if a.dtype not in _SUFFIX or b.dtype != a.dtype:
        raise ValueError(f"A and B must both be bf16 or fp16, got {a.dtype} and {b.dtype}")
    a, b = a.contiguous(), b.contiguous()
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    grid = ((n + TILE_N - 1) // TILE_N, (m + TILE_M - 1) // TILE_M)
    _cudahost().launch(_func(a.dtype), grid, THREADS, 0, [a, b, c, m, n, k],
                       torch.cuda.current_stream(a.device))
    return c
