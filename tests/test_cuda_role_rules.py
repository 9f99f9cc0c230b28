"""The CUDA forward rules on roles, on kernels that never were a state of any lineage
(tests/cuda_role_sources.py, and the same kernels renamed): each rule's output compiles with
NVRTC for sm_90a and, run on the CPU (`gate.cudacpu`), computes what the kernel as written
computes at small shapes, block sizes and alignments; refusals say why."""
from __future__ import annotations

import re

import pytest
import torch

import kir
from nvrtc_helpers import ptx_for_sm90a
from passes import Applied, PassContext, Skipped, get_pass

import cuda_role_sources as S
from test_cuda_roles import _renamed

CTX = PassContext(facts={"arch": "sm_90"})


def _apply_all(pass_name: str, text: str, ctx: PassContext = CTX, **options) -> tuple[str, list]:  # noqa: ANN003
    """The kernel after the pass's rule acted at every open site, and the results."""
    p = get_pass(pass_name).from_options(options)
    ir = kir.parse(text, "cuda")
    results = []
    for _ in range(8):
        sites = [s for s in p.sites(ir) if not s.present]
        for site in sites:
            result = p.optimize(ir, site, ctx)
            results.append(result)
            if isinstance(result, Applied):
                ir = result.ir
                break
        else:
            break
    return ir.text, results


def _lib(text: str, name: str):  # noqa: ANN202
    cudacpu = pytest.importorskip("gate.cudacpu")
    try:
        return cudacpu.build(text, name=name)
    except cudacpu.BuildError as exc:  # the C++ compiler is missing or the source is refused
        if "not emulated" in str(exc):
            raise
        pytest.skip(f"the CPU emulation does not build here: {str(exc).splitlines()[0]}")


def _kernel(source: str, name: str) -> str:
    """The kernel `name` as `source` calls it (itself, or renamed by `_renamed`)."""
    return re.search(rf"__global__ void (\w*(?:{name}|{name[::-1].lower()}))\(", source).group(1)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- shared-memory tree -> warp shuffles -------------------------------------------------------
def _row_outputs(lib, kernel: str, x: torch.Tensor, block: int, outs: int, extra=()) -> list:  # noqa: ANN001
    rows, cols = x.shape
    results = [torch.zeros(rows) for _ in range(outs)]
    lib.launch(kernel, rows, block, 0, [x, *results, cols, *extra])
    return results


@pytest.mark.parametrize("rename", [False, True], ids=["as-written", "renamed"])
def test_trees_become_shuffles_that_compile_and_compute_the_same(rename: bool) -> None:
    source = S.ROW_SUM + S.MOMENTS + S.UNROLLED_MAX
    if rename:
        source = _renamed(source)
    out, results = _apply_all("warp-shuffle-reduce", source)
    assert sum(isinstance(r, Applied) for r in results) == 3, results
    assert out.count("__shfl_down_sync") == 8  # two per array: within the warps, then across
    ptx_for_sm90a(out)
    names = [_kernel(source, n) for n in ("row_sum", "moments", "block_max")]
    before, after = _lib(source, "tree.cu"), _lib(out, "shuffles.cu")
    x = torch.randn(5, 700, generator=_gen(0))
    for block in (32, 64, 256, 96):  # 96: not a power of two, the guard keeps the tree
        want = _row_outputs(before, names[0], x, block, 1)
        got = _row_outputs(after, names[0], x, block, 1)
        assert torch.allclose(got[0], want[0], rtol=1e-5, atol=1e-4)
        if block != 96:
            assert torch.allclose(got[0], x.sum(1), rtol=1e-4, atol=1e-3)
    for block in (128, 512):
        mean, var = [torch.zeros(5), torch.zeros(5)], None
        after.launch(names[1], 5, block, 0, [x, mean[0], mean[1], 700])
        assert torch.allclose(mean[0], x.mean(1), atol=1e-4)
        assert torch.allclose(mean[1], x.var(1, unbiased=False), atol=1e-3)
        del var
    flat = torch.randn(3000, generator=_gen(1))
    for block in (128, 64):  # 64: the unrolled tree covers 128 slots, the guard keeps it
        got, want = torch.zeros(4), torch.zeros(4)
        before.launch(names[2], 4, block, 0, [flat, want, 3000])
        after.launch(names[2], 4, block, 0, [flat, got, 3000])
        assert torch.equal(got, want)
        if block == 128:
            assert got.max().item() == flat.max().item()


