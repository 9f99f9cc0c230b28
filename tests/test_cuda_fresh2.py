"""CUDA kernels written the way users write them, in styles the repository's own kernels and the
earlier style sets do not use (tests/data/cuda_fresh2: each a folder with its `.cu`, its host
module and its case): flat 1-D shared tiles, a tile body in a `template <int BM, int BN>
__device__` helper, leading dimensions and a column-major B, float2 loads, a batched GEMM that
moves its pointers to its batch, an alpha/beta/bias epilogue written over C, warp shuffles with
atomics, a two-level row sum, a softmax over a dynamic shared buffer halving blockDim.x,
Welford's layernorm, a flat padded half tile, a half2 grid-stride loop, an NHWC implicit-GEMM
convolution, the volatile last-warp reduction, column sums and a warp-per-row GEMV.

On the CPU: what these kernels showed, each failing before its fix. On a GPU (`-m gpu`): every
rewrite the CUDA rules make of every kernel runs through the kernel's own host and matches the
start, and the device gate passes the starts and rewrites of the kernels that showed defects.
"""
from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

import kir
from cuda_style_helpers import context, emulated_error, rule_output, start
from nvrtc_helpers import ptx_for_sm90a
from passes import Applied, get_pass
from passes.cuda import recognize as R

from test_cuda_fresh_styles import _renamed

torch = pytest.importorskip("torch")
cudacpu = pytest.importorskip("gate.cudacpu")

import gate  # noqa: E402

FRESH2 = Path(__file__).resolve().parent / "data" / "cuda_fresh2"
KERNELS = sorted(p.name for p in FRESH2.iterdir() if (p / "case.py").is_file())
RULES = ("row-cache", "warp-shuffle-reduce", "cp-async-pipeline", "vectorize-global",
         "launch-bounds", "pragma-unroll", "mma-micro-kernel", "row-registers", "launch-threads",
         "restrict-readonly", "gemm-schedule")
"""The role-based forward rules (bench/cuda_roles.py's, with the ones it names besides)."""
DEFECTS = ("f2_transpose_half_pad", "f2_gemm_alpha_bias", "f2_conv_nhwc_igemm",
           "f2_bgemm_ptrbump", "f2_gemm_tmpl_unroll")
"""The kernels whose starts or rewrites showed a defect."""


@pytest.fixture(autouse=True)
def _no_nvrtc_in_the_emulated_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLINEAGE_CUDACPU_NVRTC", "0")


def _source(folder: str) -> str:
    return start(FRESH2 / folder)[0].read_text()


# -- the emulator ----------------------------------------------------------------------------
def test_a_shared_tile_sized_by_arithmetic_in_parentheses_runs_on_the_emulator() -> None:
    # `__shared__ __half tile[TD * (TD + 1)];` was refused as "a declaration with an initializer"
    err, tol = emulated_error(FRESH2 / "f2_transpose_half_pad", _source("f2_transpose_half_pad"))
    assert err <= tol
    from gate.cudacpu import prepass  # noqa: PLC0415

    out = prepass.rewrite('__global__ void k() { __shared__ float t[4 * (4 + 1)][(2)]; }')
    assert "shared_var<float [4 * (4 + 1)][(2)]," in out.text
    for initialized in ("__shared__ float t[2] = {0};", "__shared__ int n = (1);"):
        with pytest.raises(prepass.Unsupported, match="__shared__ declaration"):
            prepass.rewrite(f"__global__ void k() {{ {initialized} }}")


@pytest.mark.slow
def test_the_emulate_tier_replays_a_host_copy_of_a_sealed_input() -> None:
    # run() writes the result over `c.clone()`: in the sealed call the clone (of an input that
    # holds poison between launches) must be made again from the real values at the launch, as
    # on the device tier. The emulated host's tensors were not told as tensors: the clone was
    # never replayed and the start was refused as computing outside its kernels.
    folder = FRESH2 / "f2_gemm_alpha_bias"
    cu, host = start(folder)
    verdict = gate.check(cu.read_text(), "cuda", folder, "emulate", path=cu, host=host, cache=False)
    assert verdict.ok, verdict.reason


