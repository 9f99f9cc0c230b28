"""Host of cg_total.cu with cuda-python: NVRTC to PTX, a fixed grid of 64 blocks of 128."""
import ctypes
from pathlib import Path

import torch
from cuda.bindings import driver, nvrtc

_FN = []


def _ck(ret):
    if int(ret[0]) != 0:
        raise RuntimeError(str(ret[0]))
    return ret[1] if len(ret) == 2 else ret[1:]


def _function():
    if not _FN:
        _ck(driver.cuInit(0))
        dev = _ck(driver.cuDeviceGet(0))
        _ck(driver.cuCtxSetCurrent(_ck(driver.cuDevicePrimaryCtxRetain(dev))))
        src = Path(__file__).with_suffix(".cu").read_bytes()
        prog = _ck(nvrtc.nvrtcCreateProgram(src, b"cg_total.cu", 0, [], []))
        opts = [b"--gpu-architecture=compute_90", b"--std=c++17"]
        if int(nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]) != 0:
            log = b" " * _ck(nvrtc.nvrtcGetProgramLogSize(prog))
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(log.decode(errors="replace"))
        ptx = b" " * _ck(nvrtc.nvrtcGetPTXSize(prog))
        _ck(nvrtc.nvrtcGetPTX(prog, ptx))
        _FN.append(_ck(driver.cuModuleGetFunction(_ck(driver.cuModuleLoadData(ptx)), b"total")))
    return _FN[0]


def run(x):
    x = x.contiguous()
    out = torch.zeros(1, device=x.device, dtype=torch.float32)
    args = ((x.data_ptr(), out.data_ptr(), x.numel()), (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int))
    stream = driver.CUstream(torch.cuda.current_stream().cuda_stream)
    _ck(driver.cuLaunchKernel(_function(), 64, 1, 1, 128, 1, 1, 0, stream, args, 0))
    return out