def test_softmax_and_min_trees_keep_their_results() -> None:
    out, results = _apply_all("warp-shuffle-reduce", S.SOFTMAX + S.DOUBLING_MIN)
    assert sum(isinstance(r, Applied) for r in results) == 3, results
    assert "blockDim.x == 128 && blockDim.y == 1" in out  # constant extents: checked at run time
    ptx_for_sm90a(out)
    lib = _lib(out, "softmax_min.cu")
    x = torch.randn(6, 300, generator=_gen(2))
    y = torch.zeros_like(x)
    lib.launch("row_softmax", 6, 128, 0, [x, y, 300])
    assert torch.allclose(y, torch.softmax(x, 1), atol=1e-5)
    data = torch.randn(4 * 256, generator=_gen(3))
    res = torch.zeros(4)
    lib.launch("seg_min", 4, 256, 0, [data, res])
    assert torch.equal(res, data.view(4, 256).min(1).values)


def test_a_block_the_host_sets_decides_the_guard(tmp_path) -> None:  # noqa: ANN001
    (tmp_path / "rows.cu").write_text(S.ROW_SUM)
    p = get_pass("warp-shuffle-reduce")()
    (tmp_path / "rows.py").write_text(S.HOST_CUDAHOST)  # 256 threads: proven, no guard
    ir = kir.parse_file(tmp_path / "rows.cu")
    site = next(s for s in p.sites(ir) if not s.present)
    result = p.optimize(ir, site, CTX)
    assert isinstance(result, Applied) and "blockDim.y == 1" not in result.ir.text
    assert "} else {" not in result.ir.text
    (tmp_path / "rows.py").write_text(S.HOST_CUDAHOST.replace("256", "48"))
    ir = kir.parse_file(tmp_path / "rows.cu")
    result = p.optimize(ir, site, CTX)
    assert isinstance(result, Skipped)
    assert result.reason == "the block size is not a power of two multiple of 32"


def test_a_tree_in_a_device_helper_over_a_shared_parameter() -> None:
    source = _renamed(S.HELPER_SUM)
    out, results = _apply_all("warp-shuffle-reduce", source)
    assert [type(r) for r in results] == [Applied]
    ptx_for_sm90a(out)
    kernel = _kernel(source, "center")
    x = torch.randn(3, 1000, generator=_gen(10))
    want, got = torch.zeros_like(x), torch.zeros_like(x)
    _lib(source, "helper.cu").launch(kernel, 3, 256, 0, [x, want, 1000])
    _lib(out, "helper_shuffles.cu").launch(kernel, 3, 256, 0, [x, got, 1000])
    assert torch.allclose(got, want, atol=1e-5)
    assert torch.allclose(got, x - x.mean(1, keepdim=True), atol=1e-4)


def test_a_shuffle_block_reduction_is_de_optimized_into_a_tree_and_back() -> None:
    from passes.roundtrip import roundtrip

    source = _renamed(S.SHUFFLE_SOFTMAX)
    p = get_pass("warp-shuffle-reduce")()
    ir = kir.parse(source, "cuda")
    sites = [s for s in p.sites(ir) if s.present and "block_reduction" in s.detail]
    assert len(sites) == 2
    trip = roundtrip(p, ir, sites[1], CTX)
    assert trip.same, trip  # the recorded text comes back exactly
    back = trip.backward.ir
    assert "__shfl_down_sync" in back.text and back.text.count("kl_s >>= 1") == 1
    tree = next(s for s in p.sites(back) if not s.present and s.detail.get("tree"))
    forward = p.optimize(back, tree, CTX)  # no record: the tree rule
    assert isinstance(forward, Applied)
    kernel = _kernel(source, "softmax_warp")
    x = torch.randn(4, 333, generator=_gen(11))
    for text, name in ((source, "sm_shfl.cu"), (back.text, "sm_tree.cu"),
                       (forward.ir.text, "sm_again.cu")):
        ptx_for_sm90a(text)
        lib = _lib(text, name)
        for block in (256, 64):
            y = torch.zeros_like(x)
            lib.launch(kernel, 4, block, 0, [x, y, 333])
            assert torch.allclose(y, torch.softmax(x, 1), atol=1e-5), (name, block)


