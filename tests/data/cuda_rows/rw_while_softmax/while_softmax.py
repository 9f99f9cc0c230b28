"""Host of while_softmax.cu through the project's NVRTC helper: one block of 256 per row, the tree's slots in dynamic shared memory."""
from pathlib import Path

import torch

from experts import cudahost

_fn = []


def run(x):
    if not _fn:
        compiled = cudahost.compile_source(Path(__file__).with_suffix(".cu").read_text())
        _fn.append(cudahost.get_function(compiled, "softmax_rows"))
    x = x.contiguous()
    y = torch.empty_like(x)
    threads = 256
    cudahost.launch(_fn[0], x.shape[0], threads, threads * 4, (x, y, x.shape[1]),
                    torch.cuda.current_stream().cuda_stream)
    return y
