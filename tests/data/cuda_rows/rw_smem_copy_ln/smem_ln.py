"""Host of smem_ln.cu through the project's NVRTC helper: 128 threads (4 warps) per row, the
kernel compiled once per process and kept by name."""
from pathlib import Path

import torch

from experts import cudahost

KERNELS: dict = {}
SOURCE = Path(__file__).with_suffix(".cu")


def _kernel(name: str):  # noqa: ANN202
    if name not in KERNELS:
        KERNELS[name] = cudahost.get_function(cudahost.compile_source(SOURCE.read_text()), name)
    return KERNELS[name]


def run(x, weight, bias):
    rows, cols = x.shape
    out = torch.empty_like(x)
    stream = torch.cuda.current_stream().cuda_stream
    cudahost.launch(_kernel("ln_half_rows"), rows, 128, 0, (x.contiguous(), weight, bias, out, cols, 1e-5),
                    stream)
    return out
