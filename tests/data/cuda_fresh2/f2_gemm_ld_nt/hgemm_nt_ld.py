"""Host of hgemm_nt_ld.cu with cuda-python (NVRTC to PTX, the driver API): B given as (N, K)."""
import ctypes
import glob
import os
import sys
from pathlib import Path

import torch
from cuda.bindings import driver, nvrtc

_F = []


def _ok(ret):
    if int(ret[0]) != 0:
        raise RuntimeError(f"CUDA call failed: {ret[0]}")
    return ret[1] if len(ret) == 2 else None


def _cuda_includes():
    """Where cuda_fp16.h is: the toolkit's folder, or the nvidia-cuda-runtime wheel's."""
    roots = [os.environ.get("CUDA_HOME", "/usr/local/cuda")]
    roots += [os.path.join(p, "nvidia", "cuda_runtime") for p in sys.path if p]
    roots += glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia", "cu*"))
    return [os.path.join(r, "include") for r in roots
            if os.path.isfile(os.path.join(r, "include", "cuda_fp16.h"))][:1]


def _function():
    if not _F:
        _ok(driver.cuInit(0))
        dev = _ok(driver.cuDeviceGet(0))
        _ok(driver.cuCtxSetCurrent(_ok(driver.cuDevicePrimaryCtxRetain(dev))))
        prog = _ok(nvrtc.nvrtcCreateProgram(Path(__file__).with_suffix(".cu").read_bytes(),
                                            b"hgemm_nt_ld.cu", 0, [], []))
        opts = [b"--gpu-architecture=compute_90", b"--std=c++17"] + [
            f"--include-path={d}".encode() for d in _cuda_includes()]
        _ok(nvrtc.nvrtcCompileProgram(prog, len(opts), opts))
        ptx = b" " * _ok(nvrtc.nvrtcGetPTXSize(prog))
        _ok(nvrtc.nvrtcGetPTX(prog, ptx))
        _F.append(_ok(driver.cuModuleGetFunction(_ok(driver.cuModuleLoadData(ptx)), b"hgemm_nt_ld")))
    return _F[0]


def run(a, bt):
    a, bt = a.contiguous(), bt.contiguous()
    m, k = a.shape
    n = bt.shape[0]
    c = torch.empty(m, n, device=a.device, dtype=torch.float16)
    i, p = ctypes.c_int, ctypes.c_void_p
    args = ((m, n, k, a.data_ptr(), k, bt.data_ptr(), k, c.data_ptr(), n),
            (i, i, i, p, i, p, i, p, i))
    stream = driver.CUstream(torch.cuda.current_stream().cuda_stream)
    _ok(driver.cuLaunchKernel(_function(), (n + 15) // 16, (m + 15) // 16, 1, 16, 16, 1, 0,
                              stream, args, 0))
    return c
