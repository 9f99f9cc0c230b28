"""RMSNorm over the last dim of an fp32 (rows, dim) matrix: y = x / sqrt(mean(x^2) + eps) * w.
The kernel source lives here; it is compiled with NVRTC and launched through the CUDA driver
API of cuda-python, one 256-thread block per row, the sum of squares folded in shared memory."""
import ctypes

import torch
from cuda.bindings import driver, nvrtc

EPS = 1e-6

RMSNORM_SRC = """
extern "C" __global__ void rmsnorm_rows(const float* x, const float* w, float* y, int dim, float eps)
{
    __shared__ float sq[256];
    const float* xrow = x + (size_t)blockIdx.x * dim;
    float* yrow = y + (size_t)blockIdx.x * dim;
    float acc = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = xrow[i];
        acc += v * v;
    }
    sq[threadIdx.x] = acc;
    __syncthreads();
    for (int offset = blockDim.x / 2; offset > 0; offset /= 2) {
        if (threadIdx.x < offset) sq[threadIdx.x] += sq[threadIdx.x + offset];
        __syncthreads();
    }
    float scale = rsqrtf(sq[0] / dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        yrow[i] = xrow[i] * scale * w[i];
}
"""

_state = {}


def _check(ret):
    if int(ret[0]) != 0:
        raise RuntimeError(repr(ret[0]))
    return ret[1] if len(ret) == 2 else ret[1:]


def _compile():
    _check(driver.cuInit(0))
    dev = _check(driver.cuDeviceGet(0))
    _check(driver.cuCtxSetCurrent(_check(driver.cuDevicePrimaryCtxRetain(dev))))
    cc = [_check(driver.cuDeviceGetAttribute(a, dev)) for a in (
        driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)]
    prog = _check(nvrtc.nvrtcCreateProgram(RMSNORM_SRC.encode(), b"rmsnorm.cu", 0, [], []))
    opts = [b"--gpu-architecture=compute_%d%d" % tuple(cc), b"--use_fast_math"]
    if int(nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]) != 0:
        n = _check(nvrtc.nvrtcGetProgramLogSize(prog))
        buf = b" " * n
        nvrtc.nvrtcGetProgramLog(prog, buf)
        raise RuntimeError(buf.decode(errors="replace"))
    ptx = b" " * _check(nvrtc.nvrtcGetPTXSize(prog))
    _check(nvrtc.nvrtcGetPTX(prog, ptx))
    mod = _check(driver.cuModuleLoadData(ptx))
    _state["fn"] = _check(driver.cuModuleGetFunction(mod, b"rmsnorm_rows"))


def run(x, weight):
    if "fn" not in _state:
        _compile()
    rows, dim = x.shape
    y = torch.empty_like(x)
    args = ((x.data_ptr(), weight.data_ptr(), y.data_ptr(), dim, EPS),
            (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_float))
    stream = driver.CUstream(torch.cuda.current_stream().cuda_stream)
    _check(driver.cuLaunchKernel(_state["fn"], rows, 1, 1, 256, 1, 1, 0, stream, args, 0))
    return y
