"""Host of softmax_params.cu with cuda-python: NVRTC to PTX, the driver API, the kernel's one
argument a ctypes structure whose address the parameter array holds."""
import ctypes
from pathlib import Path

import torch
from cuda.bindings import driver, nvrtc

ROWS_PER_BLOCK = 4


class SoftmaxParams(ctypes.Structure):
    _fields_ = [("inp", ctypes.c_void_p), ("out", ctypes.c_void_p),
                ("rows", ctypes.c_int), ("cols", ctypes.c_int)]


_kernel = {}


def _check(result):
    if int(result[0]) != 0:
        raise RuntimeError(f"CUDA error {result[0]}")
    return result[1] if len(result) == 2 else None


def _function():
    if "f" not in _kernel:
        _check(driver.cuInit(0))
        device = _check(driver.cuDeviceGet(0))
        _check(driver.cuCtxSetCurrent(_check(driver.cuDevicePrimaryCtxRetain(device))))
        source = Path(__file__).with_suffix(".cu").read_bytes()
        program = _check(nvrtc.nvrtcCreateProgram(source, b"softmax_params.cu", 0, [], []))
        options = [b"--gpu-architecture=compute_90"]
        _check(nvrtc.nvrtcCompileProgram(program, len(options), options))
        ptx = b" " * _check(nvrtc.nvrtcGetPTXSize(program))
        _check(nvrtc.nvrtcGetPTX(program, ptx))
        module = _check(driver.cuModuleLoadData(ptx))
        _kernel["f"] = _check(driver.cuModuleGetFunction(module, b"softmax_warp_rows"))
    return _kernel["f"]


def run(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    rows, cols = x.shape
    params = SoftmaxParams(x.data_ptr(), y.data_ptr(), rows, cols)
    pointers = (ctypes.c_void_p * 1)(ctypes.addressof(params))
    grid = (rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK
    stream = driver.CUstream(torch.cuda.current_stream().cuda_stream)
    _check(driver.cuLaunchKernel(_function(), grid, 1, 1, 32, ROWS_PER_BLOCK, 1, 0, stream,
                                 ctypes.addressof(pointers), 0))
    return y
