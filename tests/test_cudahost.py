"""experts/cudahost.py: NVRTC compile (CPU), argument packing, launch through the hooked entry
point, and a real launch on a GPU."""
from __future__ import annotations

import ctypes

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

from experts import cudahost  # noqa: E402

SAXPY = r"""
extern "C" __global__ void __launch_bounds__(128) saxpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def test_compile_gives_ptx_cubin_and_resources_for_sm90a() -> None:
    compiled = cudahost.compile_source(SAXPY, name="saxpy.cu", arch="sm_90a")
    assert compiled.arch == "sm_90a"
    assert ".target sm_90a" in compiled.ptx
    assert ".entry saxpy" in compiled.ptx
    assert compiled.cubin is not None and compiled.cubin[:4] == b"\x7fELF"
    res = compiled.resources()["saxpy"]
    assert 0 < res["registers"] <= 255 and res["spill_stores"] == 0


def test_compile_is_cached_by_source_and_options() -> None:
    one = cudahost.compile_source(SAXPY, arch="sm_90a")
    assert cudahost.compile_source(SAXPY, arch="sm_90a") is one
    other = cudahost.compile_source(SAXPY, arch="sm_90a", defines={"UNUSED": 1})
    assert other is not one and other.key != one.key


def test_compile_error_carries_the_log() -> None:
    with pytest.raises(cudahost.CompileError) as info:
        cudahost.compile_source('extern "C" __global__ void bad() { undefined_name = 1; }', arch="sm_90a")
    assert "undefined_name" in info.value.log


def test_default_arch_without_a_device_is_sm90a() -> None:
    arch = cudahost.default_arch()
    assert arch.startswith("sm_")
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        assert arch == cudahost.DEFAULT_ARCH == "sm_90a"


class _FakeTensor:
    def __init__(self, ptr: int) -> None:
        self._ptr = ptr

    def data_ptr(self) -> int:
        return self._ptr


def test_pack_args_lays_out_pointers_and_scalars() -> None:
    packed = cudahost.pack_args([_FakeTensor(0x1234), 7, 2.5, ctypes.c_int64(-3)])
    slots = (ctypes.c_void_p * 4).from_address(packed.address)
    assert ctypes.c_void_p.from_address(slots[0]).value == 0x1234
    assert ctypes.c_int32.from_address(slots[1]).value == 7
    assert ctypes.c_float.from_address(slots[2]).value == 2.5
    assert ctypes.c_int64.from_address(slots[3]).value == -3


def test_pack_args_rejects_what_it_cannot_pass() -> None:
    with pytest.raises(TypeError):
        cudahost.pack_args(["text"])
    with pytest.raises(TypeError):
        cudahost.pack_args([2**40])


def test_launch_goes_through_the_module_attribute(monkeypatch: pytest.MonkeyPatch) -> None:
    from cuda.bindings import driver

    seen: list[tuple] = []

    def hook(*args: object) -> tuple:
        seen.append(args)
        return (driver.CUresult.CUDA_SUCCESS,)

    monkeypatch.setattr(driver, "cuLaunchKernel", hook)
    cudahost.launch("func", (3, 2), 128, 1024, [_FakeTensor(16), 5])
    assert len(seen) == 1
    assert seen[0][1:8] == (3, 2, 1, 128, 1, 1, 1024)


def test_launch_raises_on_a_refused_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    from cuda.bindings import driver

    monkeypatch.setattr(driver, "cuLaunchKernel",
                        lambda *a: (driver.CUresult.CUDA_ERROR_INVALID_VALUE,))
    with pytest.raises(cudahost.CudaError, match="cuLaunchKernel"):
        cudahost.launch("func", 1, 1, 0, [])


@pytest.mark.gpu
def test_saxpy_runs_on_the_gpu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    n = 1000
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    expect = 3.0 * x + y
    func = cudahost.get_function(cudahost.compile_source(SAXPY), "saxpy")
    cudahost.launch(func, (n + 127) // 128, 128, 0, [y, x, 3.0, n], torch.cuda.current_stream())
    torch.cuda.synchronize()
    # NVRTC contracts a * x + y into one fused multiply-add (one rounding); torch rounds twice,
    # so elements near zero differ by an ulp of the product (seen: 9.5e-7).
    torch.testing.assert_close(y, expect, rtol=1e-6, atol=4e-6)
    assert cudahost.function_attributes(func)["registers"] > 0
