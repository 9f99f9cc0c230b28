"""Host of absmax.cu (cuda-python driver + NVRTC, cubin for the device's arch)."""
import ctypes
from pathlib import Path

import torch
from cuda.bindings import driver as cu
from cuda.bindings import nvrtc

NT = 128
_state = {}


def _ok(res):
    if int(res[0]) != 0:
        raise RuntimeError(f"CUDA error {res[0]}")
    return res[1] if len(res) == 2 else None


def _load():
    _ok(cu.cuInit(0))
    dev = _ok(cu.cuDeviceGet(0))
    _ok(cu.cuCtxSetCurrent(_ok(cu.cuDevicePrimaryCtxRetain(dev))))
    major, minor = torch.cuda.get_device_capability()
    prog = _ok(nvrtc.nvrtcCreateProgram(Path(__file__).with_suffix(".cu").read_bytes(), b"absmax.cu", 0, [], []))
    opts = [f"--gpu-architecture=sm_{major}{minor}".encode()]
    _ok(nvrtc.nvrtcCompileProgram(prog, 1, opts))
    cubin = b" " * _ok(nvrtc.nvrtcGetCUBINSize(prog))
    _ok(nvrtc.nvrtcGetCUBIN(prog, cubin))
    _state["k"] = _ok(cu.cuModuleGetFunction(_ok(cu.cuModuleLoadData(cubin)), b"row_absmax"))


def run(x):
    if "k" not in _state:
        _load()
    x = x.contiguous()
    rows, cols = x.shape
    out = torch.empty(rows, device=x.device, dtype=torch.float32)
    grid = min(rows, 4)
    params = ((x.data_ptr(), out.data_ptr(), rows, cols),
              (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int))
    _ok(cu.cuLaunchKernel(_state["k"], grid, 1, 1, NT, 1, 1, 0,
                          cu.CUstream(torch.cuda.current_stream().cuda_stream), params, 0))
    return out
