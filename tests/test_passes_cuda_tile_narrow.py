"""`mma-micro-kernel` on fp32 shared tiles filled with converted 16-bit values: where every
value stored is provably exact in the 16-bit type the tiles are kept as that type (stores
convert, the user's other reads convert back) and read by ldmatrix; the rewrite of an
implicit-GEMM convolution (a gathered tile, through its own host) and of a 2x2-blocked GEMM
with a second use of its tile compute what torch computes on the CPU emulator and compile with
NVRTC for sm_90a; the de-optimization restores the fp32 tiles and the round trip is exact;
values that are not provably exact are refused with the reason."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

import kir
from nvrtc_helpers import ptx_for_sm90a
from passes import get_pass
from passes.cuda.gemm_eval import find_gemm_tiles
from passes.cuda.tile_narrow import exact_kind, holds
from passes.roundtrip import roundtrip
from test_passes_cuda_mma_tile import CTX, DATA, _emulated, _refusal, _rewrite

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
CONV = ROOT / "bench" / "styles" / "cuda" / "cu_conv_igemm"
RELU = "relu_rowsum_2x2_fp16.cu"


def _case(folder: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"case_{folder.name}", folder / "case.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _relative(got: Any, want: Any) -> float:
    return float(torch.linalg.vector_norm(got.double() - want.double())
                 / torch.linalg.vector_norm(want.double()))


def _trip(text: str) -> Any:
    rule = get_pass("mma-micro-kernel")()
    ir = kir.parse(text, "cuda")
    trip = roundtrip(rule, ir, next(s for s in rule.sites(ir) if s.present), CTX)
    assert trip.same, trip.forward
    return trip.backward.ir.text


# ---------------------------------------------------------------------------------------------
# an implicit-GEMM convolution: a gathered A tile, run through its own host


@pytest.mark.parametrize("wgmma", [False, True], ids=["mma-sync", "wgmma"])
def test_the_convolution_keeps_its_tiles_as_bf16_and_matches_torch_through_its_host(
        wgmma: bool) -> None:
    cudacpu = pytest.importorskip("gate.cudacpu")
    source = (CONV / "conv_igemm.cu").read_text()
    rule = get_pass("mma-micro-kernel").from_options({"wgmma": "true"} if wgmma else {})
    ir = kir.parse(source, "cuda")
    site = next(s for s in rule.sites(ir) if not s.present)
    assert site.detail["dtype"] == "f32" and site.detail["narrowed"] == ["As", "Bs"]
    result = rule.optimize(ir, site, CTX)
    assert result.ok, result
    out = result.ir.text
    for tile in ("As", "Bs"):
        assert re.search(rf"kl_tc_half_of<float> {tile}\[", out), tile
    # the gather's guarded temporary and the weights' ternary are converted where stored
    assert "As[kk][m] = kl_tc_narrow<true>(v);" in out
    assert "Bs[kk][n] = kl_tc_narrow<true>((gk < GK" in out
    ptx = ptx_for_sm90a(out)
    if wgmma:
        assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in ptx
    else:
        assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    back = _trip(out)
    assert "kl_tc_" not in back and "__shared__ __align__(16) float As[BK][BM];" in back
    case = _case(CONV)
    tol = case.TOLERANCE["bf16"]
    host = (CONV / "conv_igemm.py").read_text()
    for seed in (3, 4):
        inputs = case.make_inputs(case.SMALL_SHAPES["default"], seed, "cpu")
        want = case.reference(*inputs)
        for what, text in (("start", source), ("rewrite", out), ("de-optimized", back)):
            got = cudacpu.run_host(text, host, *inputs, stem="conv_igemm")
            assert got.shape == want.shape
            assert _relative(got, want) <= tol, (what, _relative(got, want))


# ---------------------------------------------------------------------------------------------
# a 2x2-blocked GEMM whose A tile is relu'd on the way in and also written back out


def _relu_mm(lib: Any, m: int, n: int, k: int) -> None:
    a, b = torch.randn(m, k).to(torch.float16), torch.randn(k, n).to(torch.float16)
    c = torch.zeros(m, n, dtype=torch.float16)
    r = torch.zeros(m, k, dtype=torch.float16)
    lib.launch(lib.kernels[0], ((n + 31) // 32, (m + 31) // 32), (16, 16), 0, [a, b, c, r, m, n, k])
    relu = torch.relu(a.float())
    assert torch.equal(r.float(), relu)  # the tile's other reader sees the values it stored
    want = relu @ b.float()
    assert _relative(c.float(), want) <= 2e-3, _relative(c.float(), want)


def test_a_second_reader_of_the_tile_reads_it_widened_and_the_gemm_matches_torch() -> None:
    source = (DATA / RELU).read_text()
    site, result = _rewrite(source)
    assert site.detail["block"] == [16, 16] and site.detail["narrowed"] == ["tA", "tB"]
    assert result.ok, result
    out = result.ir.text
    assert "__float2half(kl_tc_widen<false>(tA[ty][tx]))" in out
    assert "tA[r][k] = kl_tc_narrow<false>(a);" in out
    ptx = ptx_for_sm90a(out)
    assert "ldmatrix" in ptx and "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    torch.manual_seed(5)
    for text in (source, out):
        lib = _emulated(text)
        _relu_mm(lib, 40, 72, 37)  # partial tiles in M, N and K
    back = _trip(out)
    assert back.count("kl_tc_") == 0 and "__shared__ __align__(16) float tA[TM][TK + 8];" in back
    _relu_mm(_emulated(back), 40, 72, 37)


def test_a_tile_declared_beside_another_array_stays_fp32_and_is_packed_per_fragment() -> None:
    source = (DATA / RELU).read_text().replace("__shared__ float tB[TK][TN];",
                                               "__shared__ float tB[TK][TN], spare[4];")
    site, result = _rewrite(source)
    assert site.detail["narrowed"] == ["tA"]
    assert "declared together with spare" in site.detail["kept_fp32"]
    assert result.ok, result
    out = result.ir.text
    assert "kl_tc_half_of<float> tA[" in out and "float tB[TK][TN], spare[4];" in out
    assert "reinterpret_cast<const float*>(tB)" in out
    ptx_for_sm90a(out)
    torch.manual_seed(6)
    _relu_mm(_emulated(out), 40, 72, 37)
    _trip(out)


# ---------------------------------------------------------------------------------------------
# what a tile holds: read from the code


def _kind(source: str, array: str) -> str:
    ir = kir.parse(source, "cuda")
    (tile,), _ = find_gemm_tiles(ir, (16, 16))
    return exact_kind(ir, tile.kernel, array, tile.region)


STAGE_A = "if (row0 + r < M && kt + k < K) a = fmaxf(__half2float(A[(size_t)(row0 + r) * K + kt + k]), 0.0f);"


@pytest.mark.parametrize("value", [
    "-fabsf(__half2float(A[(size_t)(row0 + r) * K + kt + k]))",
    "__half2float(__float2half(3.0f * __half2float(A[(size_t)(row0 + r) * K + kt + k])))",
    "fminf(-2.0f, __half2float(A[(size_t)(row0 + r) * K + kt + k]))",
], ids=["negated-magnitude", "rounded-to-half", "clamped-to-exact-constant"])
def test_selections_negations_roundings_and_exact_constants_are_exact(value: str) -> None:
    source = (DATA / RELU).read_text().replace(STAGE_A, f"if (row0 + r < M && kt + k < K) a = {value};")
    assert _kind(source, "tA") == "fp16"


def test_values_that_are_not_provably_exact_are_refused_with_the_reason() -> None:
    source = (DATA / RELU).read_text()
    scaled = source.replace("a = fmaxf(__half2float(", "a = 0.5f * fmaxf(__half2float(")
    assert "tA holds a value computed as 0.5f * fmaxf" in _refusal(scaled)
    truncated = source.replace("a = fmaxf(__half2float(", "a = (int)fmaxf(__half2float(")
    assert "tA holds a value cast to int" in _refusal(truncated)
    inexact = source.replace("float a = 0.0f;", "float a = 0.1f;")
    assert "holds the constant 0.1, not exact in fp16" in _refusal(inexact)
    summed = source.replace("tA[r][k] = a;", "tA[r][k] = a;\n      tA[r][k] += 0.0f;")
    assert "tA is updated in place (`+=`)" in _refusal(summed)
    addressed = source.replace(
        "tB[k][n] = (kt + k < K",
        "*reinterpret_cast<float*>(&tB[k][n]) = (kt + k < K")
    assert "the address of the shared tile tB is taken" in _refusal(addressed)
    macro = source.replace("#define TK 16", "#define TK 16\n#define TB_AT(k, n) tB[k][n]") \
        .replace("tB[k][n] = (kt + k < K", "TB_AT(k, n) = (kt + k < K")
    assert "tB is named inside the macro TB_AT" in _refusal(macro)
    fp32 = source.replace("const __half* __restrict__ B", "const float* __restrict__ B") \
        .replace("? __half2float(B[", "? (B[")
    assert "holds elements of B (f32)" in _refusal(fp32)


def test_which_constants_each_16_bit_type_holds() -> None:
    assert holds("bf16", 0.0) and holds("bf16", -2.0) and holds("bf16", 1.5) and holds("bf16", 65536.0)
    assert not holds("bf16", 0.1) and not holds("bf16", 1.0 + 2 ** -10)
    assert holds("fp16", 1.0 + 2 ** -10) and holds("fp16", 65504.0)
    assert not holds("fp16", 65536.0) and not holds("fp16", 0.1)


def _conv_on_the_gpu() -> tuple[Any, Any, Any]:
    """(start, rewritten, case) launchers for cu_conv_igemm on the GPU: the start and its
    mma-micro-kernel rewrite (tiles narrowed to bf16 first)."""
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    cudahost = pytest.importorskip("experts.cudahost")

    source = (CONV / "conv_igemm.cu").read_text()
    ir = kir.parse(source, "cuda")
    rule = get_pass("mma-micro-kernel")()
    result = rule.optimize(ir, next(s for s in rule.sites(ir) if not s.present), CTX)
    assert result.ok, result
    funcs = [cudahost.get_function(cudahost.compile_source(text, name=f"{tag}.cu"), "conv3x3_igemm")
             for tag, text in (("start", source), ("mma", result.ir.text))]
    case = _case(CONV)
    x, w = case.make_inputs(case.SHAPES["default"], 0, "cuda")
    n, c, h, wd = x.shape
    k = w.shape[0]
    y = torch.empty((n, k, h, wd), device="cuda", dtype=x.dtype)

    def run(func: Any) -> Any:
        cudahost.launch(func, ((n * h * wd + 63) // 64, (k + 63) // 64), 256, 0,
                        (x, w, y, n, c, h, wd, k), torch.cuda.current_stream())
        return y

    return (lambda: run(funcs[0])), (lambda: run(funcs[1])), (case, x, w)


@pytest.mark.gpu
def test_on_the_gpu_the_convolution_rewrite_is_correct() -> None:
    _, rewritten, (case, x, w) = _conv_on_the_gpu()
    assert _relative(rewritten(), case.reference(x, w)) <= case.TOLERANCE["bf16"]


@pytest.mark.gpu
@pytest.mark.xfail(strict=True, reason="open: on an H200 the rewrite is no faster than the start "
                   "(1.0965 against 1.1006 ms; 1.098 -> 1.040 ms in the search, styles-cuda.notes.md): "
                   "the gather's per-element index arithmetic bounds this kernel, not its products")
def test_on_the_gpu_the_convolution_rewrite_is_faster_than_the_start() -> None:
    from triton.testing import do_bench

    start, rewritten, _ = _conv_on_the_gpu()
    t_start, t_rewritten = (do_bench(f, return_mode="median") for f in (start, rewritten))
    assert t_rewritten * 1.5 < t_start, (t_start, t_rewritten)
