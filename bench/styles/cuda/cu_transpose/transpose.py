"""Host of transpose.cu through cuda-python's driver and NVRTC bindings (PTX, JIT-loaded)."""
import ctypes
import os

import torch
from cuda.bindings import driver as cu
from cuda.bindings import nvrtc

_KERNEL = None


def _unwrap(res):
    if res[0] != cu.CUresult.CUDA_SUCCESS and res[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"{res[0]}")
    return res[1:] if len(res) > 2 else (res[1] if len(res) == 2 else None)


def _kernel():
    global _KERNEL
    if _KERNEL is None:
        path = os.path.splitext(__file__)[0] + ".cu"
        with open(path, "rb") as f:
            src = f.read()
        _unwrap(cu.cuInit(0))
        major, minor = torch.cuda.get_device_capability()
        prog = _unwrap(nvrtc.nvrtcCreateProgram(src, b"transpose.cu", 0, [], []))
        arch = f"--gpu-architecture=compute_{major}{minor}".encode()
        _unwrap(nvrtc.nvrtcCompileProgram(prog, 1, [arch]))
        size = _unwrap(nvrtc.nvrtcGetPTXSize(prog))
        ptx = b" " * size
        _unwrap(nvrtc.nvrtcGetPTX(prog, ptx))
        module = _unwrap(cu.cuModuleLoadData(ptx))
        _KERNEL = _unwrap(cu.cuModuleGetFunction(module, b"transpose_tiled"))
    return _KERNEL


def run(x):
    rows, cols = x.shape
    out = torch.empty((cols, rows), device=x.device, dtype=x.dtype)
    grid = ((cols + 31) // 32, (rows + 31) // 32, 1)
    params = ((out.data_ptr(), x.data_ptr(), rows, cols),
              (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int))
    stream = cu.CUstream(torch.cuda.current_stream().cuda_stream)
    _unwrap(cu.cuLaunchKernel(_kernel(), *grid, 32, 8, 1, 0, stream, params, 0))
    return out
