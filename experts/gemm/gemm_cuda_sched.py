"""Host of the tutorial-style CUDA C++ GEMM on the `gemm-schedule` expert schedule
(`gemm_cuda_sched.cu`: ldmatrix + mma.sync; `gemm_cuda_sched_wgmma.cu`, whose host is this
module under that name: wgmma, sm_90a): C = A @ B, row-major, bf16 or fp16.

`run(a, b)` compiles the `.cu` of this module's own stem with NVRTC (once per process) and
launches `gemm_sched_bf16` or `gemm_sched_fp16` on a (N / 128, M / 128) grid of 256-thread
blocks (the kernels' persistent loop takes any grid). Any M, N, K; A and B are made contiguous.
Torch only allocates the output and hands over pointers and the current stream.
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


def _host() -> Any:
    """experts/cudahost.py (by path when this module runs from a scratch copy)."""
    try:
        from experts import cudahost  # noqa: PLC0415
    except ImportError:
        path = Path(__file__).resolve().parents[1] / "cudahost.py"
        spec = importlib.util.spec_from_file_location("experts.cudahost", path)
        cudahost = importlib.util.module_from_spec(spec)
        sys.modules["experts.cudahost"] = cudahost
        spec.loader.exec_module(cudahost)
    return cudahost


def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B in A's dtype (bf16 or fp16), fp32 accumulation."""
    if a.dtype not in _SUFFIX or b.dtype != a.dtype:
        raise ValueError(f"A and B must both be bf16 or fp16, got {a.dtype} and {b.dtype}")
    a, b = a.contiguous(), b.contiguous()
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    name = f"gemm_sched_{_SUFFIX[a.dtype]}"
    host = _host()
    if name not in _FUNCS:
        _FUNCS[name] = host.get_function(host.compile_source(SOURCE_PATH.read_text(),
                                                             name=SOURCE_PATH.name), name)
    grid = ((n + TILE_N - 1) // TILE_N, (m + TILE_M - 1) // TILE_M)
    host.launch(_FUNCS[name], grid, THREADS, 0, [a, b, c, m, n, k], torch.cuda.current_stream(a.device))
    return c