def test_a_tree_finished_warp_synchronously_becomes_shuffles() -> None:
    source = S.WARP_TAIL + S.WARP_TAIL_CALL
    out, results = _apply_all("warp-shuffle-reduce", source)
    assert sum(isinstance(r, Applied) for r in results) == 2, results
    ptx_for_sm90a(out)
    x = torch.randn(2 * 3 * 256, generator=_gen(17))
    lib = _lib(out, "warp_tail.cu")
    got = torch.zeros(3)
    lib.launch("old_style_sum", 3, 256, 0, [x, got])
    assert torch.allclose(got, x[:768].view(3, 256).sum(1), atol=1e-4)
    lib.launch("sum_with_call", 3, 256, 0, [x, got])
    assert torch.allclose(got, (x[:768] + x[768:]).view(3, 256).sum(1), atol=1e-4)


def test_a_refused_tree_is_no_site() -> None:
    p = get_pass("warp-shuffle-reduce")()
    text = S.WARP_TAIL_CALL.replace(" buf[lane] += buf[lane + 1];", "")
    assert [s for s in p.sites(kir.parse(text, "cuda")) if not s.present] == []


# -- synchronous staging -> a cp.async ring ----------------------------------------------------
def _matmul(lib, kernel: str, a: torch.Tensor, b: torch.Tensor, grid, block,  # noqa: ANN001
            n: int | None = None) -> torch.Tensor:
    m, k = a.shape
    n = b.shape[1] if n is None else n
    c = torch.zeros(m, n)
    lib.launch(kernel, grid, block, 0, [a, b, c, m, n, k])
    return c


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_tiled_gemm_staging_becomes_a_cp_async_ring(stages: int) -> None:
    out, results = _apply_all("cp-async-pipeline", S.TILED, stages=stages)
    assert [type(r) for r in results] == [Applied]
    assert "cp.async.ca.shared.global" in out and f"wait_group {stages - 1}" in out
    assert f"As[{stages}][TILE][TILE]" in out
    ptx_for_sm90a(out)
    lib = _lib(out, f"tiled_ring{stages}.cu")
    a, b = torch.randn(37, 45, generator=_gen(4)), torch.randn(45, 29, generator=_gen(5))
    c = _matmul(lib, "matmul_tiled", a, b, (2, 3), (16, 16))
    assert torch.allclose(c, a @ b, atol=1e-4)


def test_interleaved_temporaries_each_become_their_copy() -> None:
    source = _renamed(S.TILED_INTERLEAVED)
    out, results = _apply_all("cp-async-pipeline", source)
    assert [type(r) for r in results] == [Applied]
    assert out.count("cp.async.ca.shared.global") == 4  # two copies, prologue and loop
    ptx_for_sm90a(out)
    kernel = _kernel(source, "mm_two_temps")
    a, b = torch.randn(50, 70, generator=_gen(13)), torch.randn(70, 33, generator=_gen(14))
    c = _matmul(_lib(out, "interleaved_ring.cu"), kernel, a, b, (2, 2), (32, 32))
    assert torch.allclose(c, a @ b, atol=1e-4)


