"""Host of sum_shfl.cu with the project's NVRTC helper: 80 blocks of 256 threads."""
from pathlib import Path

import torch

from experts import cudahost

_k = {}


def run(x):
    if "f" not in _k:
        src = Path(__file__).with_suffix(".cu").read_text()
        _k["f"] = cudahost.get_function(cudahost.compile_source(src), "sum_shfl")
    total = torch.zeros(1, device=x.device, dtype=torch.float32)
    cudahost.launch(_k["f"], 80, 256, 0, (x.contiguous(), total, x.numel()),
                    torch.cuda.current_stream().cuda_stream)
    return total
