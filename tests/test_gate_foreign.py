"""What a candidate may not reach (gate.foreign) and the refill pool's crossovers (gate.refill)."""
from __future__ import annotations

import pytest

from gate import foreign


@pytest.mark.parametrize(
    ("source", "line", "what"),
    [
        ("import os\nimport cupy as cp\n", 2, "imports cupy"),
        ("from jax import numpy as jnp\n", 1, "imports jax"),
        ("import tensorflow.experimental.numpy\n", 1, "imports tensorflow"),
        ("from numba import cuda\n", 1, "imports numba.cuda"),
        ("import numba.cuda.random\n", 1, "imports numba.cuda"),
        ("x = 1\nm = __import__('cupyx.scipy')\n", 2, "imports cupyx"),
        ("import importlib\nm = importlib.import_module('jaxlib')\n", 2, "imports jaxlib"),
        ("import ctypes\nlib = ctypes.CDLL('libcublas.so')\n", 2, "loads a native library (CDLL)"),
        ("from ctypes import cdll\n\n\nlib = cdll.LoadLibrary(name)\n", 4, "loads a native library"),
        ("import cffi\nffi = cffi.FFI()\nlib = ffi.dlopen('libcudnn.so')\n", 3, "loads a native library"),
        ("import torch\ntorch.ops.load_library('ext.so')\n", 2, "loads a native library"),
    ],
)
def test_foreign_imports_and_native_loads_are_found_with_their_line(source: str, line: int,
                                                                    what: str) -> None:
    findings = foreign.scan_source(source)
    assert findings and findings[0].line == line and what in findings[0].what, findings


@pytest.mark.parametrize(
    "source",
    [
        "import numba\n",                          # numba's CPU jit is not a GPU library
        "import numpy as np\nimport torch\nimport triton\n",
        "from cuda.bindings import driver, nvrtc\n",  # the CUDA candidates' own path
        "import ctypes\nx = ctypes.c_int32(3)\np = ctypes.c_void_p(0)\n",  # scalars, no library
        "cupy = 3\n",                              # a name, not an import
        "def f(:\n",                               # does not parse: the parse check reports it
    ],
)
def test_honest_text_has_no_findings(source: str) -> None:
    assert foreign.scan_source(source) == []


def test_modules_loaded_at_run_time_are_matched_by_prefix() -> None:
    assert foreign.loaded_foreign(["numpy", "cupy._core", "numba", "numba.cuda.cudadrv"]) == \
        ["cupy", "numba.cuda"]
    assert foreign.loaded_foreign(["cupyfake", "jaxtyping"]) == []


@pytest.mark.parametrize(
    ("name", "base"),
    [
        ("gemm_kernel", "gemm_kernel"),
        ("void ns::gemm_kernel<128, 64>(float const*, int)", "gemm_kernel"),
        ("_Z11gemm_kernelPKfPfi", "gemm_kernel"),
        ("_ZN2ns11gemm_kernelEPf", "gemm_kernel"),
        ("saxpy(float*, float const*)", "saxpy"),
    ],
)
def test_base_name(name: str, base: str) -> None:
    assert foreign.base_name(name) == base


def test_kernels_are_attributed_to_the_candidate_or_the_allow_list() -> None:
    own = {"matmul_kernel", "_Z11gemm_kernelPKfPfi"}
    executed = [
        "matmul_kernel",
        "gemm_kernel(float const*, float*, int)",  # the demangled form of a launched NVRTC kernel
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
        "at::TensorIteratorBase&)::{lambda()#3}>(int)",
        # an fp32 accumulator cast to fp16 on the host (`acc.to(torch.float16)`)
        "void at::native::vectorized_elementwise_kernel<8, at::native::float16_copy_kernel_cuda("
        "at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, "
        "at::native::float16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, "
        "std::array<char*, 2ul>)",
        "at::cuda::(anonymous namespace)::spin_kernel(long)",
        "klineage_gate_xor",  # the gate's XOR of a sealed call's inputs between launches
        "klineage_gate_unlike",  # the gate's test that a sealed buffer holds its poison
        "Memcpy DtoD (Device -> Device)",
        "Memset (Device)",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
        "at::native::func_wrapper_t<float, at::native::sum_functor>>>(int)",
        "cupy_matmul",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas",
        "klineage_gate_judge",  # the gate's other kernels compute: never the candidate's
    ]
    assert foreign.attribute_kernels(executed, own) == [
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas",
        executed[11],
        "cupy_matmul",
        "klineage_gate_judge",
    ]


