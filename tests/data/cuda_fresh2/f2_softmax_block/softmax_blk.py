"""Host of softmax_blk.cu with the project's NVRTC helper: a block of 256 threads a row, the
reduction buffer in dynamic shared memory (256 floats)."""
from pathlib import Path

import torch

from experts import cudahost

_k = {}
THREADS = 256


def run(x):
    if "f" not in _k:
        src = Path(__file__).with_suffix(".cu").read_text()
        _k["f"] = cudahost.get_function(cudahost.compile_source(src), "softmax_blk")
    x = x.contiguous()
    rows, cols = x.shape
    y = torch.empty_like(x)
    cudahost.launch(_k["f"], rows, THREADS, THREADS * 4, (x, y, cols),
                    torch.cuda.current_stream().cuda_stream)
    return y
