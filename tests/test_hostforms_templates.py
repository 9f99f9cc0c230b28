"""Template kernels of a `load_inline` source whose only instantiation is in its C++ wrappers
(`k<__half, 256><<<...>>>`, `AT_DISPATCH_*`'s `scalar_t`, an argument's `data_ptr<float>()`):
the device half NVRTC compiles keeps what the host half instantiates (gate.hostforms.instances,
appended after the source's last line), so the static tier compiles the kernel the host
launches instead of refusing the source as defining none."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from gate import facts, hostforms

ROOT = Path(__file__).resolve().parent.parent
SOFTMAX = ROOT / "bench" / "styles" / "cuda" / "cu_softmax_rows"
ROWSUM = ROOT / "bench" / "styles" / "cuda" / "nw_tmpl_atomic_rowsum" / "rowsum_tmpl.py"


def _entries(source: str) -> list[str]:
    """The `.entry` names of the device half of `source` compiled as the static tier does."""
    cudahost = pytest.importorskip("experts.cudahost")
    pytest.importorskip("cuda.bindings.nvrtc")
    compiled = cudahost.compile_source(hostforms.device_source(source), name="t.cu",
                                       arch="sm_90a", options=hostforms.nvrtc_options(source))
    return facts.ptx_entries(compiled.ptx)


def _templated_softmax(path: Path) -> Path:
    """The cu_softmax_rows start with its kernel a `template <typename T, int THREADS>` that
    only the wrapper's launch `<__half, 256>` instantiates."""
    src = (SOFTMAX / "softmax_rows.py").read_text()
    edits = [
        ("__global__ void softmax_rows_kernel(const __half* __restrict__ x, "
         "__half* __restrict__ y, int cols) {",
         "template <typename T, int THREADS>\n__global__ void softmax_rows_kernel("
         "const T* __restrict__ x, T* __restrict__ y, int cols) {"),
        ("const __half* xr", "const T* xr"), ("__half* yr", "T* yr"),
        ("softmax_rows_kernel<<<rows, threads, threads * sizeof(float)>>>(",
         "softmax_rows_kernel<__half, 256><<<rows, threads, threads * sizeof(float)>>>("),
    ]
    for old, new in edits:
        assert old in src
        src = src.replace(old, new)
    path.write_text(src)
    return path


