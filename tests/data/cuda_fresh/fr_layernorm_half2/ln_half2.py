"""Host of ln_half2.cu through the project's NVRTC helper: 128 threads (4 rows) per block,
at most 8 blocks, the rows beyond walked by the kernel's grid-stride loop."""
from pathlib import Path

import torch

from experts import cudahost

EPS = 1e-5
_fn = []


def run(x, weight, bias):
    if not _fn:
        compiled = cudahost.compile_source(Path(__file__).with_suffix(".cu").read_text())
        _fn.append(cudahost.get_function(compiled, "ln_fwd_half2"))
    m, n = x.shape
    if n % 2:
        raise ValueError("ln_fwd_half2 reads half2: the width must be even")
    x = x.contiguous()
    y = torch.empty_like(x)
    grid = min(8, (m + 3) // 4)
    cudahost.launch(_fn[0], grid, 128, 0, (x, weight, bias, y, m, n, EPS),
                    torch.cuda.current_stream().cuda_stream)
    return y
