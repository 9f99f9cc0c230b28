"""Host of row_sum.cu written against cuda-python directly: NVRTC for the device's
architecture, the cubin loaded with the driver API, launched on torch's current stream."""
import ctypes
from pathlib import Path

import torch
from cuda.bindings import driver, nvrtc

THREADS = 512


def _ok(result):
    err, *rest = result
    if int(err) != 0:
        raise RuntimeError(f"CUDA call failed: {err}")
    return rest[0] if len(rest) == 1 else rest


class RowSum:
    def __init__(self, path):
        self.path = Path(path)
        self.function = None

    def load(self):
        _ok(driver.cuInit(0))
        device = _ok(driver.cuDeviceGet(torch.cuda.current_device()))
        context = _ok(driver.cuDevicePrimaryCtxRetain(device))
        _ok(driver.cuCtxSetCurrent(context))
        attr = driver.CUdevice_attribute
        major = _ok(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device))
        minor = _ok(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device))
        program = _ok(nvrtc.nvrtcCreateProgram(self.path.read_bytes(), b"row_sum.cu", 0, [], []))
        options = [f"--gpu-architecture=sm_{major}{minor}".encode(), b"--std=c++17"]
        err, = nvrtc.nvrtcCompileProgram(program, len(options), options)
        if int(err) != 0:
            size = _ok(nvrtc.nvrtcGetProgramLogSize(program))
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(program, log)
            raise RuntimeError(log.decode(errors="replace"))
        size = _ok(nvrtc.nvrtcGetCUBINSize(program))
        cubin = b" " * size
        _ok(nvrtc.nvrtcGetCUBIN(program, cubin))
        module = _ok(driver.cuModuleLoadData(cubin))
        self.function = _ok(driver.cuModuleGetFunction(module, b"row_sum"))

    def __call__(self, x):
        if self.function is None:
            self.load()
        rows, cols = x.shape
        out = torch.empty(rows, device=x.device, dtype=torch.float32)
        params = ((x.data_ptr(), out.data_ptr(), cols),
                  (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int))
        stream = driver.CUstream(torch.cuda.current_stream().cuda_stream)
        _ok(driver.cuLaunchKernel(self.function, rows, 1, 1, THREADS, 1, 1, 0, stream, params, 0))
        return out


_row_sum = RowSum(Path(__file__).with_suffix(".cu"))


def run(x):
    return _row_sum(x.contiguous())
