"""Host of the register-row CUDA `l2norm` kernel launched narrow (`l2norm_narrow.cu` beside it): y = normalize(x,
dim=-1). `run(x)` compiles the `.cu` with NVRTC (once per process) and launches
`l2norm_rows_narrow` with one 256-thread block per row on torch's current stream; x is made
contiguous.
"""
from __future__ import annotations

from pathlib import Path

import torch

from experts import cudahost

EPS = 1e-12
THREADS = 256
_SOURCE = Path(__file__).with_suffix(".cu")
_FUNCS: list = []


def run(x: torch.Tensor) -> torch.Tensor:
    if not _FUNCS:
        module = cudahost.compile_source(_SOURCE.read_text(), name=_SOURCE.name)
        _FUNCS.append(cudahost.get_function(module, "l2norm_rows_narrow"))
    x = x.contiguous()
    rows, n = x.shape
    y = torch.empty_like(x)
    cudahost.launch(_FUNCS[0], rows, THREADS, 0, [x, y, n, EPS], torch.cuda.current_stream())
    return y
