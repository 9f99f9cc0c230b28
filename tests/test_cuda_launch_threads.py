"""`launch-threads` on row kernels: the kernel is launched with fewer threads per block (more rows
resident per SM) where it counts its threads only through blockDim.x; a `<<<...>>>` launch in the
source is edited in place, a Python host's launch through the source's host-launch line; the
output compiles with NVRTC for sm_90a and, run through its own host on the CPU (`gate.cudacpu`),
matches torch, also followed by `row-registers` and warp shuffles; the round trip holds; refusals
say why."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import kir
from kir.embedded import cuda_unit
from nvrtc_helpers import ptx_for_sm90a
from passes import Applied, PassContext, Skipped, get_pass, pass_from_spec
from passes.cuda.recognize import launch_block
from passes.roundtrip import roundtrip

cudacpu = pytest.importorskip("gate.cudacpu")

import gate  # noqa: E402
from gate import hostforms  # noqa: E402

STYLES = Path(__file__).resolve().parents[1] / "bench" / "styles" / "cuda"
CTX = PassContext(facts={"arch": "sm_90"})

# an L1 row norm, restyled: a `while` walk, the stride and the row in locals, a tree over a shared
# array sized for the host's block, the host an experts.cudahost launch of 256 threads
L1_ROWS = r"""
extern "C" __global__ void l1_rows(const float* src, float* dst, int width) {
  __shared__ float acc[256];
  const float* line = src + (long long)blockIdx.x * width;
  const int step = blockDim.x;
  float mine = 0.f;
  for (int at = threadIdx.x; at < width; at += step) mine += fabsf(line[at]);
  acc[threadIdx.x] = mine;
  __syncthreads();
  for (int half = blockDim.x >> 1; half > 0; half >>= 1) {
    if (threadIdx.x < half) acc[threadIdx.x] += acc[threadIdx.x + half];
    __syncthreads();
  }
  const float scale = 1.f / fmaxf(acc[0], 1e-12f);
  for (int at = threadIdx.x; at < width; at += step) dst[(long long)blockIdx.x * width + at] = line[at] * scale;
}
"""
L1_HOST = '''
from pathlib import Path

import torch

from experts import cudahost

_fn = []


def run(x):
    if not _fn:
        src = Path(__file__).with_suffix(".cu")
        _fn.append(cudahost.get_function(cudahost.compile_source(src.read_text(), name=src.name), "l1_rows"))
    y = torch.empty_like(x)
    cudahost.launch(_fn[0], x.shape[0], 256, 0, [x, y, x.shape[1]], torch.cuda.current_stream())
    return y
'''


def _apply(spec: str, source: str, path: Path | None) -> str:
    p = pass_from_spec(spec)
    ir = kir.parse(source, "cuda", path=path)
    results = [p.optimize(ir, s, CTX) for s in p.sites(ir) if not s.present]
    applied = [r for r in results if isinstance(r, Applied)]
    assert len(applied) == 1, results
    return applied[0].ir.text


def _round_trip(text: str, path: Path | None) -> None:
    p = get_pass("launch-threads")()
    ir = kir.parse(text, "cuda", path=path)
    present = [s for s in p.sites(ir) if s.present]
    assert len(present) == 1 and not [s for s in p.sites(ir) if not s.present]
    trip = roundtrip(p, ir, present[0], CTX)
    assert trip.same, (trip.backward, trip.forward)


def test_a_host_module_launch_is_asked_for_the_smaller_block(tmp_path: Path) -> None:
    (tmp_path / "l1.cu").write_text(L1_ROWS)
    (tmp_path / "l1.py").write_text(L1_HOST)
    out = _apply("launch-threads{threads=64}", L1_ROWS, tmp_path / "l1.cu")
    assert '"block": [64, 1, 1], "block_from": [256, 1, 1]' in out
    assert launch_block(kir.parse(out, "cuda", path=tmp_path / "l1.cu")).dims == (64, 1, 1)
    ptx_for_sm90a(out)
    _round_trip(out, tmp_path / "l1.cu")
    both = _apply("row-registers{vectors=4}", out, tmp_path / "l1.cu")
    x = torch.randn(5, 700, generator=torch.Generator().manual_seed(0))
    want = x / x.abs().sum(1, keepdim=True)
    for text in (out, both):
        got = cudacpu.run_host(text, tmp_path / "l1.py", x, stem="l1")
        assert torch.allclose(got, want, atol=1e-6), text[-200:]


def test_the_style_tiers_rows_in_their_own_hosts() -> None:
    unit = cuda_unit(STYLES / "cu_softmax_rows" / "softmax_rows.py")  # load_inline: <<<...>>> edited
    out = _apply("launch-threads{threads=128}", unit.source, unit.source_path)
    assert "softmax_rows_kernel<<<rows, 128, threads * sizeof(float)>>>" in out
    assert launch_block(kir.parse(out, "cuda", path=unit.source_path)).dims == (128, 1, 1)
    _round_trip(out, unit.source_path)
    ptx_for_sm90a(hostforms.device_source(out))
    unit = cuda_unit(STYLES / "cu_rmsnorm" / "rmsnorm.py")  # cuLaunchKernel in the module
    out = _apply("launch-threads{threads=128}", unit.source, unit.source_path)
    out = _apply("row-registers{vectors=8}", out, unit.source_path)
    out = _apply("warp-shuffle-reduce", out, unit.source_path)
    ptx_for_sm90a(out)
    case = gate.load_case(STYLES / "cu_rmsnorm")
    for n in (520, 4096, 4100):  # 4100: past 8 vectors of 128 threads, the passes as written
        inputs = tuple(case.module().make_inputs({"M": 3, "N": n, "dtype": "fp32"}, 1, "cpu"))
        got = cudacpu.run_host(out, unit.held.splice(out), *inputs, stem="rmsnorm")
        ref = case.module().reference(*inputs)
        assert torch.allclose(got, ref, atol=1e-5, rtol=1e-4), n


def _refusal(source: str, path: Path | None, **options) -> str:  # noqa: ANN003
    p = get_pass("launch-threads").from_options(options)
    ir = kir.parse(source, "cuda", path=path)
    sites = [s for s in p.sites(ir) if not s.present]
    assert len(sites) == 1
    result = p.optimize(ir, sites[0], CTX)
    assert isinstance(result, Skipped), result
    return result.reason


def test_refusals_say_why(tmp_path: Path) -> None:
    (tmp_path / "l1.cu").write_text(L1_ROWS)
    (tmp_path / "l1.py").write_text(L1_HOST)
    assert _refusal(L1_ROWS, tmp_path / "l1.cu", threads=100).startswith("threads=100: a block of whole warps")
    assert _refusal(L1_ROWS, tmp_path / "l1.cu", threads=256) == \
        "the launch's block of 256 threads is not larger than 256"
    literal = L1_ROWS.replace("for (int half = blockDim.x >> 1;", "for (int half = 256 >> 1;")
    (tmp_path / "l1.cu").write_text(literal)
    assert "counts its threads as `256`" in _refusal(literal, tmp_path / "l1.cu")


def test_vectorized_offsets_keep_a_cast_of_two_words() -> None:
    from test_cuda_role_rules import _apply_all  # noqa: PLC0415

    out, results = _apply_all("vectorize-global", L1_ROWS)
    assert any(isinstance(r, Applied) for r in results)
    assert "(long long)blockIdx.x" in out and "longlong" not in out
    ptx_for_sm90a(out)
    lib = cudacpu.build(out, name="l1_vec.cu")
    x = torch.randn(3, 1000, generator=torch.Generator().manual_seed(2))
    y = torch.zeros_like(x)
    lib.launch("l1_rows", 3, 256, 0, [x, y, 1000])
    assert torch.allclose(y, x / x.abs().sum(1, keepdim=True), atol=1e-6)


def test_the_shipped_card_is_retrieved_and_narrows_the_style_tiers_softmax(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lineage.moves import materialize  # noqa: PLC0415
    from lineage.retrieval import Retriever, target_from_kernel  # noqa: PLC0415
    from lineage.shipped import open_library  # noqa: PLC0415
    from passes.rewriter import DeterministicRewriter  # noqa: PLC0415

    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path))
    lib, named = open_library(None)
    cards = [c for c in lib.cards(admitted_only=True) if c.pass_name == "launch-threads"]
    assert cards and all(any(t.ok for t in c.verification) for c in cards)
    assert any(set(p.get("ids") or ()) & {c.id for c in cards} and p["tier"] == "emulate"
               for p in named["provenance"]["parts"])
    path = STYLES / "cu_softmax_rows" / "softmax_rows.py"
    target = target_from_kernel(path, str(path.parent), "cuda")
    found = [r.card for r in Retriever(lib).retrieve(target).cards if r.card.pass_name == "launch-threads"]
    assert found
    unit = cuda_unit(path)
    ir = kir.parse(unit.source, "cuda", path=unit.source_path)
    made = materialize(found[0], ir, DeterministicRewriter(), CTX, max_sites=1)
    assert made.ir is not None and made.rewriter == "deterministic", made
    assert launch_block(made.ir).dims == (found[0].options["threads"], 1, 1)


def test_kernels_that_do_not_spread_work_over_blockdim_are_refused(tmp_path: Path) -> None:
    fixed = L1_ROWS.replace("const int step = blockDim.x;", "const int step = 512;").replace(
        "__shared__ float acc[256];", "__shared__ float acc[257];")
    (tmp_path / "l1.cu").write_text(fixed)
    (tmp_path / "l1.py").write_text(L1_HOST)
    assert _refusal(fixed, tmp_path / "l1.cu") == "no loop spreads the kernel's work over its blockDim.x threads"


@pytest.mark.gpu
def test_the_narrow_launch_on_the_gpu(tmp_path: Path) -> None:
    import importlib.util  # noqa: PLC0415

    from kir import hostlaunch  # noqa: PLC0415

    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    unit = cuda_unit(STYLES / "cu_rmsnorm" / "rmsnorm.py")
    out = _apply("launch-threads{threads=128}", unit.source, unit.source_path)
    out = _apply("row-registers{vectors=8}", out, unit.source_path)
    out = _apply("launch-bounds", out, unit.source_path)
    assert "__launch_bounds__(128)" in out  # launch-bounds reads the narrowed block
    (tmp_path / "rmsnorm.py").write_text(hostlaunch.apply(unit.held.splice(out), out))
    spec = importlib.util.spec_from_file_location("narrow_rmsnorm", tmp_path / "rmsnorm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    case = gate.load_case(STYLES / "cu_rmsnorm")
    for n in (1000, 4096, 4100):
        inputs = tuple(case.module().make_inputs({"M": 33, "N": n, "dtype": "fp32"}, 7, "cuda"))
        got = module.run(*inputs)
        torch.cuda.synchronize()
        ref = case.module().reference(*inputs).double()
        assert float((got.double() - ref).norm() / ref.norm()) <= case.tolerance_for("fp32"), n


@pytest.mark.parametrize("style", ["cu_layernorm", "cu_rmsnorm", "cu_sum_tree"])
def test_a_host_edited_for_its_launches_reaches_no_foreign_library(style: str) -> None:
    # the host-launch helper written into the host (kir.hostlaunch) serves every launch
    # convention; a host that launches through experts.cudahost, the driver or CuPy must not
    # read as one that imports a library it does not use (the fresh gate of an optimize run's
    # best.py scans that whole text)
    from gate.foreign import scan_source  # noqa: PLC0415
    from kir import hostlaunch  # noqa: PLC0415

    folder = STYLES / style
    host = next(p for p in folder.glob("*.py") if p.name != "case.py")
    unit = cuda_unit(host if not list(folder.glob("*.cu")) else next(folder.glob("*.cu")))
    out = _apply("launch-threads{threads=128}", unit.source, unit.source_path)
    edited = hostlaunch.apply(host.read_text(), out) if unit.held is None else hostlaunch.apply(
        unit.held.splice(out), out)
    assert hostlaunch.BEGIN in edited
    assert scan_source(edited) == []
