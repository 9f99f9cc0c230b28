"""Cheat (CUDA host): launches a do-nothing kernel through cuLaunchKernel, then copies in an
answer computed on the host with NumPy."""
from pathlib import Path

import numpy as np
import torch

from experts import cudahost


def run(a, x, y):
    compiled = cudahost.compile_source(Path(__file__).with_suffix(".cu").read_text(), name="cuda_knockout.cu")
    func = cudahost.get_function(compiled, "touch")
    sink = torch.empty(1, device=x.device)
    cudahost.launch(func, 1, 32, 0, (x, sink, x.numel()), torch.cuda.current_stream())
    out = torch.empty_like(x)
    out.copy_(torch.from_numpy(np.float32(a) * x.cpu().numpy() + y.cpu().numpy()))
    return out