def test_a_ring_under_a_tensor_core_micro_kernel_that_passes_the_tile_on(tmp_path) -> None:  # noqa: ANN001
    """The tensor-core rule reads the tiles through a pointer cast of the bare array: the ring
    makes that a cast of the slot."""
    bf16 = _bf16_interleaved()
    (tmp_path / "mm.cu").write_text(bf16)
    (tmp_path / "mm.py").write_text("import experts.cudahost as host\n"
                                    "def run(a, b):\n    host.launch(f, (1, 1), (32, 32), 0, [a])\n")
    ir = kir.parse_file(tmp_path / "mm.cu")
    tc = get_pass("mma-micro-kernel")()
    site = next((s for s in tc.sites(ir) if not s.present), None)
    made = tc.optimize(ir, site, CTX) if site is not None else None
    if not isinstance(made, Applied):
        pytest.skip(f"the tensor-core rule does not take this kernel: {made}")
    ring = get_pass("cp-async-pipeline")()
    site = next(s for s in ring.sites(made.ir) if not s.present)
    result = ring.optimize(made.ir, site, CTX)
    assert isinstance(result, Applied), result
    ptx_for_sm90a(result.ir.text)
    lib = _lib(result.ir.text, "tc_ring.cu")
    a = torch.randn(64, 96, generator=_gen(18)).to(torch.bfloat16)
    b = torch.randn(96, 64, generator=_gen(19)).to(torch.bfloat16)
    c = _matmul(lib, "mm_two_temps", a, b, (2, 2), (32, 32))
    assert torch.allclose(c, a.float() @ b.float(), atol=1e-2, rtol=1e-2)


def test_a_blocked_gemm_with_a_transposed_operand_gets_a_ring() -> None:
    source = _renamed(S.BLOCKED_NT)
    out, results = _apply_all("cp-async-pipeline", source)
    assert [type(r) for r in results] == [Applied]
    ptx_for_sm90a(out)
    kernel = _kernel(source, "gemm_nt")
    before, after = _lib(source, "nt.cu"), _lib(out, "nt_ring.cu")
    a, bt = torch.randn(40, 21, generator=_gen(6)), torch.randn(35, 21, generator=_gen(7))
    want = _matmul(before, kernel, a, bt, (2, 2), 256, n=35)
    got = _matmul(after, kernel, a, bt, (2, 2), 256, n=35)
    assert torch.allclose(want, a @ bt.T, atol=1e-4) and torch.equal(got, want)


def test_two_byte_copies_in_a_loop_of_their_own_are_refused_with_the_reason() -> None:
    _out, results = _apply_all("cp-async-pipeline", S.BLOCKED_BF16)
    assert [r.reason for r in results] == [
        "a copy into sa moves 2 bytes (cp.async moves 4, 8 or 16) and the pair with the next "
        "thread's is not told: the copy runs in a loop of its own"]


def _bf16_interleaved() -> str:
    return "#include <cuda_bf16.h>\n" + S.TILED_INTERLEAVED.replace(
        "const float* __restrict__ lhs, const float* __restrict__ rhs",
        "const __nv_bfloat16* __restrict__ lhs, const __nv_bfloat16* __restrict__ rhs").replace(
        "__shared__ float tl[TS][TS], tr[TS][TS];", "__shared__ __nv_bfloat16 tl[TS][TS], tr[TS][TS];").replace(
        "float x0 = 0.0f;", "__nv_bfloat16 x0 = __float2bfloat16(0.0f);").replace(
        "float y0 = 0.0f;", "__nv_bfloat16 y0 = __float2bfloat16(0.0f);").replace(
        "total += tl[r][q] * tr[q][c];", "total += __bfloat162float(tl[r][q]) * __bfloat162float(tr[q][c]);")