class _Event:
    """A profiler event as `gate.guards.KernelLog` reads it."""

    def __init__(self, name: str, device: str, annotation: bool = False) -> None:
        self._name, self._device, self._annotation = name, device, annotation

    def name(self) -> str:
        return self._name

    def device_type(self) -> str:
        return self._device

    def is_user_annotation(self) -> bool:
        return self._annotation

    def activity_type(self) -> str:
        return "gpu_user_annotation" if self._annotation else "kernel"


class _FakeKineto:
    """Stands in for torch's profiler: records what "ran on the GPU" while a session is on."""

    cuda = "cuda"

    def __init__(self, log: list[str]) -> None:
        self.log, self.on, self.ran, self.fail = log, False, [], None

    def start(self) -> None:
        if self.fail is not None:
            raise self.fail
        assert not self.on, "one session at a time"
        self.on, self.ran = True, []
        self.log.append("start")

    def stop(self) -> list[_Event]:
        self.on = False
        self.log.append("stop")
        return self.ran

    def run(self, *events: _Event) -> None:
        """Kernels executed now: recorded only inside a session, as CUPTI would."""
        if self.on:
            self.ran.extend(events)


def _kernel_log() -> tuple[object, _FakeKineto, list[str]]:
    pytest.importorskip("torch")
    from gate.guards import KernelLog

    calls: list[str] = []
    log = KernelLog(None)  # no GPU: binds nothing
    fake = _FakeKineto(calls)
    log.synchronize, log.available, log._kineto = (lambda: calls.append("sync")), True, fake
    return log, fake, calls


def test_the_kernel_log_records_the_kernels_of_its_windows_alone() -> None:
    log, fake, calls = _kernel_log()
    log.warm_up()
    assert calls == ["sync", "start", "sync", "stop"] and log.kernels == [] and log.windows == 0
    fake.run(_Event("gate_compare_kernel", "cuda"))  # the gate's own work between calls
    with log.window():
        fake.run(_Event("cand_kernel", "cuda"), _Event("cudaLaunchKernel", "cpu"),
                 _Event("candidate range", "cuda", annotation=True))
        with log.window():  # nested: the same session
            fake.run(_Event("sm90_xmma_gemm_cublas", "cuda"))
    with log.window():
        fake.run(_Event("cand_kernel", "cuda"), _Event("Memset (Device)", "cuda"))
    # a synchronize before each session starts and before it stops: the window holds every
    # kernel its call launched, and none from before
    assert calls[4:] == ["sync", "start", "sync", "stop"] * 2
    assert log.kernels == ["cand_kernel", "sm90_xmma_gemm_cublas", "Memset (Device)"]
    assert log.windows == 2 and log.available and log.lost is None


def test_a_profiler_that_stops_starting_after_the_warm_up_is_lost() -> None:
    log, fake, _ = _kernel_log()
    fake.fail = RuntimeError("Profiler is already enabled on this thread")
    with log.window():  # never started: unavailable (a flag), not lost
        pass
    assert not log.available and log.lost is None and "already enabled" in log.reason

    log, fake, _ = _kernel_log()
    log.warm_up()
    fake.fail = RuntimeError("Profiler is already enabled on this thread")
    with log.window():
        pass
    assert not log.available and log.lost is not None and "already enabled" in log.lost


def test_cuda_kernel_names_of_a_source() -> None:
    src = ('extern "C" __global__ void __launch_bounds__(256) saxpy(float* x) {}\n'
           "template <int B> __global__ void tiled_gemm(const half* a) {}\n"
           "__device__ float helper(float x) { return x; }\n")
    assert foreign.cuda_kernel_names(src) == {"saxpy", "tiled_gemm"}


