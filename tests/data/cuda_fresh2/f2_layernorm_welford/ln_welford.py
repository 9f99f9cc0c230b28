"""Host of ln_welford.cu with the project's NVRTC helper: a block of 128 threads a row."""
from pathlib import Path

import torch

from experts import cudahost

_k = {}


def run(x, weight, bias):
    if "f" not in _k:
        src = Path(__file__).with_suffix(".cu").read_text()
        _k["f"] = cudahost.get_function(cudahost.compile_source(src), "ln_welford")
    x = x.contiguous()
    rows, cols = x.shape
    y = torch.empty_like(x)
    cudahost.launch(_k["f"], rows, 128, 0, (x, weight.contiguous(), bias.contiguous(), y, cols),
                    torch.cuda.current_stream().cuda_stream)
    return y
