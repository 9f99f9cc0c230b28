"""16-byte staging (`passes.cuda.stage_vector`): the 2-byte staging loops of tiled GEMMs written
as users write them become copies of 8 elements per thread; the output compiles with NVRTC for
sm_90a with 16-byte global loads, and on the CPU emulator at ragged shapes (partial tiles, rows
that are not 16-byte aligned, so the element-wise fallback runs) it matches torch, before and
after `mma-micro-kernel`; the loops it cannot take say why."""
from __future__ import annotations

import re

import pytest

import kir
from nvrtc_helpers import ptx_for_sm90a
from passes.cuda.stage_vector import VectorStaging, staging_loops, vectorize_all
from test_passes_cuda_mma_tile import DATA, RUNS, _emulated, _rewrite

torch = pytest.importorskip("torch")

# the transposed A tiles (a column per warp in shared memory) are left: see the refusals
TAKEN = {"blocktile_bf16.cu": {"As", "Bs"}, "strided_fp16_at.cu": {"b_s"},
         "warptile_bf16.cu": {"Bs"}}


def _vectorized(file: str) -> str:
    out, _ = vectorize_all(kir.parse((DATA / file).read_text(), "cuda"))
    return out


@pytest.mark.parametrize("file", sorted(TAKEN))
def test_the_staging_loops_become_16_byte_copies(file: str) -> None:
    plans = staging_loops(kir.parse((DATA / file).read_text(), "cuda"))
    taken = {st.array for st, p in plans if isinstance(p, VectorStaging)}
    assert taken == TAKEN[file]
    out = _vectorized(file)
    ptx = ptx_for_sm90a(out)
    assert re.search(r"ld\.global(\.nc)?\.v4\.", ptx), "no 16-byte global load"
    assert re.search(r"st\.shared\.v4\.", ptx), "no 16-byte shared store"
    # the arrays it took are 16-byte aligned, and nothing is left for it to take
    for array in TAKEN[file]:
        assert re.search(rf"__shared__ __align__\(16\)[^;]*\b{array}\b", out), array
    again, _ = vectorize_all(kir.parse(out, "cuda"))
    assert again == out


@pytest.mark.parametrize("file", sorted(TAKEN))
@pytest.mark.parametrize("shape", [(72, 136, 40), (40, 72, 37)], ids=["aligned-rows", "odd-k"])
@pytest.mark.parametrize("mma", [False, True], ids=["scalar", "mma"])
def test_the_rewrite_matches_torch_on_the_cpu_emulator(file: str, shape: tuple[int, int, int],
                                                        mma: bool) -> None:
    text = _vectorized(file)
    if mma:
        _, result = _rewrite(text)
        assert result.ok, result
        text = result.ir.text
        assert "mma.sync" in text and "kl_sv_" in text
    run, dtype = RUNS[file]
    torch.manual_seed(3)
    got, want = run(_emulated(text), *shape, dtype)
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    assert torch.allclose(got, want, atol=tol * want.abs().max().item(), rtol=tol), \
        (got - want).abs().max()


@pytest.mark.parametrize("shape", [(72, 136, 40), (40, 72, 37)], ids=["aligned-rows", "odd-k"])
@pytest.mark.parametrize("mma", [False, True], ids=["scalar", "mma"])
def test_the_staged_loop_pipelines_with_16_byte_cp_async(shape: tuple[int, int, int],
                                                          mma: bool) -> None:
    """cp-async-pipeline on the 16-byte staging: a whole aligned chunk becomes one 16-byte
    cp.async into the ring slot, the element fallback stays ordinary stores into it, and the
    pointers the loop moves on are read ahead by the tiles in flight; it compiles for sm_90a
    and matches torch on the CPU emulator with aligned rows and with odd K (the fallback)."""
    from passes import get_pass
    from passes.base import Applied

    from test_passes_cuda_mma_tile import CTX

    text = _vectorized("blocktile_bf16.cu")
    if mma:
        _, result = _rewrite(text)
        text = result.ir.text
    ir = kir.parse(text, "cuda")
    rule = get_pass("cp-async-pipeline")()
    site = next(s for s in rule.sites(ir) if not s.present)
    result = rule.optimize(ir, site, CTX)
    assert isinstance(result, Applied), result
    text = result.ir.text
    assert text.count("cp.async.cg.shared.global [%0], [%1], 16") == 4  # 2 tiles x prologue/loop
    assert re.search(r"As\[kl_put\]\[[^;]*\] = ", text), "the fallback is not an ordinary store"
    ptx = ptx_for_sm90a(text)
    assert re.search(r"cp\.async\.cg\.shared\.global(\.L2::\w+)? \[[^]]+\], \[[^]]+\], 16", ptx)
    run, dtype = RUNS["blocktile_bf16.cu"]
    torch.manual_seed(5)
    got, want = run(_emulated(text), *shape, dtype)
    assert torch.allclose(got, want, atol=2e-2 * want.abs().max().item(), rtol=2e-2), \
        (got - want).abs().max()


