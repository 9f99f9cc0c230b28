"""Host of rms_vec4.cu with cuda-python: NVRTC to cubin, the driver API, 256 threads per row."""
import ctypes
from pathlib import Path

import torch
from cuda.bindings import driver, nvrtc

BLOCK = 256
_f = []


def _ok(result):
    if int(result[0]) != 0:
        raise RuntimeError(f"CUDA call failed: {result[0]}")
    return result[1] if len(result) == 2 else None


def _kernel():
    if not _f:
        _ok(driver.cuInit(0))
        dev = _ok(driver.cuDeviceGet(0))
        _ok(driver.cuCtxSetCurrent(_ok(driver.cuDevicePrimaryCtxRetain(dev))))
        prog = _ok(nvrtc.nvrtcCreateProgram(Path(__file__).with_suffix(".cu").read_bytes(),
                                            b"rms_vec4.cu", 0, [], []))
        opts = [b"--gpu-architecture=sm_90"]
        _ok(nvrtc.nvrtcCompileProgram(prog, len(opts), opts))
        cubin = b" " * _ok(nvrtc.nvrtcGetCUBINSize(prog))
        _ok(nvrtc.nvrtcGetCUBIN(prog, cubin))
        _f.append(_ok(driver.cuModuleGetFunction(_ok(driver.cuModuleLoadData(cubin)), b"rms_vec4")))
    return _f[0]


def run(x, w):
    x = x.contiguous()
    rows, n = x.shape
    if n % 4:
        raise ValueError("rms_vec4 reads rows as float4: the row length must be a multiple of 4")
    y = torch.empty_like(x)
    args = ((x.data_ptr(), w.contiguous().data_ptr(), y.data_ptr(), n, 1e-6),
            (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_float))
    _ok(driver.cuLaunchKernel(_kernel(), rows, 1, 1, BLOCK, 1, 1, 0,
                              driver.CUstream(torch.cuda.current_stream().cuda_stream), args, 0))
    return y
