"""Host of layernorm.cu: y = layer_norm(x, (N,), weight, bias, eps=1e-5)."""
from pathlib import Path

import torch

from experts import cudahost

EPS = 1e-5
_here = Path(__file__).with_suffix(".cu")
_fn = []


def run(x, weight, bias):
    if not _fn:
        _fn.append(cudahost.get_function(cudahost.compile_source(_here.read_text(), name=_here.name),
                                         "layernorm_fwd"))
    M, N = x.shape
    y = torch.empty_like(x)
    cudahost.launch(_fn[0], M, 256, 0, [x, weight, bias, y, N, EPS], torch.cuda.current_stream())
    return y
