"""Host of mm_tiled.cu (NVRTC through experts.cudahost); 32x32 threads per block."""
from pathlib import Path

import torch

from experts import cudahost

TILE = 32
_cu = Path(__file__).with_suffix(".cu")
_cache = {}


def _func():
    if "f" not in _cache:
        _cache["f"] = cudahost.get_function(cudahost.compile_source(_cu.read_text(), name=_cu.name),
                                            "matmul_tiled")
    return _cache["f"]


def run(a, b):
    a, b = a.contiguous(), b.contiguous()
    M, K = a.shape
    _, N = b.shape
    out = torch.empty(M, N, dtype=a.dtype, device=a.device)
    blocks = (_cdiv(N, TILE), _cdiv(M, TILE))
    cudahost.launch(_func(), blocks, (TILE, TILE), 0, [a, b, out, M, N, K],
                    torch.cuda.current_stream())
    return out


def _cdiv(x, y):
    return -(-x // y)