def test_two_byte_copies_pair_up_with_the_next_threads(tmp_path) -> None:  # noqa: ANN001
    (tmp_path / "mm.cu").write_text(_bf16_interleaved())
    p = get_pass("cp-async-pipeline")()
    ir = kir.parse_file(tmp_path / "mm.cu")
    site = next(s for s in p.sites(ir) if not s.present)
    assert "not known to be even" in p.optimize(ir, site, CTX).reason  # no host: no block
    (tmp_path / "mm.py").write_text("import experts.cudahost as host\n"
                                    "def run(a, b):\n    host.launch(f, (1, 1), (32, 32), 0, [a])\n")
    ir = kir.parse_file(tmp_path / "mm.cu")
    result = p.optimize(ir, site, CTX)
    assert isinstance(result, Applied), result
    assert result.ir.text.count("(threadIdx.x & 1) == 0") == 4
    ptx_for_sm90a(result.ir.text)
    lib = _lib(result.ir.text, "pairs.cu")
    for k in (64, 45):  # 45: odd rows, every other pair misaligned: copied by the threads
        a = torch.randn(40, k, generator=_gen(15)).to(torch.bfloat16)
        b = torch.randn(k, 37, generator=_gen(16)).to(torch.bfloat16)
        c = _matmul(lib, "mm_two_temps", a, b, (2, 2), (32, 32))
        assert torch.allclose(c, a.float() @ b.float(), atol=1e-3, rtol=1e-3)


def test_a_staging_that_converts_is_not_copied_as_bytes() -> None:
    text = "#include <cuda_fp16.h>\n" + S.TILED.replace("const float* A", "const __half* A").replace(
        "a = A[row * K + t + tx];", "a = __half2float(A[row * K + t + tx]);")
    _out, results = _apply_all("cp-async-pipeline", text)
    assert [r.reason for r in results] == [
        "a copy into As converts what it reads (cp.async copies bytes)"]


def test_a_non_zero_fill_is_refused() -> None:
    _out, results = _apply_all("cp-async-pipeline", S.TILED.replace(": 0.f;", ": 1.f;"))
    assert [r.reason for r in results] == [
        "a guarded copy into Bs fills 1.f, not zero (cp.async zero-fills)"]


def test_staging_through_a_guarded_temporary_counts_as_staged() -> None:
    from lineage.retrieval import kernel_features

    for source in (S.TILED, _renamed(S.BLOCKED_BF16), S.BLOCKED_NT):
        assert "smem-staging" in {f["pass"] for f in kernel_features(kir.parse(source, "cuda"))}


# -- 128-bit global access with a run-time alignment check ------------------------------------
def test_stride_loops_are_vectorized_with_an_alignment_fallback() -> None:
    source = S.SAXPY + S.ROW_SUM
    out, results = _apply_all("vectorize-global", source)
    assert sum(isinstance(r, Applied) for r in results) == 2, results
    # two vectors in flight per thread (the next iteration's loaded with the current one's)
    assert out.count("reinterpret_cast<const uint4*>") == 4 and "& 15ull" in out
    one, _ = _apply_all("vectorize-global", source, ahead=1)
    assert one.count("reinterpret_cast<const uint4*>") == 2 and "kl_j1" not in one
    ptx_for_sm90a(out)
    lib = _lib(out, "vectorized.cu")
    base = torch.randn(1 + 1003, generator=_gen(8))
    for offset in (0, 1):  # 1: misaligned by one element, the loop as written runs
        xs = base[offset:offset + 1003]
        ys = torch.zeros(1004)[offset:offset + 1003]
        lib.launch("axpb", 3, 64, 0, [xs, ys, 2.0, 1003])
        assert torch.allclose(ys, 2.0 * xs + 1.0)
    x = torch.randn(3, 259, generator=_gen(9))  # rows of 259: the second row is misaligned
    res = torch.zeros(3)
    lib.launch("row_sum", 3, 64, 0, [x, res, 259])
    assert torch.allclose(res, x.sum(1), atol=1e-4)


def test_a_loop_that_can_leave_early_is_not_vectorized() -> None:
    text = S.SAXPY.replace("ys[idx] = alpha * v + 1.0f;", "if (v < 0.f) break; ys[idx] = alpha * v;")
    p = get_pass("vectorize-global")()
    from passes.cuda.memory import vector_loops

    assert [s for s in p.sites(kir.parse(text, "cuda")) if not s.present] == []
    assert [plan.reason for _, plan in vector_loops(kir.parse(text, "cuda"))] == [
        "the loop's body can leave by break"]


