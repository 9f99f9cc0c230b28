"""Host of the CUDA `layernorm_bf16` expert (`layernorm_cuda.cu` beside it): y = layer_norm(x, (N,), w, b).

`run(x, w, b)` compiles the `.cu` with NVRTC (once per process) and launches `layernorm_rows`
with one 256-thread block per row on torch's current stream; the inputs are made contiguous.
"""
from __future__ import annotations

from pathlib import Path

import torch

from experts import cudahost

EPS = 1e-5
THREADS = 256  # the .cu's THREADS
_SOURCE = Path(__file__).with_suffix(".cu")
_FUNCS: list = []


def run(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if not _FUNCS:
        module = cudahost.compile_source(_SOURCE.read_text(), name=_SOURCE.name)
        _FUNCS.append(cudahost.get_function(module, "layernorm_rows"))
    x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
    rows, n = x.shape
    y = torch.empty_like(x)
    cudahost.launch(_FUNCS[0], rows, THREADS, 0, [x, w, b, y, n, EPS], torch.cuda.current_stream())
    return y
