"""gemm-schedule where the schedule's block is not the user's: the user's body runs for the
user's threads as virtual threads (any block size, 1-D or 2-D threadIdx), the deep forms
launching the schedule's own block; and GEMM micro-kernels over global operands (a K loop
of scalar multiply-adds of elements read straight from global memory, no shared tiles) read
in global terms and given the same schedule. The style tier's textbook 1024-thread tiled
kernel and its naive kernel, and kernels written here in other styles (a 1-D grid counting
tiles with one 1-D block and an early return, fp16; a transposed weight with four rows a
thread and a bias; one output row a block walked by pointer bumps; a tiled kernel of 64
threads), compile for sm_90a and match torch on the
CPU emulator at ragged small shapes; refusals say why."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any, Callable

import pytest

import kir
from passes import PassContext, Skipped, get_pass
from nvrtc_helpers import ptx_for_sm90a

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
STYLES = ROOT / "bench" / "styles" / "cuda"
CTX = PassContext(facts={"arch": "sm_90"})
TMA = {"wgmma": True, "deep": True, "wide": True, "producer": True, "tma": True}

# fp16; blockIdx.x counts 16x16 output tiles row by row; one 1-D block of 256 threads, one
# output each; threads past the matrix leave at once; fmaf
FLAT = r"""#include <cuda_fp16.h>
extern "C" __global__ void hgemm_flat(const __half* x, const __half* y, __half* z, int rows,
                                      int cols, int inner) {
  const int tiles = (cols + 15) / 16;
  const int r = (blockIdx.x / tiles) * 16 + threadIdx.x / 16;
  const int c = (blockIdx.x % tiles) * 16 + threadIdx.x % 16;
  if (r >= rows || c >= cols) return;
  float s = 0.f;
  for (int i = 0; i < inner; i++)
    s = fmaf(__half2float(x[r * inner + i]), __half2float(y[i * cols + c]), s);
  z[r * cols + c] = __float2half(s);
}

void launch_flat(int blocks, const __half* x, const __half* y, __half* z, int rows, int cols,
                 int inner) {
  hgemm_flat<<<blocks, 256>>>(x, y, z, rows, cols, inner);
}
"""

# bf16 x @ w^T + bias (w stored n x k: k contiguous); a 32 x 8 block, four rows a thread, the
# weight element held in a register across them
TRANSPOSED = r"""#include <cuda_bf16.h>
#define ROWS 4
extern "C" __global__ void linear_naive(const __nv_bfloat16* __restrict__ x,
                                        const __nv_bfloat16* __restrict__ w,
                                        const float* __restrict__ bias, __nv_bfloat16* out,
                                        int M, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m0 = (blockIdx.y * blockDim.y + threadIdx.y) * ROWS;
  float acc[ROWS];
  for (int i = 0; i < ROWS; ++i) acc[i] = 0.f;
  if (n < N) {
    for (int k = 0; k < K; ++k) {
      const float wk = __bfloat162float(w[(size_t)n * K + k]);
      for (int i = 0; i < ROWS; ++i)
        if (m0 + i < M) acc[i] += __bfloat162float(x[(size_t)(m0 + i) * K + k]) * wk;
    }
  }
  for (int i = 0; i < ROWS; ++i)
    if (m0 + i < M && n < N) out[(size_t)(m0 + i) * N + n] = __float2bfloat16(acc[i] + bias[n]);
}

void launch_linear(dim3 grid, const __nv_bfloat16* x, const __nv_bfloat16* w, const float* bias,
                   __nv_bfloat16* out, int M, int N, int K) {
  linear_naive<<<grid, dim3(32, 8)>>>(x, w, bias, out, M, N, K);
}
"""

# shared 16x16 tiles on an 8x8 block (two warps), 2x2 outputs a thread, fp32 output scaled
SMALL_BLOCK = r"""#include <cuda_bf16.h>
#define T 16
extern "C" __global__ void mm_small_block(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C,
                                          int M, int N, int K, float alpha) {
  __shared__ __nv_bfloat16 as[T][T];
  __shared__ __nv_bfloat16 bs[T][T];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int r0 = blockIdx.y * T, c0 = blockIdx.x * T;
  float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
  for (int k0 = 0; k0 < K; k0 += T) {
    for (int e = ty * 8 + tx; e < T * T; e += 64) {
      const int i = e / T, j = e % T;
      as[i][j] = (r0 + i < M && k0 + j < K) ? A[(size_t)(r0 + i) * K + k0 + j]
                                            : __float2bfloat16(0.f);
      bs[i][j] = (k0 + i < K && c0 + j < N) ? B[(size_t)(k0 + i) * N + c0 + j]
                                            : __float2bfloat16(0.f);
    }
    __syncthreads();
    for (int kk = 0; kk < T; ++kk)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
          acc[i][j] += __bfloat162float(as[ty + 8 * i][kk]) * __bfloat162float(bs[kk][tx + 8 * j]);
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      const int r = r0 + ty + 8 * i, c = c0 + tx + 8 * j;
      if (r < M && c < N) C[(size_t)r * N + c] = alpha * acc[i][j];
    }
}

