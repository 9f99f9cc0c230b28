"""Host of gemm_epilogue.cu with the project's NVRTC helper: alpha 1.5, beta -0.5, written over
a copy of C; 32x16 threads a block."""
from pathlib import Path

import torch

from experts import cudahost

_k = {}


def run(a, b, c, bias):
    if "f" not in _k:
        src = Path(__file__).with_suffix(".cu").read_text()
        _k["f"] = cudahost.get_function(cudahost.compile_source(src), "gemm_epilogue")
    a, b, bias = a.contiguous(), b.contiguous(), bias.contiguous()
    m, k = a.shape
    n = b.shape[1]
    out = c.contiguous().clone()
    cudahost.launch(_k["f"], ((n + 31) // 32, (m + 31) // 32), (32, 16), 0,
                    (m, n, k, 1.5, a, b, -0.5, out, bias), torch.cuda.current_stream().cuda_stream)
    return out
