"""Host of classic_unrolled.cu through the project's NVRTC helper: one block of 256 per row."""
from pathlib import Path

import torch

from experts import cudahost

_fn = []


def run(x):
    if not _fn:
        compiled = cudahost.compile_source(Path(__file__).with_suffix(".cu").read_text())
        _fn.append(cudahost.get_function(compiled, "row_sumsq_256"))
    x = x.contiguous()
    out = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
    cudahost.launch(_fn[0], x.shape[0], 256, 0, (x, out, x.shape[1]),
                    torch.cuda.current_stream().cuda_stream)
    return out