def test_the_pipeline_refuses_what_it_cannot_pipeline_on_the_staged_loop() -> None:
    """A source pointer written besides its per-iteration step, and element copies that are
    no fallback of a whole-chunk copy (the user's own loop), are refused with the reason."""
    from passes import get_pass
    from passes.base import Skipped

    from test_passes_cuda_mma_tile import CTX

    def reason(text: str) -> str:
        ir = kir.parse(text, "cuda")
        rule = get_pass("cp-async-pipeline")()
        site = next(s for s in rule.sites(ir) if not s.present)
        result = rule.optimize(ir, site, CTX)
        assert isinstance(result, Skipped), result
        return result.reason

    staged = _vectorized("blocktile_bf16.cu")
    assert "    A += BK;\n" in staged
    moved = staged.replace("    A += BK;\n", "    A += BK;\n    if (M < 0) A = B;\n")
    assert "writes A" in reason(moved)
    assert "a loop of its own" in reason((DATA / "blocktile_bf16.cu").read_text())


def test_loops_it_cannot_take_say_why() -> None:
    reasons = dict(
        (st.array, p.reason) for st, p in
        staging_loops(kir.parse((DATA / "strided_fp16_at.cu").read_text(), "cuda"))
        if not isinstance(p, VectorStaging))
    # the transposed A tile: consecutive threads write a column, not consecutive elements
    assert "c0 + thread + threads * iteration" in reasons["a_t"]
    # a loop that copies two tiles is not a staging loop of its own
    two = (DATA / "warptile_bf16.cu").read_text().replace(
        "Bs[(innerRowB + offset) * BN + innerColB] = B[(innerRowB + offset) * N + innerColB];",
        "{ Bs[(innerRowB + offset) * BN + innerColB] = B[(innerRowB + offset) * N + innerColB];"
        " As[innerRowB + offset] = A[innerColB]; }")
    reasons = {st.array: p.reason for st, p in staging_loops(kir.parse(two, "cuda"))
               if not isinstance(p, VectorStaging)}
    assert "does more than the copy" in reasons["Bs"]
    # a guard reading a per-thread value that is assigned twice (not expandable): refused,
    # since another thread copies the element
    varying = (DATA / "blocktile_bf16.cu").read_text().replace(
        "  for (int bkIdx = 0;", "  int lim = M - (int)(threadIdx.x % 2);\n  lim += 1;\n  for (int bkIdx = 0;").replace(
        "if (r < M && c < K)", "if (r < lim && c < K)")
    reasons = {st.array: p.reason for st, p in staging_loops(kir.parse(varying, "cuda"))
               if not isinstance(p, VectorStaging)}
    assert "reads lim, set per thread" in reasons["As"]
    # a staging loop whose trip count is known only at run time
    runtime = (DATA / "blocktile_bf16.cu").read_text().replace(
        "loadOffset < BM; loadOffset += strideA", "loadOffset < M - cRow * BM; loadOffset += strideA")
    reasons = {st.array: p.reason for st, p in staging_loops(kir.parse(runtime, "cuda"))
               if not isinstance(p, VectorStaging)}
    assert "not compile-time constants" in reasons["As"]


def test_the_gpu_benchmark_builds_its_staged_rows(tmp_path) -> None:  # noqa: ANN001
    """bench/mma_micro_kernel.py --dry: every row it would time compiles for sm_90a, the staged
    ones among them, and cp-async-pipeline on the staged mma form is a row of its own."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "mma_micro_kernel.py"
    spec = importlib.util.spec_from_file_location("mma_micro_kernel_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--out", str(tmp_path), "--dry"]) == 0
    record = json.loads((tmp_path / "result.json").read_text())
    assert {"start", "start+mma", "start+stage16", "start+stage16+mma"} <= set(record["kernels"])
    assert "start+stage16+mma+cp.async" in record["kernels"], record["refused"]
    assert "kl_sv_" in (tmp_path / "start.stage16.mma.cu").read_text()
