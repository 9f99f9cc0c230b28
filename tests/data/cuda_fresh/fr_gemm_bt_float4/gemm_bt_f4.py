"""Host of gemm_bt_f4.cu (cuda-python: NVRTC PTX, driver launch), blocks of 16x16 threads."""
import ctypes
from pathlib import Path

import torch
from cuda.bindings import driver, nvrtc

_FN = {}


def _ck(r):
    if int(r[0]) != 0:
        raise RuntimeError(str(r[0]))
    return r[1] if len(r) == 2 else None


def _load():
    _ck(driver.cuInit(0))
    _ck(driver.cuCtxSetCurrent(_ck(driver.cuDevicePrimaryCtxRetain(_ck(driver.cuDeviceGet(0))))))
    prog = _ck(nvrtc.nvrtcCreateProgram(Path(__file__).with_suffix(".cu").read_bytes(), b"abt.cu", 0, [], []))
    _ck(nvrtc.nvrtcCompileProgram(prog, 1, [b"--gpu-architecture=compute_90"]))
    ptx = b" " * _ck(nvrtc.nvrtcGetPTXSize(prog))
    _ck(nvrtc.nvrtcGetPTX(prog, ptx))
    _FN["k"] = _ck(driver.cuModuleGetFunction(_ck(driver.cuModuleLoadData(ptx)), b"gemm_abt_f4"))


def run(a, w):
    if "k" not in _FN:
        _load()
    a, w = a.contiguous(), w.contiguous()
    m, k = a.shape
    n = w.shape[0]
    if k % 4:
        raise ValueError("float4 loads: K must be a multiple of 4")
    c = torch.empty(m, n, device=a.device, dtype=torch.float32)
    args = ((a.data_ptr(), w.data_ptr(), c.data_ptr(), m, n, k),
            (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int))
    _ck(driver.cuLaunchKernel(_FN["k"], (n + 31) // 32, (m + 31) // 32, 1, 16, 16, 1, 0,
                              driver.CUstream(torch.cuda.current_stream().cuda_stream), args, 0))
    return c