void launch_small(dim3 grid, const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M,
                  int N, int K, float alpha) {
  mm_small_block<<<grid, dim3(8, 8)>>>(A, B, C, M, N, K, alpha);
}
"""

# one output row a block (blockIdx.y), 128 columns of it (a 1-D block); the operands walked by
# pointers bumped each k
ROW_BLOCK = r"""#include <cuda_bf16.h>
extern "C" __global__ void row_per_block(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                         __nv_bfloat16* C, int M, int N, int K) {
  const int row = blockIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= M || col >= N) return;
  const __nv_bfloat16* a = A + (size_t)row * K;
  const __nv_bfloat16* b = B + col;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) {
    acc += __bfloat162float(*a) * __bfloat162float(*b);
    ++a;
    b += N;
  }
  C[(size_t)row * N + col] = __float2bfloat16(acc);
}

void launch_rows(dim3 grid, const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                 int M, int N, int K) {
  row_per_block<<<grid, 128>>>(A, B, C, M, N, K);
}
"""


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _flat(launch: Callable[..., None], m: int, n: int, k: int) -> tuple[Any, Any, float]:
    x, y = torch.randn(m, k).half(), torch.randn(k, n).half()
    z = torch.zeros(m, n, dtype=torch.half)
    launch((_cdiv(m, 16) * _cdiv(n, 16), 1), (256, 1), [x, y, z, m, n, k])
    return z.float(), x.float() @ y.float(), 5e-3


def _transposed(launch: Callable[..., None], m: int, n: int, k: int) -> tuple[Any, Any, float]:
    x, w = torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16()
    bias = torch.randn(n)
    out = torch.zeros(m, n, dtype=torch.bfloat16)
    launch((_cdiv(n, 32), _cdiv(m, 32)), (32, 8), [x, w, bias, out, m, n, k])
    return out.float(), x.float() @ w.float().T + bias, 2e-2


def _small(launch: Callable[..., None], m: int, n: int, k: int) -> tuple[Any, Any, float]:
    a, b = torch.randn(m, k).bfloat16(), torch.randn(k, n).bfloat16()
    c = torch.zeros(m, n)
    launch((_cdiv(n, 16), _cdiv(m, 16)), (8, 8), [a, b, c, m, n, k, 0.5])
    return c, 0.5 * (a.float() @ b.float()), 2e-2


def _rows(launch: Callable[..., None], m: int, n: int, k: int) -> tuple[Any, Any, float]:
    a, b = torch.randn(m, k).bfloat16(), torch.randn(k, n).bfloat16()
    c = torch.zeros(m, n, dtype=torch.bfloat16)
    launch((_cdiv(n, 128), m), (128, 1), [a, b, c, m, n, k])
    return c.float(), a.float() @ b.float(), 2e-2


KERNELS = {"flat": (FLAT, "256", _flat), "transposed": (TRANSPOSED, "32x8", _transposed),
           "small-block": (SMALL_BLOCK, "8x8", _small), "row-block": (ROW_BLOCK, "128", _rows)}


def _apply(source: str, options: dict[str, Any], path: Path | None = None) -> Any:
    ir = kir.parse(source, "cuda", path=str(path) if path else None)
    rule = get_pass("gemm-schedule").from_options(options)
    sites = [s for s in rule.sites(ir) if not s.present]
    assert len(sites) == 1 and "refused" not in sites[0].detail, sites
    return rule.optimize(ir, sites[0], CTX)


def _refusal(source: str, options: dict[str, Any]) -> str:
    ir = kir.parse(source, "cuda")
    rule = get_pass("gemm-schedule").from_options(options)
    sites = [s for s in rule.sites(ir) if not s.present]
    if not sites:
        return "no site"
    if "refused" in sites[0].detail:
        return sites[0].detail["refused"]
    result = rule.optimize(ir, sites[0], CTX)
    assert isinstance(result, Skipped), "applied"
    return result.reason


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("kl_bench_gemm_schedule_virtual",
                                                  ROOT / "bench" / "gemm_schedule.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def _launched(text: str, kernel: str, block: tuple[int, int] | None = None
              ) -> Callable[..., None]:
    """A launcher of `kernel` of `text` on the emulator as the bench launches it on the GPU:
    its device half, its limit raised and the dynamic shared memory passed as its edited
    `<<<...>>>` launch does, the TMA form's tensor maps encoded after the arguments; with
    `block` where the edited launch changed the block, else as the caller launches it."""
    from gate.cudacpu.host import emulated

    bench = _bench()

    def launch(grid: Any, own: Any, args: list[Any]) -> None:
        with emulated():
            from experts import cudahost

            func, shared = bench._load_kernel(text, kernel, "virtual", cudahost)
            cudahost.launch(func, grid, block or own, shared, bench.launch_args(text, kernel, args))
    return launch


def _matches(launch: Callable[..., None], run: Callable[..., tuple[Any, Any, float]],
             shapes: tuple[tuple[int, int, int], ...] = ((72, 136, 40), (130, 40, 45))) -> None:
    torch.manual_seed(3)
    for m, n, k in shapes:
        got, want, tol = run(launch, m, n, k)
        assert (got - want).abs().max() <= tol * want.abs().max(), (m, n, k)


def _block_of(text: str, kernel: str) -> tuple[int, int, int]:
    return _bench().launched_block(text, kernel, (0, 0, 0))


def _kernel(text: str) -> str:
    return next(n.name for n in kir.parse(text, "cuda").walk() if n.kind == "kernel")


# ---------------------------------------------------------------------------------------------
# a K loop over global operands, read in global terms


def test_a_naive_kernel_is_read_in_global_terms() -> None:
    naive = (STYLES / "cu_mm_naive" / "mm_naive.cu").read_text()
    ir = kir.parse(naive, "cuda")
    rule = get_pass("gemm-schedule").from_options({"block": "16x16"})
    [site] = [s for s in rule.sites(ir) if not s.present]
    assert site.detail == {
        "kernel": "matmul_naive", "dtype": "bf16",
        "A": {"pointer": "A", "layout": "mk", "ld": "K", "bound": "M", "block_axis": "y"},
        "B": {"pointer": "B", "layout": "kn", "ld": "N", "bound": "N", "block_axis": "x"},
        "K": "K", "block_tile": [16, 16, 1], "block": [16, 16]}
    # the same kernel on a 32 x 8 block: a 8-row, 32-column block tile
    rule = get_pass("gemm-schedule").from_options({"block": "32x8"})
    [site] = [s for s in rule.sites(ir) if not s.present]
    assert site.detail["block_tile"] == [8, 32, 1]
    # the other styles: a 1-D grid counting tiles row by row, a k-contiguous (transposed) B
    # with four rows a thread
    flat = get_pass("gemm-schedule").from_options({"block": "256"})
    [site] = [s for s in flat.sites(kir.parse(FLAT, "cuda")) if not s.present]
    assert site.detail["grid"] == "row" and site.detail["K"] == "inner"
    assert site.detail["A"]["ld"] == "inner" and site.detail["B"]["bound"] == "cols"
    linear = get_pass("gemm-schedule").from_options({"block": "32x8"})
    [site] = [s for s in linear.sites(kir.parse(TRANSPOSED, "cuda")) if not s.present]
    assert site.detail["B"] == {"pointer": "w", "layout": "nk", "ld": "K", "bound": "N",
                                "block_axis": "x"}
    assert site.detail["block_tile"] == [32, 32, 1]
    # one row a block: the leading dimension from the next block's row, the rows' bound from
    # the block holding it
    rows = get_pass("gemm-schedule").from_options({"block": "128"})
    [site] = [s for s in rows.sites(kir.parse(ROW_BLOCK, "cuda")) if not s.present]
    assert site.detail["block_tile"] == [1, 128, 1]
    assert site.detail["A"] == {"pointer": "A", "layout": "mk", "ld": "K", "bound": "M",
                                "block_axis": "y"}


@pytest.mark.parametrize("name", ["flat", "transposed", "row-block"])
def test_naive_kernels_get_the_mma_schedule_and_match_torch_on_the_emulator(name: str) -> None:
    source, block, run = KERNELS[name]
    result = _apply(source, {"block": block})
    assert result.ok, result
    text = result.ir.text
    assert '"virtual": true' in text
    from gate.hostforms import device_source

    ptx = ptx_for_sm90a(device_source(text))
    assert "mma.sync.aligned.m16n8k16" in ptx and "ldmatrix" in ptx
    # the launch is the user's (the 48 KiB form keeps the block): ragged M, N and K
    kernel = _kernel(text)
    _matches(_launched(text, kernel), run)
    # one output a user thread: its body runs once per cell of the fragments, no exchange;
    # several (a column of rows a thread): through the exchange
    cells = name != "transposed"
    assert ('"cells": true' in text) == cells and ("kl_gs_x" in text) != cells
    # reading another cell's fragment register, or of the exchange, than the thread's own: caught
    wrong = (text.replace("[kl_gs_q]}", "[kl_gs_q ^ 1]}") if cells
             else text.replace("kl_gs_y[0]", "kl_gs_y[1]"))
    assert wrong != text
    with pytest.raises(AssertionError):
        _matches(_launched(wrong, kernel), run, ((72, 136, 40),))


@pytest.mark.parametrize("name", list(KERNELS))
def test_the_tma_producer_form_launches_its_own_block_and_matches_torch(name: str) -> None:
    from gate.hostforms import device_source

    source, block, run = KERNELS[name]
    result = _apply(source, {"block": block, **TMA})
    assert result.ok, result
    text = result.ir.text
    kernel = _kernel(text)
    # two multiplying warpgroups and the producer, whatever the user's block
    assert _block_of(text, kernel) == (384, 1, 1)
    assert '"virtual": 384' in text and "__launch_bounds__(384, 1)" in text
    ptx = ptx_for_sm90a(device_source(text))
    for needed in ("cp.async.bulk.tensor.2d", "wgmma.mma_async"):
        assert needed in ptx, needed
    # one output a user thread: the body runs from the fragments (no barrier of the
    # multiplying warpgroups); several: through the exchange, between their barriers
    cells = name in ("flat", "row-block")
    assert ('"cells": true' in text) == cells == ("bar.sync 1, 256" not in ptx)
    _matches(_launched(text, kernel, (384, 1)), run, ((72, 136, 72), (130, 40, 45)))
    if cells:  # the exchange, where asked for, gives the same
        result = _apply(source, {"block": block, **TMA, "exchange": True})
        text = result.ir.text
        assert '"exchange": true' in text
        assert "bar.sync 1, 256" in ptx_for_sm90a(device_source(text))
        _matches(_launched(text, kernel, (384, 1)), run, ((72, 136, 72),))


@pytest.mark.parametrize("name,options,threads", [
    ("small-block", {"wgmma": True, "deep": True, "specialize": True}, 384),
    ("small-block", {"deep": True}, 256),
    ("flat", {"wgmma": True, "deep": True, "stages": 3}, 256),
    ("flat", {"wgmma": True, "deep": True, "producer": True}, 384),
], ids=["specialized-fillers", "mma-sync-deep", "wgmma-deep-3-slots", "producer-cp-async"])
def test_every_deep_form_launches_its_own_block_and_matches_torch(
        name: str, options: dict[str, Any], threads: int) -> None:
    source, block, run = KERNELS[name]
    result = _apply(source, {"block": block, **options})
    assert result.ok, result
    text = result.ir.text
    kernel = _kernel(text)
    assert _block_of(text, kernel) == (threads, 1, 1) and f'"virtual": {threads}' in text
    _matches(_launched(text, kernel, (threads, 1)), run)


def test_four_consumer_warpgroups_on_a_block_of_64_threads() -> None:
    source, block, run = KERNELS["small-block"]
    result = _apply(source, {"block": block, **TMA, "consumers": 4})
    assert result.ok, result
    text = result.ir.text
    assert _block_of(text, "mm_small_block") == (640, 1, 1)
    assert '"consumers": 4' in text and '"virtual": 640' in text
    _matches(_launched(text, "mm_small_block", (640, 1)), run, ((72, 300, 72),))


@pytest.mark.parametrize("name", list(KERNELS))
def test_the_de_optimization_restores_the_kernel_and_the_round_trip_is_exact(name: str) -> None:
    from passes.roundtrip import roundtrip

    source, block, run = KERNELS[name]
    rule = get_pass("gemm-schedule").from_options({"block": block, **TMA})
    result = _apply(source, {"block": block, **TMA})
    assert result.ok, result
    done = next(s for s in rule.sites(result.ir) if s.present)
    back = rule.deoptimize(result.ir, done, CTX)
    assert back.ok, back
    plain = back.ir.text
    assert "kl_gs_" not in plain and "__launch_bounds__" not in plain
    kernel = _kernel(plain)
    # the launch as written (the user's block), a K loop again: over global memory where the
    # kernel read its operands there, over staged tiles where it staged them
    assert re.search(r"<<<.*?>>>", source).group(0) in plain and "kl_gs_grid" not in plain
    assert ("__shared__" in plain) == (name == "small-block")
    _matches(_launched(plain, kernel), run, ((40, 56, 24),))
    assert roundtrip(rule, result.ir, done, CTX).same


# ---------------------------------------------------------------------------------------------
# the style tier's starts through their own host modules, as the gate runs them


def _case(name: str) -> tuple[Path, Path]:
    folder = STYLES / name
    spec = importlib.util.spec_from_file_location(f"kl_virtual_case_{name}", folder / "case.py")
    case = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(case)
    return folder / case.START, folder / "case.py"


def _through_host(start: Path, options: dict[str, Any], folder: Path) -> Any:
    """The start's host module, loaded from `folder`, launching gemm-schedule's output under
    `options` (the rule at the start's first open site; the host edited as the gate edits it)."""
    from kir import hostlaunch

    ir = kir.parse(start.read_text(), "cuda", path=str(start))
    rule = get_pass("gemm-schedule").from_options(options)
    result = rule.optimize(ir, next(s for s in rule.sites(ir) if not s.present), CTX)
    assert result.ok, result
    folder.mkdir()
    host = start.with_suffix(".py")
    (folder / host.name).write_text(hostlaunch.apply(host.read_text(), result.ir.text))
    (folder / start.name).write_text(result.ir.text)
    spec = importlib.util.spec_from_file_location(f"kl_gpu_{folder.parent.name}_{folder.name}",
                                                  folder / host.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name,options,block", [
    ("cu_mm_smem_tiled", TMA, (384, 1, 1)),
    ("cu_mm_smem_tiled", {**TMA, "consumers": 4}, (640, 1, 1)),
    ("cu_mm_naive", TMA, (384, 1, 1)),
    ("cu_mm_bt", TMA, (16, 24, 1)),
], ids=["textbook-1024-threads-tma", "textbook-1024-threads-4-consumers", "naive-tma",
        "one-output-a-thread-256-threads-tma"])
