"""gemm-schedule and mma-micro-kernel on GEMM kernels written in further user styles
(tests/data/cuda_gemm: alpha / beta, a bias + GELU epilogue over a 4 x 4 register block,
A @ B^T staged through `__half2` pairs, batched GEMMs over blockIdx.z (operands moved by stride
parameters, or addressed inline), double-buffered shared tiles (a ring chosen by the step's
parity, by a toggled index with register prefetch, through buffer pointers, filled by
`__pipeline_memcpy_async`), a template instantiated by its host, sizes as template values,
cuBLAS-like column-major operands with leading dimensions, a `__nv_bfloat162` pair store,
`size_t` indices with a K loop unrolled by four and its remainder, sizes in a struct or read
from device memory and named by enumerators, per-thread row pointers into flat tiles, A @ W^T
staged by 16-byte `__ldg` loads, half-precision accumulation, a grid-stride loop over outputs,
an accumulator starting from C or from beta * C, threadIdx.x along the rows, a K loop for whole
tiles of K only): each rule either fires and its output compiles for sm_90a and matches torch on
the CPU emulator at ragged small shapes, or refuses saying why. A rule that cannot keep a
kernel's result refuses it (a sum kept in fp16, a ring stored while a step reads it, blockIdx.z
moving an operand by no batch stride, a staging that reads past K)."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

import kir
from passes import PassContext, get_pass
from nvrtc_helpers import ptx_for_sm90a

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "cuda_gemm"
CTX = PassContext(facts={"arch": "sm_90"})
FULLEST = {"wgmma": True, "deep": True, "wide": True, "producer": True, "tma": True,
           "consumers": 4}
"""The TMA producer form with four multiplying warpgroups (it launches its own block of 640)."""
SHAPES = ((72, 136, 40), (130, 40, 45))


def _runs() -> dict[str, tuple[str, Callable[..., tuple[Any, Any, float]]]]:
    spec = importlib.util.spec_from_file_location("kl_cuda_gemm_runs", DATA / "runs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module.RUNS


RUNS = _runs()

# what each rule does with each kernel: None where it fires, else a part of its refusal
SCHEDULE = {
    "axpby_tiled": None, "bias_gelu_reg": None, "nt_half2": None, "template_tiles": None,
    "colmajor": None, "c_init_naive": None, "beta_init_naive": None, "axpby_xrows": None,
    "floor_k_tiled": "does not zero-fill past K and its K loop's trip count names no single",
    "gridstride_naive": "a loop that stores the outputs",
    "batched_z": None, "batched_naive": None,
    "half_acc": "accumulator acc is fp16", "naive_half_acc": "accumulator s is fp16",
    "double_buffer": None,
    "bf162_store": None,  # (pairs of columns: N even, where the probes put it)
    "sizet_unroll4": None,
    "struct_dims": None,
    "ring_toggle": None, "dims_in_memory": None, "ring_views": None, "rowptr_tiled": None,
    "template_sizes": None,
    # 16-byte chunks read whole past K (right only where K is a multiple of 8: probed there)
    "linear_nt_vec": None, "pipeline_async": None,
}
MICRO = {
    "axpby_tiled": None, "bias_gelu_reg": None, "nt_half2": None, "template_tiles": None,
    "batched_z": None, "struct_dims": None, "axpby_xrows": None, "floor_k_tiled": None,
    "half_acc": "accumulator acc is fp16",
    "double_buffer": "a ring of buffers chosen by s",
    "ring_toggle": "a ring of buffers chosen by buf", "dims_in_memory": None,
    "linear_nt_vec": None, "ring_views": "a ring of buffers chosen by k0", "rowptr_tiled": None,
    "template_sizes": None, "pipeline_async": "a ring of buffers chosen by s",
}
"""mma-micro-kernel reads shared tiles only: the kernels without them have no site."""


def _outcome(rule: Any, source: str) -> tuple[Any, str | None]:
    ir = kir.parse(source, "cuda")
    sites = [s for s in rule.sites(ir) if not s.present]
    if not sites:
        return None, "no site"
    if "refused" in sites[0].detail:
        return None, sites[0].detail["refused"]
    result = rule.optimize(ir, sites[0], CTX)
    if not result.ok:
        return None, getattr(result, "reason", str(result))
    return result.ir.text, None


def _schedule(name: str, options: dict[str, Any]) -> tuple[str | None, str | None]:
    rule = get_pass("gemm-schedule").from_options({"block": RUNS[name][0], **options})
    return _outcome(rule, (DATA / f"{name}.cu").read_text())


def _micro(name: str) -> tuple[str | None, str | None]:
    return _outcome(get_pass("mma-micro-kernel")(), (DATA / f"{name}.cu").read_text())


def _kernel(text: str) -> str:
    return next(n.name for n in kir.parse(text, "cuda").walk() if n.kind == "kernel")


def _plain(text: str, kernel: str) -> str:
    """`text` with the template `kernel` made a plain kernel of its launch's arguments (the
    emulator runs no templates, and NVRTC compiles none that nothing instantiates)."""
    head = re.search(rf"template\s*<([^<>]*)>\s*(__global__(?:[^{{;]*?\W)?{kernel}\s*\()", text)
    if head is None:
        return text
    names = [p.split()[-1] for p in head.group(1).split(",")]
    use = re.search(rf"\b{kernel}\s*<([^<>]*)>\s*<<<", text)
    consts = dict(re.findall(r"\b(\w+)\s*=\s*(\d+)", text[:use.start()]))
    values = [consts.get(a.strip(), a.strip()) for a in use.group(1).split(",")]
    body = text[:head.start()] + 'extern "C" ' + head.group(2) + text[head.end():]
    body = re.sub(rf"\b{kernel}\s*<[^<>]*>", kernel, body)
    start = body.index('extern "C" ' + head.group(2))
    end = body.index("\n}\n", start) + 3
    return (body[:start] + "".join(f"#define {n} {v}\n" for n, v in zip(names, values))
            + body[start:end] + "".join(f"#undef {n}\n" for n in names) + body[end:])


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("kl_bench_gemm_user_styles",
                                                  ROOT / "bench" / "gemm_schedule.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def _matches(text: str, name: str, shapes: tuple[tuple[int, int, int], ...] = SHAPES) -> None:
    """`text` compiled for sm_90a, then run on the emulator as its own launch runs it (the
    block and dynamic shared memory of its edited launch, the TMA maps after the arguments) at
    `shapes`, against torch."""
    from gate.cudacpu.host import emulated
    from gate.hostforms import device_source

    kernel = _kernel(text)
    text = _plain(text, kernel)
    ptx = ptx_for_sm90a(device_source(text))
    assert "mma.sync.aligned.m16n8k" in ptx or "wgmma.mma_async" in ptx
    bench = _bench()

    def launch(grid: Any, own: Any, args: list[Any]) -> None:
        with emulated():
            from experts import cudahost

            func, shared = bench._load_kernel(text, kernel, name, cudahost)
            block = bench.launched_block(text, kernel, tuple(own) + (1,) * (3 - len(own)))
            cudahost.launch(func, grid, block, shared, bench.launch_args(text, kernel, args))

    torch.manual_seed(5)
    for m, n, k in shapes:
        got, want, tol = RUNS[name][1](launch, m, n, k)
        assert (got - want).abs().max() <= tol * want.abs().max(), (name, m, n, k)


def test_each_style_is_taken_or_refused_with_its_reason() -> None:
    for name, want in SCHEDULE.items():
        text, why = _schedule(name, {})
        assert (why is None) == (want is None), (name, why)
        assert want is None or want in why, (name, why)
    for name in RUNS:
        text, why = _micro(name)
        want = MICRO.get(name, "no site")
        assert (why is None) == (want is None), (name, why)
        assert want is None or want in why, (name, why)


NO_TMA = {"batched_z": "a tensor map holds one matrix",
          "batched_naive": "a tensor map holds one matrix",
          "struct_dims": "extents are not parameters",
          "dims_in_memory": "extents are not parameters",
          "template_sizes": "extents are not parameters"}
"""Kernels the TMA maps cannot describe (a batch along blockIdx.z: a map holds one matrix;
extents in a struct's fields: the host builds the maps from parameters): their fullest form is
the producer form's without them."""


@pytest.mark.parametrize("name", [n for n, w in SCHEDULE.items() if w is None])
def test_the_static_and_fullest_forms_match_torch_on_the_emulator(name: str) -> None:
    text, why = _schedule(name, {})
    assert why is None, why
    _matches(text, name)
    if name in NO_TMA:
        assert NO_TMA[name] in _schedule(name, FULLEST)[1]
    text, why = _schedule(name, {**FULLEST, "tma": name not in NO_TMA})
    assert why is None, why
    assert '"virtual": 640' in text or '"consumers": 4' in text
    _matches(text, name, SHAPES[:1])


@pytest.mark.parametrize("name", [n for n, w in MICRO.items() if w is None])
def test_the_micro_kernel_matches_torch_on_the_emulator(name: str) -> None:
    text, why = _micro(name)
    assert why is None, why
    _matches(text, name, SHAPES[1:])


def test_sums_kept_in_half_and_a_z_that_is_no_batch_are_refused_by_every_form() -> None:
    # each would have been rewritten into a kernel of another result: the fp16 sums widened to
    # fp32 (or not compiled at all)
    for options in ({}, {"deep": True}, {"wgmma": True}, FULLEST):
        for name in ("half_acc", "naive_half_acc"):
            text, why = _schedule(name, options)
            assert text is None and SCHEDULE[name] in why, (name, options, why)
    # a double accumulator is kept off the fp32 tensor cores too
    source = (DATA / "colmajor.cu").read_text().replace("float s = 0.0f;", "double s = 0.0;")
    rule = get_pass("gemm-schedule").from_options({"block": "32x8"})
    assert "accumulator s is double" in _outcome(rule, source)[1]
    # blockIdx.z moving an operand other than by a batch stride of integer parameters
    rule = get_pass("gemm-schedule").from_options({"block": "16x16"})
    source = (DATA / "batched_z.cu").read_text()
    square = source.replace("A + blockIdx.z * strideA", "A + blockIdx.z * blockIdx.z * strideA")
    assert "other than a multiple of one offset" in _outcome(rule, square)[1]
    odd = source.replace("A + blockIdx.z * strideA", "A + blockIdx.z * (strideA + 5)")
    assert "batch stride is no product" in _outcome(rule, odd)[1]


def test_column_major_leading_dimensions_aligned_for_16_byte_copies() -> None:
    # lda = m + 3: with m = 61 every leading dimension is a multiple of 8 elements
    text, why = _schedule("colmajor", {"wgmma": True, "deep": True})
    assert why is None, why
    _matches(text, "colmajor", ((61, 48, 63),))


def test_the_template_launch_keeps_its_arguments_in_the_edited_host_lines() -> None:
    text, why = _schedule("template_tiles", FULLEST)
    assert why is None, why
    launch = text[text.index("void launch("):]
    assert "cudaFuncSetAttribute(tiled_gemm<BM, BN, BK>," in launch
    assert "reinterpret_cast<const void*>(tiled_gemm<BM, BN, BK>)" in launch
    # the de-optimization finds those lines again and gives the launch back as written
    rule = get_pass("gemm-schedule").from_options({"block": "256", **FULLEST})
    ir = kir.parse(text, "cuda")
    done = next(s for s in rule.sites(ir) if s.present)
    back = rule.deoptimize(ir, done, CTX)
    assert back.ok, back
    assert "kl_gs_" not in back.ir.text
    assert "tiled_gemm<BM, BN, BK><<<grid, BM * BN>>>(A, B, C, M, N, K);" in back.ir.text


def test_a_ring_read_while_a_step_stores_it_or_chosen_by_nothing_is_refused() -> None:
    source = (DATA / "double_buffer.cu").read_text()
    rule = get_pass("gemm-schedule").from_options({"block": "16x16"})
    # each step stores its own tiles into the buffer it reads, between the same barriers: the
    # values are right in one thread's order, but other threads may read them before
    racy = source.replace("if (s + 1 < steps) {\n      const int k0 = (s + 1) * KT;",
                          "{\n      const int k0 = s * KT;")
    racy = racy.replace("sa[nxt]", "sa[cur]").replace("sb[nxt]", "sb[cur]")
    assert racy.count("sa[cur]") == 2
    assert "stored between the barriers where step 0 reads it" in _outcome(rule, racy)[1]
    # one buffer read while the next step's tiles are stored into it
    one = source.replace("const int cur = s & 1, nxt = cur ^ 1;", "const int cur = 0, nxt = 0;")
    assert "depends on nothing the step changes" in _outcome(rule, one)[1]


@pytest.mark.parametrize("name", ["double_buffer", "ring_toggle", "ring_views", "sizet_unroll4",
                                  "batched_naive", "batched_z", "struct_dims", "dims_in_memory",
                                  "template_sizes", "pipeline_async", "linear_nt_vec",
                                  "bf162_store"])
def test_the_de_optimization_reads_back_to_the_same_output(name: str) -> None:
    # (a body ending in a block kept one more blank line at each round trip)
    text, why = _schedule(name, {})
    assert why is None, why
    rule = get_pass("gemm-schedule").from_options({"block": RUNS[name][0]})
    ir = kir.parse(text, "cuda")
    back = rule.deoptimize(ir, next(s for s in rule.sites(ir) if s.present), CTX)
    assert back.ok, back
    assert "kl_gs_" not in back.ir.text
    again = rule.optimize(back.ir, next(s for s in rule.sites(back.ir) if not s.present), CTX)
    assert again.ok and again.ir.text == text


def test_a_staging_reading_past_k_at_every_size_is_refused() -> None:
    # 16-byte chunks are probed again at sizes that are multiples of 8; one that copies a chunk
    # starting at K itself reads past K there too
    source = (DATA / "linear_nt_vec.cu").read_text()
    bad = source.replace("if (m0 + r < M && k0 + c < K)", "if (m0 + r < M && k0 + c < K + 8)")
    assert bad != source
    rule = get_pass("gemm-schedule").from_options({"block": "256"})
    assert "the staging of the first tile reads past K" in _outcome(rule, bad)[1]
