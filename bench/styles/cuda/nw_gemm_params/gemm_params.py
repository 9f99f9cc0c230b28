"""Host of gemm_params.cu with cuda-python: NVRTC to cubin, the driver API; the kernel's one
argument a ctypes structure passed by value ((values, types) with type None)."""
import ctypes
from pathlib import Path

import torch
from cuda.bindings import driver, nvrtc


class GemmArgs(ctypes.Structure):
    _fields_ = [("a", ctypes.c_void_p), ("b", ctypes.c_void_p), ("c", ctypes.c_void_p),
                ("m", ctypes.c_int), ("n", ctypes.c_int), ("k", ctypes.c_int)]


_fn = {}


def _ok(result):
    if int(result[0]) != 0:
        raise RuntimeError(f"CUDA call failed: {result[0]}")
    return result[1] if len(result) == 2 else None


def _kernel():
    if "k" not in _fn:
        _ok(driver.cuInit(0))
        dev = _ok(driver.cuDeviceGet(0))
        _ok(driver.cuCtxSetCurrent(_ok(driver.cuDevicePrimaryCtxRetain(dev))))
        prog = _ok(nvrtc.nvrtcCreateProgram(Path(__file__).with_suffix(".cu").read_bytes(),
                                            b"gemm_params.cu", 0, [], []))
        opts = [b"--gpu-architecture=sm_90", b"--std=c++17"]
        _ok(nvrtc.nvrtcCompileProgram(prog, len(opts), opts))
        cubin = b" " * _ok(nvrtc.nvrtcGetCUBINSize(prog))
        _ok(nvrtc.nvrtcGetCUBIN(prog, cubin))
        _fn["k"] = _ok(driver.cuModuleGetFunction(_ok(driver.cuModuleLoadData(cubin)),
                                                  b"gemm_params"))
    return _fn["k"]


def run(a, b):
    a, b = a.contiguous(), b.contiguous()
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=torch.float16)
    args = GemmArgs(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k)
    grid = ((n + 63) // 64, (m + 63) // 64)
    _ok(driver.cuLaunchKernel(_kernel(), grid[0], grid[1], 1, 256, 1, 1, 0,
                              driver.CUstream(torch.cuda.current_stream().cuda_stream),
                              ((args,), (None,)), 0))
    return c