def test_the_style_starts_take_the_tma_producer_form_through_their_host(
        name: str, options: dict[str, Any], block: tuple[int, int, int]) -> None:
    import gate
    from kir import hostlaunch

    start, case = _case(name)
    ir = kir.parse(start.read_text(), "cuda", path=str(start))
    rule = get_pass("gemm-schedule").from_options(options)
    [site] = [s for s in rule.sites(ir) if not s.present]
    result = rule.optimize(ir, site, CTX)
    assert result.ok, result
    [asked] = hostlaunch.directives(result.ir.text)
    # the host's launch of the user's block becomes the schedule's own, the grid persistent
    assert asked.block_from in ((32, 32, 1), (16, 16, 1)) and asked.block == block
    assert asked.persist and asked.tma is not None and asked.arch == "sm_90a"
    verdict = gate.check(result.ir.text, "cuda", str(case), "emulate", path=start, cache=False)
    assert verdict.ok, verdict.reason
    # the de-optimization takes the host-launch line back and gives the start's body back
    from passes.roundtrip import roundtrip

    done = next(s for s in rule.sites(result.ir) if s.present)
    back = rule.deoptimize(result.ir, done, CTX)
    assert back.ok and hostlaunch.TAG not in back.ir.text and "kl_gs_" not in back.ir.text
    assert roundtrip(rule, result.ir, done, CTX).same


