"""The host conventions CUDA users have: a CUDA source held as a string in a Python host
(kir.embedded: found, written back), KernelBench `ModelNew` + `load_inline` and CuPy
`RawKernel` hosts (gate.hostforms, gate.foreign), traced at the static tier (gate.hostview),
and the CUDA style tier's starts (bench/styles/cuda) compiling with NVRTC for sm_90a."""
from __future__ import annotations

import ast
import importlib.util
import textwrap
from pathlib import Path

import pytest

from gate import foreign, hostforms
from gate.check import hosted
from kir import embedded
from kir.errors import BadInputError

STYLES = Path(__file__).resolve().parent.parent / "bench" / "styles" / "cuda"
STYLE_CASES = sorted(p.parent.name for p in STYLES.glob("*/case.py"))

_KERNEL = 'extern "C" __global__ void scale(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] *= 2.0f; }'


def _host(literal: str, extra: str = "") -> str:
    return f'"""A host."""\nimport torch\n\nSRC = {literal}\n{extra}\n\ndef run(x):\n    return x\n'


@pytest.mark.parametrize("literal", [
    f'r"""\n{_KERNEL}\n"""',
    f'"""\n{_KERNEL}\n// printf("%d\\\\n") and a quote: \\"\n"""',
    f"'{_KERNEL}'",
    f"(\n    '{_KERNEL[:30]}'\n    '{_KERNEL[30:]}'\n)",
])
def test_the_source_literal_is_found_and_a_rewrite_is_written_back(literal: str) -> None:
    host = _host(literal)
    found = embedded.find(host)
    assert found is not None and "__global__ void scale" in found.text
    assert host[found.start:found.end] == found.literal
    assert found.line == host[:found.start].count("\n") + 1 >= 4
    assert found.splice(found.text) == host  # an unchanged source leaves the module as it was
    rewritten = found.text.replace("2.0f", "3.0f") + '\n// ends with a quote "'
    new_host = found.splice(rewritten)
    tree = ast.parse(new_host)
    value = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                 and isinstance(n.value, str) and "__global__" in n.value)
    assert value == rewritten
    assert new_host.startswith('"""A host."""\nimport torch\n') and new_host.endswith("return x\n")
    again = embedded.find(new_host)
    assert again is not None and again.text == rewritten


def test_a_raw_literal_stays_raw_where_it_can() -> None:
    found = embedded.find(_host(f'r"""\n{_KERNEL}\n"""'))
    assert found is not None
    assert found.splice(found.text + "\n// more\n")[found.start:].startswith('r"""')


def test_docstrings_do_not_count_and_unclear_sources_are_refused() -> None:
    doc = f'"""Module about `__global__ void k(float* x)` kernels."""\n\ndef run(x):\n    return x\n'
    assert embedded.find(doc) is None
    with pytest.raises(BadInputError, match="2 string literals define CUDA kernels"):
        embedded.find(_host(f"'{_KERNEL}'", f"OTHER = '{_KERNEL}'"))
    with pytest.raises(BadInputError, match="f-string"):
        embedded.find(_host('f"__global__ void k(float* x) {{ x[0] = {N}; }}"'))


