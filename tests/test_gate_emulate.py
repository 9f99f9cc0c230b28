"""The gate's emulate tier: a CUDA candidate's own host module, its kernels emulated on the CPU
(`gate.cudacpu`), judged like the interpret tier judges Triton."""
from __future__ import annotations

from pathlib import Path

import pytest

import gate
from gate import Tier

CASE = '''
import torch

NAME = "row_sum_emulated"
DESCRIPTION = "row sums"
PLATFORM = "cuda"
REFERENCE_NAME = "torch.sum"
SHAPES = {"default": {"R": 64, "C": 4096, "dtype": "fp32"}}
SMALL_SHAPES = {"default": {"R": 6, "C": 300, "dtype": "fp32"}}
TOLERANCE = {"fp32": 1e-5}
EXPERTS = []


def make_inputs(shape, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["R"], shape["C"], generator=g, device=device),)


def reference(x):
    return x.sum(dim=1)


def flops(shape):
    return float(shape["R"] * shape["C"])


def bytes_moved(shape):
    return 4.0 * shape["R"] * (shape["C"] + 1)
'''
HOST = '''
from pathlib import Path

import torch

from experts import cudahost

SOURCE = Path(__file__).with_suffix(".cu")


def run(x):
    func = cudahost.get_function(cudahost.compile_source(SOURCE.read_text(), name=SOURCE.name), "row_sum")
    out = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
    cudahost.launch(func, x.shape[0], 128, 0, (x, out, x.shape[1]), torch.cuda.current_stream(x.device))
    return out
'''
# The same launch through cuda.bindings directly (NVRTC program, module, cuLaunchKernel).
DIRECT_HOST = '''
import ctypes
from pathlib import Path

import torch
from cuda.bindings import driver, nvrtc

SOURCE = Path(__file__).with_suffix(".cu")
_FUNC = []


def _function():
    if not _FUNC:
        err, prog = nvrtc.nvrtcCreateProgram(SOURCE.read_bytes(), b"row_sum.cu", 0, [], [])
        opts = [b"--gpu-architecture=sm_90a"]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"nvrtc: {err}")
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        image = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, image)
        driver.cuInit(0)
        err, module = driver.cuModuleLoadData(image)
        err, func = driver.cuModuleGetFunction(module, b"row_sum")
        _FUNC.append(func)
    return _FUNC[0]


def run(x):
    out = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
    args = ((x.data_ptr(), out.data_ptr(), x.shape[1]), (None, None, ctypes.c_int))
    stream = torch.cuda.current_stream(x.device).cuda_stream
    (err,) = driver.cuLaunchKernel(_function(), x.shape[0], 1, 1, 128, 1, 1, 0, stream, args, 0)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"launch: {err}")
    return out
'''
KERNEL = '''
extern "C" __global__ void row_sum(const float* __restrict__ x, float* __restrict__ out, int cols) {
    __shared__ float buf[128];
    const float* row = x + (size_t)blockIdx.x * cols;
    float v = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) v += row[c];
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        BARRIER
    }
    if (threadIdx.x == 0) out[blockIdx.x] = buf[0];
}
'''


@pytest.fixture
def case_dir(tmp_path: Path) -> Path:
    (tmp_path / "case.py").write_text(CASE)
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("barrier,ok,host", [("__syncthreads();", True, HOST), ("", False, HOST),
                                             ("__syncthreads();", True, DIRECT_HOST)],
                         ids=["cudahost", "racy", "bindings"])
def test_emulate_tier_judges_a_cuda_candidate_through_its_host(case_dir, barrier, ok, host):
    cu = case_dir / "row_sum.cu"
    cu.write_text(KERNEL.replace("BARRIER", barrier))
    (case_dir / "row_sum.py").write_text(host)
    verdict = gate.check_file(cu, case_dir, Tier.EMULATE, cache=False)
    assert verdict.tier is Tier.EMULATE
    assert verdict.ok is ok, verdict.reason
    if ok:
        assert verdict.correctness is not None and verdict.correctness.max_rel_err < 1e-5
    else:
        assert verdict.failure_kind is gate.FailureKind.WRONG_OUTPUT


def test_emulate_on_a_triton_kernel_is_the_interpreter():
    tier, flags = gate.resolve_tier("emulate", "triton")
    assert tier is Tier.INTERPRET and flags
    assert gate.resolve_tier("emulate", "cuda") == (Tier.EMULATE, ())
