"""Host module of the CUDA saxpy test kernel: NVRTC compile, cuLaunchKernel on torch's stream."""
from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from experts import cudahost

_SOURCE = Path(__file__).with_suffix(".cu")
THREADS = 256


def run(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    compiled = cudahost.compile_source(_SOURCE.read_text(), name=_SOURCE.name)
    func = cudahost.get_function(compiled, "saxpy")
    out = torch.empty_like(x)
    n = x.numel()
    cudahost.launch(func, (n + THREADS - 1) // THREADS, THREADS, 0,
                    (ctypes.c_float(a), x, y, out, n), torch.cuda.current_stream())
    return out