# -- smem-staging's de-optimization ----------------------------------------------------------
def _deoptimized(source: str) -> list[str]:
    ir = kir.parse(source, "cuda")
    p = get_pass("smem-staging")()
    out = []
    for site in [s for s in p.sites(ir) if s.present]:
        result = p.deoptimize(ir, site)
        if isinstance(result, Applied):
            out.append(result.ir.text)
    return out


@pytest.mark.parametrize("folder", ["f2_gemm_alpha_bias", "f2_gemm_tmpl_unroll"])
def test_each_direct_read_the_staging_deoptimization_writes_compiles_and_keeps_the_answer(
        folder: str) -> None:
    # alpha_bias's fill reads `ar`, declared in the fill's own loop body: out of scope at the
    # reads (NVRTC: identifier "ar" is undefined), and computed from the fill's row index
    outs = _deoptimized(_source(folder))
    assert outs
    for out in outs:
        ptx_for_sm90a(out)
        err, tol = emulated_error(FRESH2 / folder, out)
        assert err <= tol


LOCAL_OF_INDEX = r"""
extern "C" __global__ void k(const float* A, float* C, int n) {
  __shared__ float s[16][16];
  const int ty = threadIdx.y, tx = threadIdx.x;
  const int row = blockIdx.y * 16 + ty;
  s[ty][tx] = A[row * n + tx];
  __syncthreads();
  float acc = 0.f;
  for (int k = 0; k < 16; ++k) acc += s[READ][k];
  C[row * n + tx] = acc;
}
"""


def test_a_fill_local_computed_from_an_index_is_inlined_only_where_the_read_keeps_that_index() -> None:
    # `row` stands for the fill's `ty`: right at `s[ty][k]`, wrong at `s[k][ty]`
    assert len(_deoptimized(LOCAL_OF_INDEX.replace("READ", "ty"))) == 1
    assert _deoptimized(LOCAL_OF_INDEX.replace("READ][k", "k][ty")) == []


# -- staging in the spellings these kernels use ----------------------------------------------
@pytest.mark.parametrize("rename", [False, True], ids=["as-written", "renamed"])
def test_stagings_of_an_if_else_copy_and_of_a_template_helper(rename: bool) -> None:
    def stagings(folder: str) -> list[dict]:
        text = _source(folder)
        return R.roles(kir.parse(_renamed(text) if rename else text, "cuda"))["stagings"]

    # `if (ok) a_s[y][x] = A[...]; else a_s[y][x] = 0.0f;` is the guarded copy a ternary is
    got = stagings("f2_bgemm_ptrbump")
    assert [(s["form"], s["fill"]) for s in got] == [("ternary", "0.0f")] * 2
    assert all("<" in s["guard"] and not s["guard"].startswith("!") for s in got)
    # the tiles of `template <int BM, int BN> __device__ void gemm_tile(...)`, called once
    assert [s["form"] for s in stagings("f2_gemm_tmpl_unroll")] == ["ternary", "ternary"]
    ir = kir.parse(_source("f2_gemm_tmpl_unroll"), "cuda")
    unit = R.Unit(ir)
    tiles = unit.shared_arrays(unit.functions["gemm_tile"])
    assert {n: a.extents for n, a in tiles.items()} == {"sa": (8, 64), "sb": (8, 64)}


TWO_INSTANCES = r"""
template <int BM>
__device__ void tile(const float* A, float* C, int K) {
  __shared__ float s[BM];
  s[threadIdx.x] = A[threadIdx.x];
  __syncthreads();
  C[threadIdx.x] = s[BM - 1 - threadIdx.x];
}
extern "C" __global__ void k64(const float* A, float* C, int K) { tile<64>(A, C, K); }
extern "C" __global__ void k32(const float* A, float* C, int K) { tile<32>(A, C, K); }
"""


def test_a_tile_sized_by_a_template_of_two_instantiations_has_no_extent() -> None:
    unit = R.Unit(kir.parse(TWO_INSTANCES, "cuda"))
    assert unit.shared_arrays(unit.functions["tile"])["s"].extents == (None,)