def test_a_template_launched_with_written_arguments_passes_the_static_gate(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("cuda.bindings.nvrtc")
    import gate
    from gate.foreign import base_name
    from kir.embedded import in_file

    host = _templated_softmax(tmp_path / "softmax_tpl.py")
    held = in_file(host)
    assert held is not None
    assert hostforms.chevron_launches(held.text) == {
        "softmax_rows": [hostforms.Chevron("softmax_rows_kernel", 1024)]}  # the plain name
    case = gate.load_case(SOFTMAX / "case.py")
    verdict = gate.check_file(str(host), case, "static", cache=False)
    assert verdict.ok, verdict.reason
    kernels = [c.kernel for c in verdict.facts.compiles]
    assert len(kernels) == 1 and base_name(kernels[0]) == "softmax_rows_kernel"
    assert "I6__halfLi256E" in kernels[0]  # the specialization <__half, 256>
    assert verdict.facts.compiles[0].dynamic_shared_bytes == 1024  # the launch's, by its name


_DEFAULTED = textwrap.dedent("""\
    #include <torch/extension.h>
    constexpr int kLanes = 32;
    template <typename T, int BLOCK = 4 * kLanes>
    __global__ void scale_kernel(const T* __restrict__ x, T* __restrict__ y, T a, int n = 0) {
        __shared__ T staged[BLOCK];
        int i = blockIdx.x * BLOCK + threadIdx.x;
        staged[threadIdx.x] = i < n ? x[i] : T(0);
        __syncthreads();
        if (i < n) y[i] = a * staged[threadIdx.x];
    }
    torch::Tensor scale(torch::Tensor x, double a) {
        auto y = torch::empty_like(x);
        const int n = x.numel();
        scale_kernel<float><<<(n + 127) / 128, 128>>>(
            x.data_ptr<float>(), y.data_ptr<float>(), (float)a, n);
        return y;
    }
    """)


def test_a_default_template_argument_is_filled_in() -> None:
    found = hostforms.instances(_DEFAULTED)
    assert [(i.kernel, i.args, i.stand_in) for i in found] == [
        ("scale_kernel", ("float", "4 * kLanes"), None)]
    assert found[0].declaration == (
        "template __global__ void scale_kernel<float, 4 * kLanes>(const float* __restrict__ x, "
        "float* __restrict__ y, float a, int n);")  # the parameter's default left out
    device = hostforms.device_source(_DEFAULTED)
    lines = device.split("\n")
    assert lines[:_DEFAULTED.count("\n")] == hostforms.device_source(
        _DEFAULTED, instantiate=[]).split("\n")[:_DEFAULTED.count("\n")]  # lines kept
    assert lines[-1] == found[0].declaration
    assert [re.sub(r"^_Z\d+", "", e) for e in _entries(_DEFAULTED)] == [
        "scale_kernelIfLi128EEvPKT_PS0_S0_i"]


_DISPATCHED = textwrap.dedent("""\
    #include <torch/extension.h>
    #include <cuda_fp16.h>
    template <typename scalar_t>
    __global__ void shift_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) { float v = x[i]; y[i] = v + 1.0f; }
    }
    torch::Tensor shift(torch::Tensor x) {
        auto y = torch::empty_like(x);
        const int n = x.numel();
        const int threads = 256;
        AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "shift", ([&] {
            shift_kernel<scalar_t><<<(n + threads - 1) / threads, threads>>>(
                x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);
        }));
        return y;
    }
    """)


def test_a_dispatch_macro_instantiates_float_and_double() -> None:
    found = hostforms.instances(_DISPATCHED)
    assert [(i.args, i.stand_in) for i in found] == [(("double",), None), (("float",), None)]
    assert sorted(_entries(_DISPATCHED)) == ["_Z12shift_kernelIdEvPKT_PS0_i",
                                             "_Z12shift_kernelIfEvPKT_PS0_i"]
    # the half type where the source includes its header, as a stand-in for at::Half; bf16
    # has no header here, so none
    both = _DISPATCHED.replace(
        "AT_DISPATCH_FLOATING_TYPES(",
        "AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, ")
    assert [(i.args, i.stand_in) for i in hostforms.instances(both)] == [
        (("double",), None), (("float",), None), (("__half",), "__half for at::Half")]


def test_a_stand_in_that_does_not_compile_is_flagged_not_failed() -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    from experts import cudahost
    from gate import static

    class Chan:
        def __init__(self) -> None:
            self.sent: list[tuple[str, str]] = []

        def send(self, kind: str, text: str) -> None:
            self.sent.append((kind, text))

    # `float v = x[i]` converts c10::Half in torch's build; __half has no such conversion
    # under its -D__CUDA_NO_HALF_CONVERSIONS__
    source = _DISPATCHED.replace("AT_DISPATCH_FLOATING_TYPES(",
                                 "AT_DISPATCH_FLOATING_TYPES_AND_HALF(")
    chan = Chan()
    compiled = static._device_compile(chan, source, "t.cu", {}, hostforms.nvrtc_options(source))
    assert sorted(facts.ptx_entries(compiled.ptx)) == ["_Z12shift_kernelIdEvPKT_PS0_i",
                                                       "_Z12shift_kernelIfEvPKT_PS0_i"]
    assert len(chan.sent) == 1 and chan.sent[0][0] == "flag"
    assert "shift_kernel<__half> (__half for at::Half)" in chan.sent[0][1]
    broken = source.replace("y[i] = v + 1.0f;", "y[i] = v + undeclared;")  # the kernel's own error
    with pytest.raises(cudahost.CompileError, match="undeclared"):
        static._device_compile(Chan(), broken, "t.cu", {}, hostforms.nvrtc_options(broken))


_DEDUCED = textwrap.dedent("""\
    #include <torch/extension.h>
    #include <cuda_fp16.h>
    template <typename T>
    __global__ void copy_kernel(const T* __restrict__ x, T* __restrict__ y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = x[i];
    }
    torch::Tensor copy(torch::Tensor x) {
        auto y = torch::empty_like(x);
        const int n = x.numel();
        if (x.scalar_type() == torch::kHalf)
            copy_kernel<<<(n + 255) / 256, 256>>>(
                reinterpret_cast<const __half*>(x.data_ptr<at::Half>()),
                reinterpret_cast<__half*>(y.data_ptr<at::Half>()), n);
        else
            copy_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
        return y;
    }
    """)


def test_deduced_template_arguments_are_read_off_the_launch() -> None:
    found = hostforms.instances(_DEDUCED)
    assert [(i.args, i.stand_in) for i in found] == [(("__half",), None), (("float",), None)]
    assert sorted(_entries(_DEDUCED)) == ["_Z11copy_kernelI6__halfEvPKT_PS1_i",
                                          "_Z11copy_kernelIfEvPKT_PS0_i"]
    # a pointer whose type only the running host knows: nothing to deduce, nothing instantiated
    opaque = _DEDUCED.replace("x.data_ptr<float>(), y.data_ptr<float>()", "xp, yp")
    assert [i.args for i in hostforms.instances(opaque)] == [("__half",)]


def test_what_the_source_instantiates_itself_or_only_the_wrapper_knows_is_not_added() -> None:
    # a specialization the source instantiates explicitly, written another way at the launch
    # (NVRTC refuses one instantiated twice)
    explicit = _DEFAULTED.replace(
        "torch::Tensor scale(",
        "template __global__ void scale_kernel<float, 128>(const float*, float*, float, int);\n"
        "torch::Tensor scale(")
    assert hostforms.instances(explicit) == []
    assert len(_entries(explicit)) == 1
    # a template argument of the wrapper's own runtime value
    runtime = _DEFAULTED.replace("scale_kernel<float><<<", "scale_kernel<float, n><<<")
    assert hostforms.instances(runtime) == []
    # the style tier's templated wrapper: its kernel's arguments are the wrapper's template
    # parameters (and the source instantiates the kernel itself)
    from kir.embedded import in_file

    held = in_file(ROWSUM)
    assert held is not None and hostforms.instances(held.text) == []


def test_a_source_without_template_kernels_keeps_its_device_half() -> None:
    from kir.embedded import in_file

    held = in_file(SOFTMAX / "softmax_rows.py")
    assert held is not None
    assert hostforms.instances(held.text) == []
    device = hostforms.device_source(held.text)
    assert device == hostforms.device_source(held.text, instantiate=[])
    assert device.count("\n") == held.text.count("\n") and "template" not in device