# -- annotations from roles ------------------------------------------------------------------
def test_launch_bounds_from_the_block_the_host_launches(tmp_path) -> None:  # noqa: ANN001
    (tmp_path / "g.cu").write_text(S.BLOCKED_BF16)
    (tmp_path / "g.py").write_text(S.HOST_CUDAHOST)
    out, results = _apply_all("launch-bounds", (tmp_path / "g.cu").read_text())
    assert isinstance(results[0], Skipped) and "no launch of the kernel was found" in results[0].reason
    ir = kir.parse_file(tmp_path / "g.cu")
    p = get_pass("launch-bounds")()
    result = p.optimize(ir, next(s for s in p.sites(ir) if not s.present), CTX)
    assert isinstance(result, Applied) and "__launch_bounds__(256) gemm_rb" in result.ir.text
    ptx_for_sm90a(result.ir.text)
    del out


def test_recorded_launch_bounds_that_name_another_kernels_macro_give_way_to_the_host_block(
        tmp_path) -> None:  # noqa: ANN001
    """A card's recorded bounds written with a macro of the kernel it was learned on (absent
    here) are not copied: the bounds come from the block this kernel's host launches."""
    (tmp_path / "g.cu").write_text(S.BLOCKED_BF16)
    (tmp_path / "g.py").write_text(S.HOST_CUDAHOST)
    ir = kir.parse_file(tmp_path / "g.cu")
    p = get_pass("launch-bounds").from_options({"bounds": "OTHER_KERNEL_THREADS, 1"})
    result = p.optimize(ir, next(s for s in p.sites(ir) if not s.present), CTX)
    assert isinstance(result, Applied)
    assert "OTHER_KERNEL_THREADS" not in result.ir.text
    assert "__launch_bounds__(256) gemm_rb" in result.ir.text
    kept = get_pass("launch-bounds").from_options({"bounds": "256, 2"})
    result = kept.optimize(ir, next(s for s in kept.sites(ir) if not s.present), CTX)
    assert isinstance(result, Applied) and "__launch_bounds__(256, 2) gemm_rb" in result.ir.text


def test_unrolling_loops_bounded_by_constexpr_and_template_parameters() -> None:
    text = r"""
    constexpr int items = 8;
    template <int width> __global__ void scale(const float* x, float* y, float a) {
      float r[items];
      for (int i = 0; i < items; ++i) r[i] = x[threadIdx.x * items + i] * a;
      for (int j = 0; j < width; j += 2) y[threadIdx.x * width + j] = r[j % items];
      for (int j = 0; j < (int)a; ++j) y[j] = 0.f;
    }
    template __global__ void scale<4>(const float*, float*, float);
    """
    out, results = _apply_all("pragma-unroll", text)
    assert out.count("#pragma unroll") == 2
    assert isinstance(results[-1], Skipped)
    assert results[-1].reason == "precondition failed: constant_trip_count"
    ptx_for_sm90a(out)


# -- a card lifted from an expert's lineage materializes the rule on a user's kernel ---------
def test_cards_from_the_expert_lineages_take_the_role_rules_on_a_user_kernel() -> None:
    from pathlib import Path

    from lineage.graph import Lineage
    from lineage.optimize import materialize
    from lineage.skills import lift
    from passes.rewriter import DeterministicRewriter

    lineages = Path(__file__).resolve().parents[1] / "bench" / "results" / "cuda" / "lineages"
    cards = {c.pass_name: c for name in ("topk_cuda_static", "gemm_cuda_static")
             for c in lift(Lineage.load(lineages / name / "lineage.json"))}
    for pass_name, source, marker in (("warp-shuffle-reduce", S.RMS, "__shfl_down_sync"),
                                      ("cp-async-pipeline", S.TILED, "cp.async.ca.shared.global")):
        target = kir.parse(_renamed(source), "cuda")
        made = materialize(cards[pass_name], target, DeterministicRewriter())
        assert made.ok and made.rewriter == "deterministic", made.refusals
        assert marker in made.ir.text and marker not in target.text
        ptx_for_sm90a(made.ir.text)