def test_the_bench_rewrites_both_starts_in_the_fullest_forms() -> None:
    # bench/gemm_schedule.py --starts cu_mm_smem_tiled,cu_mm_naive: each start rewritten where
    # its file is (its host asked for the launch), in the rule's fullest forms and the
    # four-consumer one
    from passes.cuda.recognize import launch_block

    bench = _bench()
    starts = {s["name"]: s for s in bench.style_starts()}
    for name, grown in (("cu_mm_smem_tiled", (32, 32, 1)), ("cu_mm_naive", (16, 16, 1))):
        start = starts[name]
        block = launch_block(kir.parse(start["source"], "cuda"), host=start["host_text"]).dims
        assert tuple(block) == grown
        for form, threads in (("wgmma_deep_wide_tma", 384), ("wgmma_deep_wide", 256),
                              ("wgmma_deep_wide_tma_c4", 640)):
            got = bench.rewrite(start["source"], block, "sm_90", form,
                                start["host"].with_suffix(".cu"))
            assert not isinstance(got, str), (name, form, got)
            assert f'"virtual": {threads}' in got[0], (name, form)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cu_mm_smem_tiled", "cu_mm_naive"])
def test_on_the_gpu_the_style_starts_run_the_fullest_forms_through_their_host(
        tmp_path: Path, name: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma and TMA need sm_90a")
    start, _ = _case(name)
    for i, options in enumerate((TMA, {**TMA, "consumers": 4},
                                 {"wgmma": True, "deep": True, "wide": True})):
        module = _through_host(start, options, tmp_path / f"form{i}")
        torch.manual_seed(6)
        # ragged sizes; K = 520 rows encode (TMA), K = 517 do not (the cp.async fill)
        for m, n, k in ((1000, 1032, 520), (999, 1001, 517)):
            a = torch.randn(m, k, device="cuda").bfloat16()
            b = torch.randn(k, n, device="cuda").bfloat16()
            got = module.run(a, b).float()
            want = a.float() @ b.float()
            assert (got - want).abs().max() <= 2e-2 * want.abs().max(), (options, m, n, k)


# ---------------------------------------------------------------------------------------------
# refusals


def test_refusals_say_why() -> None:
    naive = (STYLES / "cu_mm_naive" / "mm_naive.cu").read_text()
    # a body that waits at a block barrier cannot run its threads as virtual threads
    staged = naive.replace(
        "        C[(size_t)row * N + col] = __float2bfloat16(acc);",
        "        __shared__ float t[16][17];\n        t[threadIdx.y][threadIdx.x] = acc;\n"
        "        __syncthreads();\n"
        "        C[(size_t)row * N + col] = __float2bfloat16(t[threadIdx.y][threadIdx.x]);")
    assert "waits at a block barrier" in _refusal(staged, {"block": "16x16"})
    # nor one that works across a warp
    shuffled = naive.replace("C[(size_t)row * N + col] = __float2bfloat16(acc);",
                             "C[(size_t)row * N + col] = __float2bfloat16(acc + "
                             "__shfl_xor_sync(0xffffffffu, acc, 1));")
    assert "works across a warp" in _refusal(shuffled, {"block": "16x16"})
    # also where a function the body calls does
    helper = naive.replace("extern \"C\" __global__",
                           "__device__ float pair_sum(float v) {\n"
                           "  return v + __shfl_xor_sync(0xffffffffu, v, 1);\n}\n\n"
                           "extern \"C\" __global__").replace(
        "C[(size_t)row * N + col] = __float2bfloat16(acc);",
        "C[(size_t)row * N + col] = __float2bfloat16(pair_sum(acc));")
    assert "pair_sum(acc)" in helper
    assert "works across a warp" in _refusal(helper, {"block": "16x16"})
    # what the K loop computes is not a row of A times a column of B: no site where both
    # factors are one operand's; refused where the products are scaled, stepped unevenly, or
    # run one k past K
    same = naive.replace("__bfloat162float(B[(size_t)k * N + col])",
                         "__bfloat162float(A[(size_t)k * N + col])")
    assert _refusal(same, {"block": "16x16"}) == "no site"
    scaled = naive.replace("acc += __bfloat162float", "acc += 2.0f * __bfloat162float")
    assert "scaled" in _refusal(scaled, {"block": "16x16"})
    uneven = naive.replace("A[(size_t)row * K + k]", "A[(size_t)row * K + k + (k & 1)]")
    assert "k steps are not even" in _refusal(uneven, {"block": "16x16"})
    past = naive.replace("k < K", "k <= K")
    assert "product count names no single integer" in _refusal(past, {"block": "16x16"})
    # one output a thread in the order of a flat index: a block's outputs are no rectangle
    linear = naive.replace("    int row = blockIdx.y * blockDim.y + threadIdx.y;\n"
                           "    int col = blockIdx.x * blockDim.x + threadIdx.x;",
                           "    int idx = blockIdx.x * blockDim.x + threadIdx.x;\n"
                           "    int row = idx / N, col = idx % N;")
    assert "row = idx / N" in linear
    assert "a block's outputs are one of A's rows" in _refusal(linear, {"block": "256"})
    # the block must be known
    assert "block size is not known" in _refusal(naive, {})
