"""Host of the plain CUDA `l2norm` kernel (`l2norm_plain.cu` beside it): y = normalize(x, dim=-1)
for rows of at most 16384 elements (the kernel's shared copy of a row).

`run(x)` compiles the `.cu` with NVRTC (once per process) and launches `l2norm_rows_plain` with
one 128-thread block per row on torch's current stream; x is made contiguous.
"""
from __future__ import annotations

from pathlib import Path

import torch

from experts import cudahost

EPS = 1e-12
BLOCK, ROW_MAX = 128, 16384  # the .cu's BLOCK and ROW_MAX
_SOURCE = Path(__file__).with_suffix(".cu")
_FUNCS: list = []


def run(x: torch.Tensor) -> torch.Tensor:
    if x.shape[-1] > ROW_MAX:
        raise ValueError(f"rows of {x.shape[-1]} elements: this kernel keeps at most {ROW_MAX}")
    if not _FUNCS:
        module = cudahost.compile_source(_SOURCE.read_text(), name=_SOURCE.name)
        _FUNCS.append(cudahost.get_function(module, "l2norm_rows_plain"))
    x = x.contiguous()
    rows, n = x.shape
    y = torch.empty_like(x)
    cudahost.launch(_FUNCS[0], rows, BLOCK, 0, [x, y, n, EPS], torch.cuda.current_stream())
    return y