def test_a_crossover_changes_a_few_float_elements_and_keeps_the_rest() -> None:
    torch = pytest.importorskip("torch")
    from gate import refill

    g = torch.Generator().manual_seed(0)
    base = (torch.randn(64, 64, generator=g).to(torch.bfloat16), torch.arange(10), 2.5,
            torch.randn(8, 3, 5, 5, generator=g).contiguous(memory_format=torch.channels_last))
    donor = (torch.randn(64, 64, generator=g).to(torch.bfloat16), torch.arange(10) + 7, 9.0,
             torch.randn(8, 3, 5, 5, generator=g).contiguous(memory_format=torch.channels_last))
    mixed = refill.crossover(base, donor, seed=5)
    assert mixed is not None
    changed = mixed[0] != base[0]
    assert 0 < int(changed.sum()) < base[0].numel() // 16
    assert torch.equal(mixed[0][changed], donor[0][changed])  # taken from the donor, same places
    assert torch.equal(mixed[1], base[1]) and mixed[2] == 2.5  # integers and scalars stay
    assert mixed[3].stride() == base[3].stride() and bool((mixed[3] != base[3]).any())
    assert refill.crossover((torch.arange(4),), (torch.arange(4) + 1,), seed=1) is None


def test_the_timed_calls_sample_spreads_over_distinct_pool_sets() -> None:
    """`refill.SetSample`: with as many places as sets (a lean pool: the timed set and one
    crossover) each set has a call checked, whichever calls ran; with more sets than places,
    the checked calls are of distinct sets, each a call that ran on it."""
    import random as rnd

    from gate import refill

    for trial in range(50):
        sample = refill.SetSample(2, 2, lambda out: out, rng=rnd.Random(trial))
        for call in range(41):
            sample.offer(call % 2, ("out", call))
        assert sorted(index for index, _ in sample.kept) == [0, 1]
        assert all(out[1] % 2 == index for index, out in sample.kept)
        wide = refill.SetSample(2, 4, lambda out: out, rng=rnd.Random(trial))
        for call in range(40):
            wide.offer(call % 4, ("out", call))
        sets = [index for index, _ in wide.kept]
        assert len(sets) == 2 and len(set(sets)) == 2
        assert all(out[1] % 4 == index for index, out in wide.kept)
    one = refill.SetSample(2, 1, lambda out: out, rng=rnd.Random(1))
    for call in range(9):
        one.offer(0, call)
    assert [index for index, _ in one.kept] == [0, 0]  # one set: both places on it


class _TimedEvent(_Event):
    def __init__(self, name: str, start: int, end: int) -> None:
        super().__init__(name, "cuda")
        self.start, self.end = start, end

    def start_ns(self) -> int:
        return self.start

    def end_ns(self) -> int:
        return self.end

    def duration_ns(self) -> int:
        return self.end - self.start


def test_the_kernel_log_learns_its_marker_and_keeps_the_timeline_where_asked() -> None:
    log, fake, _ = _kernel_log()
    log.warm_up()
    log.learn_marker(lambda: fake.run(_TimedEvent("at::cuda::spin_kernel", 0, 5)))
    assert log.marker == frozenset({"at::cuda::spin_kernel"}) and log.kernels == []
    assert log.time_ns == {} and log.windows == 0
    with log.window():
        fake.run(_TimedEvent("k", 10, 30))
    assert log.spans is None  # kept only where the caller asks
    log.spans = []
    with log.window():
        fake.run(_TimedEvent("k", 40, 70), _TimedEvent("at::cuda::spin_kernel", 70, 71))
    assert log.spans == [(40, 70, "k"), (70, 71, "at::cuda::spin_kernel")]
    with log.window():
        fake.run(_Event("untimed", "cuda"))  # no times on the timeline: none kept
    assert log.spans is None and log.kernels == ["k", "at::cuda::spin_kernel", "untimed"]