def test_each_rules_output_kernel_is_found_by_its_plain_name() -> None:
    """The kernels below are not `extern "C"`: their PTX entries carry C++ mangled names, and
    `cudahost.get_function` (as the GPU test calls it) finds each by the name it is written
    with."""
    from experts import cudahost

    for text, kernel in [(_apply_all("warp-shuffle-reduce", S.ROW_SUM + S.SOFTMAX)[0], "row_sum"),
                         (_apply_all("warp-shuffle-reduce", S.ROW_SUM + S.SOFTMAX)[0], "row_softmax"),
                         (_apply_all("vectorize-global", S.SAXPY)[0], "axpb")]:
        ptx = ptx_for_sm90a(text)
        entry = cudahost.entry_name(ptx, kernel)
        assert entry in cudahost.entry_names(ptx) and cudahost.mangled_identifier(entry) == kernel


# -- on the GPU: each rule's output on one small shape ----------------------------------------
@pytest.mark.gpu
def test_the_rules_outputs_on_the_gpu() -> None:
    from experts import cudahost

    if not torch.cuda.is_available():
        pytest.skip("no GPU")

    def run(text: str, kernel: str, grid, block, args) -> None:  # noqa: ANN001
        func = cudahost.get_function(cudahost.compile_source(text, name=f"{kernel}.cu"), kernel)
        cudahost.launch(func, grid, block, 0, args)
        torch.cuda.synchronize()

    trees, _ = _apply_all("warp-shuffle-reduce", S.ROW_SUM + S.SOFTMAX)
    x = torch.randn(7, 1000, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    out = torch.zeros(7, device="cuda")
    run(trees, "row_sum", 7, 256, [x, out, 1000])
    assert torch.allclose(out, x.sum(1), rtol=1e-4, atol=1e-3)
    y = torch.zeros_like(x)
    run(trees, "row_softmax", 7, 128, [x, y, 1000])
    assert torch.allclose(y, torch.softmax(x, 1), atol=1e-5)
    ring, _ = _apply_all("cp-async-pipeline", S.TILED, stages=3)
    a = torch.randn(130, 70, device="cuda")
    b = torch.randn(70, 90, device="cuda")
    c = torch.zeros(130, 90, device="cuda")
    run(ring, "matmul_tiled", (6, 9), (16, 16), [a, b, c, 130, 90, 70])
    assert torch.allclose(c, a @ b, atol=1e-3, rtol=1e-3)
    vec, _ = _apply_all("vectorize-global", S.SAXPY)
    xs = torch.randn(100003, device="cuda")
    for offset in (0, 1):
        ys = torch.zeros(100004, device="cuda")
        run(vec, "axpb", 40, 256, [xs[offset:], ys[offset:], 2.0, 100003 - offset])
        assert torch.allclose(ys[offset:100003], 2.0 * xs[offset:] + 1.0)


def test_a_bf16_stride_loop_moves_eight_elements_per_access() -> None:
    text = r"""
    #include <cuda_bf16.h>
    __global__ void scale_bf16(const __nv_bfloat16* __restrict__ in, __nv_bfloat16* __restrict__ out,
                               float s, int n) {
      for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        out[i] = __float2bfloat16(__bfloat162float(in[i]) * s);
    }"""
    out, results = _apply_all("vectorize-global", text)
    assert [type(r) for r in results] == [Applied] and "kl_lane < 8" in out
    ptx_for_sm90a(out)
    before, after = _lib(text, "bf16.cu"), _lib(out, "bf16_vec.cu")
    for offset in (0, 3):  # 3: misaligned, the loop as written runs
        xs = torch.randn(1001 + offset, generator=_gen(12)).to(torch.bfloat16)[offset:]
        want = torch.zeros(1001 + offset, dtype=torch.bfloat16)[offset:]
        got = torch.zeros(1001 + offset, dtype=torch.bfloat16)[offset:]
        before.launch("scale_bf16", 2, 64, 0, [xs, want, 1.5, 1001])
        after.launch("scale_bf16", 2, 64, 0, [xs, got, 1.5, 1001])
        assert torch.equal(got, want)