def test_cuda_units_of_the_file_conventions(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(_KERNEL)
    (tmp_path / "k.py").write_text("def run(x):\n    return x\n")
    (tmp_path / "held.py").write_text(_host(f"'{_KERNEL}'"))
    (tmp_path / "tri.py").write_text("import triton\n\n@triton.jit\ndef k(x):\n    pass\n")
    (tmp_path / "tri.cu").write_text(_KERNEL)
    cu = embedded.cuda_unit(tmp_path / "k.cu")
    assert cu is not None and cu.source == _KERNEL and cu.host_path == tmp_path / "k.py"
    via_host = embedded.cuda_unit(tmp_path / "k.py")  # the host module of a .cu stands for it
    assert via_host is not None and via_host.source_path == tmp_path / "k.cu"
    held = embedded.cuda_unit(tmp_path / "held.py")
    assert held is not None and held.host_path == held.source_path == tmp_path / "held.py"
    assert "3.0f" in held.text_of(_KERNEL.replace("2.0f", "3.0f"))
    assert embedded.cuda_unit(tmp_path / "tri.py") is None  # a Triton module is not a CUDA host
    (tmp_path / "built.py").write_text("import cupy\nSRC = HEAD + BODY\nk = cupy.RawKernel(SRC, 'k')\n")
    with pytest.raises(BadInputError, match="calls RawKernel but holds no CUDA source"):
        embedded.cuda_unit(tmp_path / "built.py")


def test_the_gate_runs_a_host_with_the_candidates_source_in_it() -> None:
    host = _host(f'r"""{_KERNEL}"""')
    new = _KERNEL.replace("2.0f", "4.0f")
    namespace: dict = {}
    exec(compile(hosted(host, new).replace("import torch", ""), "<host>", "exec"), namespace)
    assert namespace["SRC"] == new
    plain = "from pathlib import Path\nSRC = Path(__file__).with_suffix('.cu').read_text()\n"
    assert hosted(plain, new) == plain  # a host that reads its .cu is run as it is


_LOAD_INLINE_SOURCE = textwrap.dedent("""\
    #include <torch/extension.h>
    #include <cuda_runtime.h>
    #include <cuda_fp16.h>
    #include <vector>

    constexpr int THREADS = 128;

    template <typename T>
    __device__ T twice(T v) { return v + v; }

    constexpr int lanes(int threads) { return threads / 32; }  // used by device code

    __global__ void doubled(const float* __restrict__ x, float* y, int n) {
        extern __shared__ float stage[];
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n && lanes(blockDim.x) > 0) { stage[threadIdx.x] = twice(x[i]); y[i] = stage[threadIdx.x]; }
    }

    torch::Tensor double_it(torch::Tensor x) {
        auto y = torch::empty_like(x);
        const int n = x.numel();
        const int smem = THREADS * sizeof(float);
        doubled<<<(n + THREADS - 1) / THREADS, THREADS, smem>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
        return y;
    }

    std::vector<torch::Tensor> both(torch::Tensor x, torch::Tensor z) {
        doubled<<<1, THREADS, x.size(0) * 4>>>(x.data_ptr<float>(), z.data_ptr<float>(), 1);
        return {x, z};
    }

    PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("double_it", &double_it); }
    """)


def test_the_device_half_of_a_load_inline_source_compiles_with_nvrtc() -> None:
    device = hostforms.device_source(_LOAD_INLINE_SOURCE)
    assert "torch::Tensor" not in device and "PYBIND11_MODULE" not in device
    assert "#include <vector>" not in device and "#include <cuda_fp16.h>" in device
    assert device.count("\n") == _LOAD_INLINE_SOURCE.count("\n")  # lines kept for messages
    assert "__global__ void doubled" in device and "__device__ T twice" in device
    plain = 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n'
    assert hostforms.device_source(plain) == plain
    cudahost = pytest.importorskip("experts.cudahost")
    pytest.importorskip("cuda.bindings.nvrtc")
    compiled = cudahost.compile_source(device, name="inline.cu", arch="sm_90a",
                                       options=hostforms.nvrtc_options(_LOAD_INLINE_SOURCE))
    assert "doubled" in "".join(compiled.resources())
    assert hostforms.nvrtc_options(plain) == ()


def test_what_a_cpp_wrapper_launches_is_read_with_its_shared_memory() -> None:
    launches = hostforms.chevron_launches(_LOAD_INLINE_SOURCE)
    assert launches == {"double_it": [hostforms.Chevron("doubled", 512)],
                        "both": [hostforms.Chevron("doubled", None)]}
    assert hostforms.constant_bytes("2 * (64 + 8) * sizeof(__half)") == 288
    assert hostforms.constant_bytes("n * sizeof(float)") is None


@pytest.mark.parametrize(("source", "allowed"), [
    ("import cupy\nk = cupy.RawKernel(SRC, 'k')\nk((1,), (32,), (x.data_ptr(), cupy.int32(3)))\n", True),
    ("import cupy as cp\nm = cp.RawModule(code=SRC)\nf = m.get_function('k')\n"
     "s = cp.cuda.ExternalStream(0)\nf((1,), (1,), (cp.asarray(x),), stream=s)\n", True),
    ("from cupy import RawKernel\nk = RawKernel(SRC, 'k')\n", True),
    ("import cupy\nk = cupy.RawKernel(SRC, 'k')\ny = cupy.matmul(a, b)\n", False),
    ("import cupy as cp\nk = cp.RawKernel(SRC, 'k')\nh = cp.cuda.cublas.getHandle()\n", False),
    ("import cupy\nk = cupy.RawKernel(SRC, 'k')\nf = getattr(cupy, 'dot')\n", False),
    ("import cupy\nimport cupyx\nk = cupy.RawKernel(SRC, 'k')\n", False),
    ("from cupy import RawKernel, dot\nk = RawKernel(SRC, 'k')\n", False),
    ("import cupy\nx = cupy.asarray(t)\n", False),  # no source of its own: CuPy as a library
])
def test_cupy_is_allowed_only_to_compile_the_candidates_own_source(source: str, allowed: bool) -> None:
    findings = foreign.scan_source(source)
    assert (findings == []) is allowed, findings
    assert foreign.cupy_own_source(source) is allowed
    assert bool(foreign.permitted_modules(source)) is allowed
    if not allowed:
        assert any("cupy" in f.what for f in findings)
    assert foreign.loaded_foreign(["cupy._core", "cupyx"], foreign.permitted_modules(source)) == \
        ([] if allowed else ["cupy", "cupyx"])


def test_a_model_class_host_gets_a_run_that_takes_the_cases_parameters() -> None:
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class ModelNew(nn.Module):
        def __init__(self, features: int) -> None:
            super().__init__()
            self.linear = nn.Linear(features, 3)
            self.register_buffer("shift", torch.zeros(3))

        def forward(self, x):
            return self.linear(x) + self.shift

    module = type("Host", (), {"ModelNew": ModelNew, "get_init_inputs": staticmethod(lambda: [4])})
    run = hostforms.entry(module)
    assert isinstance(run, hostforms.ModelRun)
    x, w, b, shift = torch.randn(2, 4), torch.randn(3, 4), torch.randn(3), torch.randn(3)
    # the parameters, then the buffers, after the forward's own inputs (a KernelBench problem's order)
    assert torch.allclose(run(x, w, b, shift), x @ w.T + b + shift)
    own = run.model.linear
    assert torch.allclose(run(x), own(x) + shift)  # without them: the model's own tensors
    assert hostforms.entry(type("Plain", (), {"run": staticmethod(abs)})) is abs
    assert hostforms.entry(type("Nothing", (), {})) is None


@pytest.mark.parametrize("case", STYLE_CASES)
def test_each_cuda_style_start_compiles_with_nvrtc_for_sm_90a(case: str) -> None:
    import gate

    cudahost = pytest.importorskip("experts.cudahost")
    pytest.importorskip("cuda.bindings.nvrtc")
    loaded = gate.load_case(STYLES / case / "case.py")
    unit = embedded.cuda_unit(loaded.start_path())
    assert unit is not None, f"{case}: the start is not a CUDA kernel"
    compiled = cudahost.compile_source(hostforms.device_source(unit.source), name=f"{case}.cu",
                                       arch="sm_90a", options=hostforms.nvrtc_options(unit.source))
    assert compiled.cubin and compiled.resources(), compiled.log
    module_text = unit.host_path.read_text()
    assert foreign.scan_source(module_text) == []


def test_the_style_tier_has_every_host_convention() -> None:
    import gate

    kinds = set()
    for case in STYLE_CASES:
        start = gate.load_case(STYLES / case / "case.py").start_path()
        unit = embedded.cuda_unit(start)
        text = unit.host_path.read_text()
        if hostforms.builds_extension(text):
            kinds.add("load_inline")
        elif foreign.cupy_own_source(text):
            kinds.add("cupy")
        elif "experts" in text:
            kinds.add("cudahost")
        elif "cuda.bindings" in text:
            kinds.add("cuda.bindings")
    assert len(STYLE_CASES) >= 10
    assert kinds == {"load_inline", "cupy", "cudahost", "cuda.bindings"}


@pytest.mark.parametrize(("case", "dynamic"), [
    ("cu_softmax_rows", 1024),   # load_inline ModelNew: the C++ wrapper's <<<rows, 256, 256 * 4>>>
    ("cu_sum_atomic", 0),        # CuPy RawModule of the module's own source
    ("cu_sum_tree", 0),          # cuda.bindings driver + NVRTC, the start is the host module
    ("cu_layernorm", 0),         # experts.cudahost
    ("nw_gemm_params", 0),       # its own NVRTC calls, of a source that includes cuda_fp16.h
])
def test_each_host_convention_is_traced_at_the_static_tier(case: str, dynamic: int) -> None:
    import gate

    pytest.importorskip("torch")
    pytest.importorskip("cuda.bindings.nvrtc")
    loaded = gate.load_case(STYLES / case / "case.py")
    verdict = gate.check_file(loaded.start_path(), loaded, "static", cache=False)
    assert verdict.ok, verdict.reason
    compiles = verdict.facts.compiles
    assert len(compiles) == 1
    assert (compiles[0].dynamic_shared_bytes, compiles[0].dynamic_shared_source) == (dynamic, "launch")
    assert not any("failed before any launch" in f for f in verdict.flags), verdict.flags


def test_a_host_using_cupys_routines_is_refused_before_it_runs(tmp_path: Path) -> None:
    import gate

    pytest.importorskip("torch")
    case = STYLES / "cu_sum_atomic" / "case.py"
    start = (STYLES / "cu_sum_atomic" / "total_sum.py").read_text()
    cheat = start.replace("    return result\n", "    return result + cupy.sum(cupy.asarray(x))\n")
    (tmp_path / "total_sum.py").write_text(cheat)
    verdict = gate.check_file(tmp_path / "total_sum.py", case, "static", cache=False)
    assert not verdict.ok and verdict.failure_kind.value == "foreign_library", verdict.reason
    assert "cupy.sum" in verdict.reason


def _import(path: Path):
    spec = importlib.util.spec_from_file_location(f"style_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rel_err(out, ref) -> float:
    import torch

    return float((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)) \
        if isinstance(out, torch.Tensor) else float("inf")


@pytest.mark.gpu
@pytest.mark.parametrize("case", STYLE_CASES)
def test_each_cuda_style_start_is_right_at_a_small_shape(case: str) -> None:
    import shutil

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    import gate
    from experts import cudahost

    loaded = gate.load_case(STYLES / case / "case.py")
    unit = embedded.cuda_unit(loaded.start_path())
    text = unit.host_path.read_text()
    if hostforms.builds_extension(text) and (shutil.which("nvcc") is None or shutil.which("ninja") is None):
        pytest.skip("load_inline needs nvcc and ninja on PATH")
    if foreign.cupy_own_source(text):
        pytest.importorskip("cupy")
    case_module = loaded.module()
    shape = dict(next(iter(case_module.SMALL_SHAPES.values())))
    inputs = case_module.make_inputs(shape, 0, "cuda")
    with cudahost.cuda_headers_for_nvrtc():  # as the gate's device tier runs a host
        module = _import(unit.host_path)
        run = hostforms.entry(module, str(loaded.path))
        out = run(*inputs)
        torch.cuda.synchronize()
    ref = case_module.reference(*inputs)
    assert out.shape == ref.shape and out.dtype == ref.dtype, (out.shape, ref.shape, out.dtype)
    assert _rel_err(out, ref) <= loaded.tolerance_for(shape["dtype"]), _rel_err(out, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["cu_softmax_rows", "cu_sum_atomic", "cu_sum_tree", "cu_rmsnorm",
                                  "cu_layernorm", "nw_gemm_params"])
def test_each_host_convention_passes_the_device_gate(case: str) -> None:
    import shutil

    import gate

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    loaded = gate.load_case(STYLES / case / "case.py")
    text = embedded.cuda_unit(loaded.start_path()).host_path.read_text()
    if hostforms.builds_extension(text) and (shutil.which("nvcc") is None or shutil.which("ninja") is None):
        pytest.skip("load_inline needs nvcc and ninja on PATH")
    if foreign.cupy_own_source(text):
        pytest.importorskip("cupy")
    verdict = gate.check_file(loaded.start_path(), loaded, "device", cache=False)
    assert verdict.ok, verdict.reason
    assert verdict.timing is not None and verdict.timing.candidate_ms > 0


@pytest.mark.parametrize("case", ["cu_sum_atomic", "cu_mm_reg1d", "cu_sum_tree"])
def test_each_host_convention_is_right_at_the_emulate_tier(case: str) -> None:
    """CuPy hosts (a RawModule fed views, a RawKernel fed addresses: through the emulated
    cudahost) and a cuda.bindings host run their kernels on the CPU emulator at the case's
    small shapes and match the torch reference."""
    import gate

    pytest.importorskip("torch")
    pytest.importorskip("cuda.bindings.nvrtc")
    loaded = gate.load_case(STYLES / case / "case.py")
    verdict = gate.check_file(loaded.start_path(), loaded, "emulate", cache=False)
    assert verdict.ok, verdict.reason
    assert verdict.correctness is not None and verdict.correctness.max_rel_err <= 1e-4


def test_a_load_inline_host_is_refused_at_the_emulate_tier_with_the_reason() -> None:
    import gate

    pytest.importorskip("torch")
    loaded = gate.load_case(STYLES / "cu_softmax_rows" / "case.py")
    verdict = gate.check_file(loaded.start_path(), loaded, "emulate", cache=False)
    assert not verdict.ok and verdict.failure_kind.value == "unsupported"
    assert "load_inline" in verdict.reason


def test_optimize_writes_the_best_kernel_back_into_its_host(tmp_path: Path) -> None:
    """A load_inline host is optimized as CUDA (the string's text is the kernel) and its best
    kernel goes back into a copy of the host module, the rest of the module as it was."""
    from lineage.optimize import optimize
    from passes.rewriter import DeterministicRewriter
    from skill_helpers import ScriptedGate

    from lineage.graph import Lineage
    from lineage.skills import Library, Trial, lift

    # CUDA cards lifted from a (tracked) static CUDA lineage, admitted for the test
    lineage = Lineage.load(STYLES.parents[2] / "bench/results/cuda/lineages/topk_cuda_static/lineage.json")
    library = Library.open(tmp_path / "lib", create=True)
    for card in lift(lineage):
        library.put(card.with_trial(Trial("topk:s:0", "topk", "static", True)))
    folder = STYLES / "cu_softmax_rows"
    start = folder / "softmax_rows.py"
    original = embedded.find(start.read_text())
    scripted = ScriptedGate(ms=lambda s: 1.0 if s == original.text else 0.5)
    result = optimize(start, str(folder / "case.py"), library, budget_steps=4, tier="static",
                      out=tmp_path / "out", rewriter=DeterministicRewriter(), check_fn=scripted,
                      config_sweeps=False)
    assert scripted.seen and all("__global__" in s and "load_inline" not in s for s in scripted.seen)
    best = Path(result.best_path)
    assert best.suffix == ".py"
    held = embedded.find(best.read_text())
    assert result.applied and held is not None
    assert held.text != original.text and held.text in scripted.seen  # a gated rewrite, kept
    assert best.read_text()[:held.start] == start.read_text()[:original.start]
    assert best.read_text()[held.end:] == start.read_text()[original.end:]