@pytest.mark.parametrize("folder", ["f2_bgemm_ptrbump", "f2_gemm_tmpl_unroll"])
def test_cp_async_pipelines_the_copies_and_keeps_the_answer(folder: str) -> None:
    # refused before ("stores to memory besides its copies"; no staging in the helper)
    out, applied, refusals = rule_output(FRESH2 / folder, "cp-async-pipeline")
    assert applied == 1, refusals
    assert "cp.async" in ptx_for_sm90a(out)
    err, tol = emulated_error(FRESH2 / folder, out)
    assert err <= tol


# -- on a GPU --------------------------------------------------------------------------------
def _rewrites(folder: Path) -> dict[str, str]:
    """Every rewrite of the kernel: each rule alone (where it acts), all of those one after
    another, and each de-optimization smem-staging makes."""
    cu, host = start(folder)
    ir = kir.parse_file(cu)
    ctx = context(ir, host)
    out: dict[str, str] = {}
    for rule in RULES:
        text, applied, _ = rule_output(folder, rule)
        if applied:
            out[rule] = text
    combined = ir
    for rule in out:
        p = get_pass(rule)()
        for _ in range(8):
            result = next((r for r in (p.optimize(combined, s, ctx) for s in p.sites(combined)
                                       if not s.present) if isinstance(r, Applied)), None)
            if result is None:
                break
            combined = result.ir
    if len(out) > 1:
        out["all of the above"] = combined.text
    for i, text in enumerate(_deoptimized(cu.read_text())):
        out[f"smem-staging de-optimized {i}"] = text
    return out


def _host_run(folder: Path, source: str, where: Path, inputs: tuple) -> object:
    """The folder's host module, run on `inputs` with `source` as its `.cu` (a copy of both
    in `where`)."""
    cu, host = start(folder)
    where.mkdir(parents=True)
    (where / cu.name).write_text(source)
    shutil.copy(host, where / host.name)
    spec = importlib.util.spec_from_file_location(f"fresh2_{folder.name}_{where.name}",
                                                  where / host.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.run(*inputs)
    torch.cuda.synchronize()
    return out


def _rel(a: object, b: object) -> float:
    return float(torch.linalg.vector_norm(a.double() - b.double())
                 / max(float(torch.linalg.vector_norm(b.double())), 1e-30))


_GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@_GPU
@pytest.mark.parametrize("folder", KERNELS)
def test_every_rewrite_matches_the_start_through_its_host_on_the_gpu(folder: str,
                                                                      tmp_path: Path) -> None:
    path = FRESH2 / folder
    case = gate.load_case(path)
    rewrites = _rewrites(path)
    wrong = []
    for label, shapes in (("small", case.small_shapes), ("real", case.shapes)):
        shape = dict(next(iter(shapes.values())))
        tol = case.tolerance_for(shape["dtype"])
        inputs = tuple(case.module().make_inputs(shape, 11, "cuda"))
        ref = case.module().reference(*inputs)
        first = _host_run(path, _source(folder), tmp_path / f"start_{label}", inputs)
        assert _rel(first, ref) <= tol, f"the start at the {label} shape"
        for i, (rule, text) in enumerate(rewrites.items()):
            out = _host_run(path, text, tmp_path / f"r{i}_{label}", inputs)
            err = _rel(out, first)
            if out.shape != first.shape or err > tol:
                wrong.append(f"{rule} at the {label} shape: {err:.3g} from the start (tol {tol})")
    assert not wrong, wrong


@pytest.mark.gpu
@pytest.mark.slow
@_GPU
@pytest.mark.parametrize("folder", DEFECTS)
def test_the_device_gate_passes_the_start_and_every_rewrite(folder: str) -> None:
    path = FRESH2 / folder
    cu, host = start(path)
    failed = []
    for rule, text in {"start": cu.read_text(), **_rewrites(path)}.items():
        verdict = gate.check(text, "cuda", path, "device", path=cu, host=host, cache=False,
                             timeout=300)
        if not verdict.ok:
            failed.append(f"{rule}: {verdict.reason}")
    assert not failed, failed
