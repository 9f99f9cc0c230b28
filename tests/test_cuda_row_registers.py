"""`row-registers` on the CUDA style tier's row kernels and on row kernels written here in other
styles: the row the passes re-read is loaded once into registers (16 bytes per load, every
load of a thread's part in flight together), the output compiles with NVRTC for sm_90a and,
run on the CPU (`gate.cudacpu`), matches torch at small shapes (rows that fit, rows past the
registers, rows off a 16-byte boundary); the de-optimization gives the kernel back (round
trip); refusals say why."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import kir
from kir.embedded import cuda_unit
from nvrtc_helpers import ptx_for_sm90a
from passes import Applied, Skipped, get_pass
from passes.cuda.row_registers import register_rows
from passes.roundtrip import roundtrip

from test_cuda_role_rules import CTX, _apply_all, _gen, _lib

cudacpu = pytest.importorskip("gate.cudacpu")

import gate  # noqa: E402
from gate import hostforms  # noqa: E402

STYLES = Path(__file__).resolve().parents[1] / "bench" / "styles" / "cuda"

# log-softmax over fp32 rows: `__ldg` reads, an `unsigned` index named like a column, a row
# pointer built from a row-stride parameter, a constant-size block (a #define the loops step
# by), the output written at the matrix's offset, an online max + rescaled sum in two passes
LOG_SOFTMAX = r"""
#define THREADS 128
__global__ void logsm(float* __restrict__ out, const float* __restrict__ in, unsigned ld, unsigned width) {
  __shared__ float scratch[THREADS];
  const unsigned rowid = blockIdx.x;
  const float* line = in + (size_t)rowid * ld;
  float top = -3.0e38f, total = 0.f;
  for (unsigned col = threadIdx.x; col < width; col += THREADS) {
    const float z = __ldg(&line[col]);
    if (z > top) { total = total * __expf(top - z); top = z; }
    total += __expf(z - top);
  }
  scratch[threadIdx.x] = top;
  __syncthreads();
  for (unsigned half = THREADS / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + half]);
    __syncthreads();
  }
  const float gmax = scratch[0];
  __syncthreads();
  scratch[threadIdx.x] = total * __expf(top - gmax);
  __syncthreads();
  for (unsigned half = THREADS / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) scratch[threadIdx.x] += scratch[threadIdx.x + half];
    __syncthreads();
  }
  const float lse = gmax + __logf(scratch[0]);
  for (unsigned col = threadIdx.x; col < width; col += THREADS)
    out[(size_t)rowid * ld + col] = __ldg(&line[col]) - lse;
}
"""

# fp16 RMS-style row scaling with a weight, in a persistent kernel (a grid-stride loop over
# rows, the passes inside it), the block's size read from blockDim through a local, the passes
# as `for` loops over a `long` index, warp shuffles of the user's own for the sum of squares
HALF_RMS = r"""
#include <cuda_fp16.h>
__device__ float warp_fold(float a) {
  for (int d = 16; d > 0; d /= 2) a += __shfl_xor_sync(0xffffffff, a, d);
  return a;
}
__global__ void scale_rows(const half* src, const half* gain, half* dst, int nrows, long dim) {
  __shared__ float lanes[32];
  const long nthr = blockDim.x;
  for (int r = blockIdx.x; r < nrows; r += gridDim.x) {
    const half* a = src + r * dim;
    half* b = dst + r * dim;
    float sq = 0.f;
    for (long k = threadIdx.x; k < dim; k += nthr) { float t = __half2float(a[k]); sq += t * t; }
    sq = warp_fold(sq);
    if ((threadIdx.x & 31) == 0) lanes[threadIdx.x >> 5] = sq;
    __syncthreads();
    float all = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) all += lanes[w];
    __syncthreads();
    const float inv = rsqrtf(all / dim + 1e-5f);
    for (long k = threadIdx.x; k < dim; k += nthr)
      b[k] = __float2half(__half2float(a[k]) * inv * __half2float(gain[k]));
  }
}
"""


def _registered(source: str, path: Path | None = None, **options) -> str:  # noqa: ANN003
    """The kernel after the rule acted once (`path`: where it lives, its host beside it)."""
    p = get_pass("row-registers").from_options(options)
    ir = kir.parse(source, "cuda", path=path)
    results = [p.optimize(ir, s, CTX) for s in p.sites(ir) if not s.present]
    assert [type(r) for r in results] == [Applied], results
    out = results[0].ir.text
    assert len(register_rows(kir.parse(out, "cuda"))) == 1
    return out


def _round_trip(text: str, path: Path | None = None) -> None:
    p = get_pass("row-registers")()
    ir = kir.parse(text, "cuda", path=path)
    present = [s for s in p.sites(ir) if s.present]
    assert len(present) == 1 and not [s for s in p.sites(ir) if not s.present]
    trip = roundtrip(p, ir, present[0], CTX)
    assert trip.same, (trip.backward, trip.forward)


@pytest.mark.parametrize("hoist", [False, True], ids=["row", "row+weights"])
def test_the_style_tiers_layernorm_holds_its_row_in_registers(hoist: bool) -> None:
    folder = STYLES / "cu_layernorm"
    out = _registered((folder / "layernorm.cu").read_text(), folder / "layernorm.cu", hoist=hoist)
    assert out.count("*reinterpret_cast<const uint4*>(&xr[") == 1  # the row is read once
    # the write pass moves the weight, the bias and the output 16 bytes at a time; with `hoist`
    # the weight and the bias are loaded with the row, before the statistics
    assert "*reinterpret_cast<uint4*>(&yr[" in out
    loads = [out.index(f"*reinterpret_cast<const uint4*>(&{w}[") for w in ("gamma", "beta")]
    assert (max(loads) < out.index("block_sum(s, buf)")) == hoist
    ptx_for_sm90a(out)
    _round_trip(out, folder / "layernorm.cu")
    trip = get_pass("row-registers")()
    ir = kir.parse(out, "cuda", path=folder / "layernorm.cu")
    back = trip.deoptimize(ir, next(s for s in trip.sites(ir) if s.present), CTX)
    assert isinstance(back, Applied) and back.options == {"vectors": 4, **({"hoist": True} if hoist else {})}
    case = gate.load_case(folder)
    for seed in (1, 2):
        shape = {"M": 7, "N": 600, "dtype": "bf16"} if seed == 1 else {"M": 5, "N": 8200, "dtype": "bf16"}
        inputs = tuple(case.module().make_inputs(shape, seed, "cpu"))
        got = cudacpu.run_host(out, folder / "layernorm.py", *inputs, stem="layernorm")
        ref = case.module().reference(*inputs)
        assert torch.allclose(got.float(), ref.float(), atol=3e-2, rtol=1e-2), shape


def test_the_style_tiers_softmax_and_rmsnorm_in_their_own_hosts() -> None:
    unit = cuda_unit(STYLES / "cu_softmax_rows" / "softmax_rows.py")  # a load_inline source
    out = hostforms.device_source(_registered(unit.source))
    ptx_for_sm90a(out)
    lib = _lib(out, "softmax_rows.cu")
    for cols in (300, 2048, 2050, 9000):  # 2050, 300: odd rows start off 16 bytes; 9000 > 32 * 256
        x = (4 * torch.randn(6, cols, generator=_gen(cols))).half()
        y = torch.zeros_like(x)
        lib.launch("softmax_rows_kernel", 6, 256, 256 * 4, [x, y, cols])
        assert torch.allclose(y.float(), torch.softmax(x.float(), 1), atol=2e-3), cols
    unit = cuda_unit(STYLES / "cu_rmsnorm" / "rmsnorm.py")  # NVRTC + cuda.bindings, source in the module
    out = _registered(unit.source)
    ptx_for_sm90a(out)
    _round_trip(out)
    case = gate.load_case(STYLES / "cu_rmsnorm")
    shape = dict(next(iter(case.small_shapes.values())))
    inputs = tuple(case.module().make_inputs(shape, 3, "cpu"))
    host = unit.held.splice(out)
    got = cudacpu.run_host(out, host, *inputs, stem="rmsnorm")
    assert torch.allclose(got, case.module().reference(*inputs), atol=1e-5, rtol=1e-4)



def test_softmax_keeps_its_exponentials_for_the_write_pass() -> None:
    unit = cuda_unit(STYLES / "cu_softmax_rows" / "softmax_rows.py")
    plain = hostforms.device_source(_registered(unit.source, vectors=2))
    kept = _registered(unit.source, vectors=2, reuse=True)
    _round_trip(kept)
    kept = hostforms.device_source(kept)
    assert "float kl_reg0_e0[2][8];" in kept
    assert kept.count("__expf(") == plain.count("__expf(") - 2  # the write pass's two register forms
    ptx_for_sm90a(kept)
    a, b = _lib(plain, "softmax_plain.cu"), _lib(kept, "softmax_kept.cu")
    for cols in (300, 2050, 5000):  # 5000 > 2 * 8 * 256: the passes as written
        x = (4 * torch.randn(3, cols, generator=_gen(cols))).half()
        y, z = torch.zeros_like(x), torch.zeros_like(x)
        a.launch("softmax_rows_kernel", 3, 256, 256 * 4, [x, y, cols])
        b.launch("softmax_rows_kernel", 3, 256, 256 * 4, [x, z, cols])
        assert torch.equal(y, z), cols  # the same values, computed once
        assert torch.allclose(z.float(), torch.softmax(x.float(), 1), atol=2e-3), cols
    moved = unit.source.replace("const float row_max = red[0];", "float row_max = red[0];").replace(
        "const float inv = 1.0f / red[0];", "const float inv = 1.0f / red[0];\n    row_max *= 1.0f;")
    p = get_pass("row-registers").from_options({"reuse": True})
    ir = kir.parse(moved, "cuda")
    result = p.optimize(ir, next(s for s in p.sites(ir) if not s.present), CTX)
    assert isinstance(result, Skipped) and "no pass computes again" in result.reason, result


def test_a_log_softmax_with_a_constant_block_and_ldg_reads(tmp_path: Path) -> None:
    host = tmp_path / "logsm_host.py"  # a CuPy host of its own source: the launch sets the block
    host.write_text(f"import cupy\n\nTHREADS = 128\nSOURCE = r\"\"\"{LOG_SOFTMAX}\"\"\"\n"
                    "_kernel = cupy.RawKernel(SOURCE, 'logsm')\n\n\n"
                    "def run(x):\n    y = cupy.zeros_like(x)\n"
                    "    _kernel((x.shape[0],), (THREADS,), (y, x, x.shape[1], x.shape[1]))\n"
                    "    return y\n")
    unit = cuda_unit(host)
    assert unit is not None and "logsm" in unit.source
    out = _registered(unit.source, unit.source_path, vectors=2)
    assert "(THREADS) == blockDim.x" in out  # the loops step by a constant: checked at run time
    assert out.count("__ldg") == LOG_SOFTMAX.count("__ldg")  # the passes as written stay
    ptx_for_sm90a(out)
    _round_trip(out, unit.source_path)
    before, after = _lib(LOG_SOFTMAX, "logsm_start.cu"), _lib(out, "logsm.cu")
    for width, ld in ((1000, 1000), (1024, 1028), (1030, 1030), (777, 800)):  # 1030 > 2 * 4 * 128
        x = torch.randn(5, ld, generator=_gen(width))
        y, start = torch.zeros_like(x), torch.zeros_like(x)
        after.launch("logsm", 5, 128, 0, [y, x, ld, width])
        before.launch("logsm", 5, 128, 0, [start, x, ld, width])
        assert torch.allclose(y[:, :width], torch.log_softmax(x[:, :width], 1), atol=1e-4)
        assert torch.allclose(y, start, atol=1e-5), (width, ld)
        assert torch.equal(y[:, width:], torch.zeros_like(y[:, width:]))


def test_a_persistent_half_rms_with_the_other_row_rules_after_it() -> None:
    out = _registered(HALF_RMS, vectors=2)
    both, vec = _apply_all("vectorize-global", out)  # the passes as written, for longer rows
    assert any(isinstance(r, Applied) for r in vec)
    ptx_for_sm90a(both)
    _round_trip(out)
    gains = _registered(HALF_RMS, vectors=2, hoist=True)  # the gain loaded with each row
    assert "`gain` at the row's index" in gains
    ptx_for_sm90a(gains)
    _round_trip(gains)
    libs = [_lib(t, f"half_rms_{i}.cu") for i, t in enumerate((HALF_RMS, out, both, gains))]
    for dim in (40, 512, 513, 600):  # 600 > 2 * 8 * 32; 513: odd rows start off 16 bytes
        x = torch.randn(9, dim, generator=_gen(dim)).half()
        g = (1 + 0.1 * torch.randn(dim, generator=_gen(dim + 1))).half()
        want = (x.float() * torch.rsqrt(x.float().pow(2).mean(1, keepdim=True) + 1e-5) * g.float())
        for lib in libs:
            y = torch.zeros_like(x)
            lib.launch("scale_rows", 4, 32, 0, [x, g, y, 9, dim])  # 4 blocks walk 9 rows
            assert torch.allclose(y.float(), want, atol=4e-3, rtol=4e-3), dim


def _refusal(source: str, **options) -> str:  # noqa: ANN003
    p = get_pass("row-registers").from_options(options)
    ir = kir.parse(source, "cuda")
    assert [s for s in p.sites(ir) if not s.present] == []
    from passes.base import Site  # noqa: PLC0415

    result = p.optimize(ir, Site("row-registers", "", False, {}, (0, len(ir.source))), CTX)
    assert isinstance(result, Skipped), result
    return result.reason


def test_refusals_say_why() -> None:
    written = HALF_RMS.replace("const half* src", "half* src").replace(
        "const half* a", "half* a").replace("b[k] = __float2half", "a[k] = __float2half")
    assert _refusal(written).startswith("the kernel writes the row")
    shifted = HALF_RMS.replace("__half2float(a[k]) * inv", "__half2float(a[k + 1]) * inv")
    assert "at different offsets" in _refusal(shifted)
    # a thread that leaves before the passes holds no registers: no barrier of the rule's waits
    early = HALF_RMS.replace("float sq = 0.f;", "float sq = 0.f;\n    if (threadIdx.x >= dim) return;")
    assert [s for s in get_pass("row-registers")().sites(kir.parse(early, "cuda")) if not s.present]
    p = get_pass("row-registers").from_options({"vectors": 17})
    ir = kir.parse(HALF_RMS, "cuda")
    site = next(s for s in p.sites(ir) if not s.present)
    result = p.optimize(ir, site, CTX)
    assert isinstance(result, Skipped) and result.reason.startswith("vectors=17: a thread holds 1 to 16")


@pytest.mark.parametrize("start", ["cu_layernorm/layernorm.cu", "cu_softmax_rows/softmax_rows.py"])
def test_the_shipped_card_is_retrieved_and_materializes_on_the_style_tiers_rows(
        start: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lineage.moves import materialize  # noqa: PLC0415
    from lineage.retrieval import Retriever, target_from_kernel  # noqa: PLC0415
    from lineage.shipped import open_library  # noqa: PLC0415
    from passes.rewriter import DeterministicRewriter  # noqa: PLC0415

    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path))
    lib, named = open_library(None)
    cards = [c for c in lib.cards(admitted_only=True) if c.pass_name == "row-registers"]
    assert cards and all(any(t.ok for t in c.verification) for c in cards)  # a held-out trial
    assert any(set(p.get("ids") or ()) & {c.id for c in cards} and p["tier"] == "emulate"
               for p in named["provenance"]["parts"])
    path = STYLES / start
    target = target_from_kernel(path, str(path.parent), "cuda")
    found = [r.card for r in Retriever(lib).retrieve(target).cards if r.card.pass_name == "row-registers"]
    assert found, f"no row-registers card retrieved for {start}"
    unit = cuda_unit(path)
    ir = kir.parse(unit.source, "cuda", path=unit.source_path)
    made = materialize(found[0], ir, DeterministicRewriter(), CTX, max_sites=1)
    assert made.ir is not None and made.rewriter == "deterministic", made
    assert len(register_rows(made.ir)) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("folder,start", [("cu_layernorm", "layernorm.cu"), ("cu_rmsnorm", "rmsnorm.py")])
@pytest.mark.parametrize("options", [{"vectors": 2}, {"vectors": 8, "hoist": True}], ids=["2", "8h"])
def test_the_register_rows_on_the_gpu(folder: str, start: str, options: dict, tmp_path: Path) -> None:
    import importlib.util  # noqa: PLC0415

    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    path = STYLES / folder / start
    unit = cuda_unit(path)
    out = _registered(unit.source, unit.source_path, **options)
    if unit.held is None:
        (tmp_path / unit.source_path.name).write_text(out)
        (tmp_path / unit.host_path.name).write_text(unit.host_path.read_text())
    else:
        (tmp_path / unit.host_path.name).write_text(unit.held.splice(out))
    spec = importlib.util.spec_from_file_location(f"rows_{folder}_{len(options)}", tmp_path / unit.host_path.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    case = gate.load_case(STYLES / folder)
    for n in (1000, 4096, 8200):  # 8200: past 8 vectors of 256 threads for fp32, the passes as written
        shape = {**dict(next(iter(case.small_shapes.values()))), "M": 33, "N": n}
        inputs = tuple(case.module().make_inputs(shape, 7, "cuda"))
        got = module.run(*inputs)
        torch.cuda.synchronize()
        ref = case.module().reference(*inputs).double()
        err = float((got.double() - ref).norm() / ref.norm())
        assert err <= case.tolerance_for(shape["dtype"]), (folder, n, err)
