"""The grouped tile order found and added by role: the block indices are the program indices
that scale the dot accumulator's row and column offsets, whatever their names, in 1-D grids
(`pid // x`, `pid % x`) and 2-D grids (`tl.program_id(0)` / `(1)`, either way round, a batch
axis kept). Every rewrite runs in the Triton interpreter (the session sets TRITON_INTERPRET)
against torch at shapes that are no multiple of the tiles, with several groups of blocks."""
from __future__ import annotations

import itertools
from pathlib import Path
from types import ModuleType

import pytest
import torch

import kir
from module_helpers import load_module
from skill_helpers import packed_library
from passes import Applied, Skipped, get_pass
from passes.triton._py import PyModule
from passes.triton.ordering import _tiling

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "bench" / "heldout"
LIBRARY = packed_library("heldout_all")

# 2-D grid, rows on axis 0: BM/BN/BK tiles, program ids named by the kernel's own words.
GRID_2D = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm2d(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    row_blk = tl.program_id(0)
    col_blk = tl.program_id(1)
    rm = row_blk * BM + tl.arange(0, BM)
    rn = col_blk * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * sam + (k0 + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
    mm2d[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
               c.stride(0), c.stride(1), BM=16, BN=16, BK=16)
    return c
'''

# 2-D grid the other way round: columns on axis 0, rows on axis 1, program ids inline.
GRID_2D_SWAPPED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm_cols_first(x, y, out, M, N, K, TILE_M: tl.constexpr, TILE_N: tl.constexpr,
                  TILE_K: tl.constexpr):
    r = tl.program_id(1) * TILE_M + tl.arange(0, TILE_M)
    c = tl.program_id(0) * TILE_N + tl.arange(0, TILE_N)
    kk = tl.arange(0, TILE_K)
    total = tl.zeros([TILE_M, TILE_N], tl.float32)
    for k in range(0, tl.cdiv(K, TILE_K)):
        ks = k * TILE_K + kk
        xa = tl.load(x + r[:, None] * K + ks[None, :], mask=(r[:, None] < M) & (ks[None, :] < K),
                     other=0.0)
        yb = tl.load(y + ks[:, None] * N + c[None, :], mask=(ks[:, None] < K) & (c[None, :] < N),
                     other=0.0)
        total = tl.dot(xa, yb, total)
    tl.store(out + r[:, None] * N + c[None, :], total.to(out.dtype.element_ty),
             mask=(r[:, None] < M) & (c[None, :] < N))


def run(a, b):
    a, b = a.contiguous(), b.contiguous()
    M, K = a.shape
    N = b.shape[1]
    out = torch.empty((M, N), device=a.device, dtype=a.dtype)
    mm_cols_first[lambda meta: (triton.cdiv(N, meta["TILE_N"]), triton.cdiv(M, meta["TILE_M"]))](
        a, b, out, M, N, K, TILE_M=16, TILE_N=16, TILE_K=16)
    return out
'''

# 1-D grid, row-major under other names.
GRID_1D = '''
import torch
import triton
import triton.language as tl


@triton.jit
def flat_mm(A, B, C, rows, cols, depth, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
            BLOCK: tl.constexpr, BLOCK_COLS: tl.constexpr, STEP: tl.constexpr):
    t = tl.program_id(axis=0)
    per_row = tl.cdiv(cols, BLOCK_COLS)
    i = t // per_row
    j = t % per_row
    oi = i * BLOCK + tl.arange(0, BLOCK)
    oj = j * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    ok = tl.arange(0, STEP)
    acc = tl.zeros((BLOCK, BLOCK_COLS), dtype=tl.float32)
    for s in range(0, tl.cdiv(depth, STEP)):
        left = depth - s * STEP
        a = tl.load(A + oi[:, None] * s_am + (s * STEP + ok)[None, :] * s_ak,
                    mask=(oi[:, None] < rows) & (ok[None, :] < left), other=0.0)
        b = tl.load(B + (s * STEP + ok)[:, None] * s_bk + oj[None, :] * s_bn,
                    mask=(ok[:, None] < left) & (oj[None, :] < cols), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(C + oi[:, None] * s_cm + oj[None, :] * s_cn, acc.to(C.dtype.element_ty),
             mask=(oi[:, None] < rows) & (oj[None, :] < cols))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK"]) * triton.cdiv(N, meta["BLOCK_COLS"]),)
    flat_mm[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                  BLOCK=16, BLOCK_COLS=16, STEP=16)
    return c
'''

# 1-D grid walking columns fastest the other way: `col = t // tiles_m`, `row = t % tiles_m`.
GRID_1D_COLUMNS = GRID_1D.replace(
    "    per_row = tl.cdiv(cols, BLOCK_COLS)\n    i = t // per_row\n    j = t % per_row\n",
    "    per_col = tl.cdiv(rows, BLOCK)\n    j = t // per_col\n    i = t % per_col\n")


def _load(source: str, where: Path) -> ModuleType:
    return load_module(source, where, "grouped")


def _forward(source: str) -> tuple[kir.KernelIR, Applied]:
    """The grouped order added at the kernel's one open site (pass defaults)."""
    ir = kir.parse(source, language="triton")
    p = get_pass("grouped-ordering")()
    sites = [s for s in p.sites(ir) if not s.present]
    assert len(sites) == 1, sites
    result = p.optimize(ir, sites[0])
    assert isinstance(result, Applied), result
    return ir, result


def _matches_torch(source: str, where: Path, batch: int | None = None) -> None:
    run = _load(source, where).run
    for dtype, (m, n, k) in itertools.product((torch.float16, torch.float32),
                                              [(150, 70, 45), (37, 90, 20)]):
        g = torch.Generator().manual_seed(m + n)
        shape_a, shape_b = ((batch, m, k), (batch, k, n)) if batch else ((m, k), (k, n))
        a = torch.randn(*shape_a, generator=g).to(dtype)
        b = torch.randn(*shape_b, generator=g).to(dtype)
        out = run(a, b).float()
        ref = a.float() @ b.float()
        tol = 1e-2 if dtype == torch.float16 else 1e-4
        assert torch.allclose(out, ref, atol=tol * k ** 0.5, rtol=tol), (dtype, m, n, k)


@pytest.mark.parametrize("source", [GRID_2D, GRID_2D_SWAPPED, GRID_1D, GRID_1D_COLUMNS],
                         ids=["2d", "2d-swapped", "1d", "1d-columns"])
def test_grouped_order_is_added_by_role_and_stays_correct(source: str, tmp_path: Path) -> None:
    ir, result = _forward(source)
    text = result.ir.text
    # one grid axis, walked in groups: the rule now finds the order it wrote, by role
    p = get_pass("grouped-ordering")()
    present = [s for s in p.sites(result.ir) if s.present]
    assert len(present) == 1 and not [s for s in p.sites(result.ir) if not s.present]
    assert "group_id = " in text and text.count("program_id(") == 1
    _matches_torch(text, tmp_path)


def test_a_2d_grid_becomes_one_axis_on_the_host_too() -> None:
    _, result = _forward(GRID_2D)
    text = result.ir.text
    assert 'grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)' in text
    assert "row_blk = first_pid_m + " in text and "col_blk = (pid % num_pid_in_group)" in text
    # the group size is a new constexpr, launched with the default
    assert "BK: tl.constexpr, GROUP_M: tl.constexpr):" in text and "BK=16, GROUP_M=8)" in text


def test_the_columns_first_order_groups_column_blocks() -> None:
    _, result = _forward(GRID_1D_COLUMNS)
    text = result.ir.text
    assert "num_pid_n = tl.cdiv(cols, BLOCK_COLS)" in text and "GROUP_N: tl.constexpr" in text
    assert "j = first_pid_n + ((t % num_pid_in_group) % group_size_n)" in text


@pytest.mark.parametrize("case, batch", [("mm2048", None), ("bmm", 2)])
def test_heldout_start_kernels_take_the_grouped_order(case: str, batch: int | None,
                                                     tmp_path: Path) -> None:
    start = next(p for p in (HELDOUT / case).glob("*.py") if p.name != "case.py")
    _, result = _forward(start.read_text())
    if batch:  # the batch axis keeps its program id and its place in the grid
        assert "batch = tl.program_id(2)" in result.ir.text
        assert '* triton.cdiv(N, meta["BLOCK"]), 1, nb)' in result.ir.text
    _matches_torch(result.ir.text, tmp_path, batch)


def test_the_round_trip_on_a_renamed_kernel() -> None:
    """De-optimizing the grouped order the rule wrote gives the row-major order back, and the
    recorded swizzle restores it."""
    from passes.roundtrip import roundtrip

    _, result = _forward(GRID_1D)
    p = get_pass("grouped-ordering")()
    site = next(s for s in p.sites(result.ir) if s.present)
    trip = roundtrip(p, result.ir, site)
    assert trip.same, trip.forward
    assert "i = t // per_row\n    j = t % per_row\n" in trip.backward.ir.text


def _merge_refusal(source: str) -> str:
    ir = kir.parse(source, language="triton")
    p = get_pass("grouped-ordering")()
    assert not [s for s in p.sites(ir) if not s.present]
    mod = PyModule(ir)
    kernel = mod.kernels()[0]
    tiling = _tiling(mod, kernel)
    assert not isinstance(tiling, str), tiling
    made = p._merge_grid(mod, kernel, tiling)
    assert isinstance(made, Skipped)
    return made.reason


def test_grids_whose_indices_cannot_be_remapped_are_refused() -> None:
    # grouped GEMM: the rows a program covers are bounded by loaded offsets, not a parameter
    grouped = (HELDOUT / "grouped_gemm" / "grouped_start.py").read_text()
    assert "size along m" in _merge_refusal(grouped)
    # the kernel reads the program count along an axis the merge removes
    counted = GRID_2D.replace("    rk = tl.arange(0, BK)\n",
                              "    rk = tl.arange(0, BK) + 0 * tl.num_programs(1)\n")
    assert "number of programs" in _merge_refusal(counted)
    # the grid is built by a function that does more than return it
    by_def = GRID_2D.replace("    grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))\n",
                             "    def grid(meta):\n"
                             "        rows = triton.cdiv(M, 16)\n"
                             "        return (rows, triton.cdiv(N, 16))\n")
    assert "launch grid" in _merge_refusal(by_def)


def test_the_gemm_lineage_card_materializes_on_a_renamed_kernel(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """The admitted grouped-ordering card (gemm lineage) on a kernel whose names it has never
    seen: its recorded swizzle does not fit, the pass defaults rewrite by role, and the result
    passes the interpret gate of the held-out case."""
    from gate import check
    from lineage.optimize import materializations
    from lineage.skills import Library
    from passes.rewriter import DeterministicRewriter

    monkeypatch.setenv("KLINEAGE_CACHE_DIR", str(tmp_path / "cache"))
    cards = [c for c in Library.open(LIBRARY).cards(admitted_only=True)
             if c.pass_name == "grouped-ordering"]
    assert cards
    for source in (GRID_2D, GRID_1D):
        ir = kir.parse(source, language="triton")
        for card in cards:
            made = next(iter(materializations(card, ir, DeterministicRewriter())))
            assert made.ok, made.refusals
            assert made.options == {} and made.refusals  # the recorded swizzle did not fit
            verdict = check(made.ir.text, "triton", HELDOUT / "mm1024", "interpret")
            assert verdict.ok, verdict


@pytest.mark.parametrize("case, start, expect", [
    # `def grid(META): return (cdiv(M, META["TILE_M"]), cdiv(N, META["TILE_N"]))` inside an
    # autograd.Function's forward: the function stays and returns the one merged axis
    ("mm_autograd_fn", "fn_matmul.py",
     'return (triton.cdiv(M, META["TILE_M"]) * triton.cdiv(N, META["TILE_N"]),)'),
    # `i = pid // blocks_n; j = pid - i * blocks_n` is `pid % blocks_n` written out
    ("mm_w8_dequant_kw", "w8mm.py", "j = (pid % num_pid_in_group) // group_size_m"),
])
def test_grid_functions_and_written_out_remainders_take_the_grouped_order(
        case: str, start: str, expect: str) -> None:
    import gate

    folder = ROOT / "bench/styles" / case
    ir = kir.parse_file(folder / start)
    step = get_pass("grouped-ordering")()
    result = step.optimize(ir, next(s for s in step.sites(ir) if not s.present))
    assert isinstance(result, Applied), result
    assert expect in result.ir.text
    verdict = gate.check(result.ir.text, "triton", str(folder), tier="interpret", cache=False)
    assert verdict.ok, (verdict.stage, verdict.reason)


def test_a_square_product_bounded_by_one_size_takes_the_grouped_order(tmp_path: Path) -> None:
    """One size parameter bounds the rows, the columns and K (a square product, KernelBench's
    level-1 start): it counts the blocks along both merged axes, on the host too, and the
    grouped kernel matches torch on square inputs whose side is no multiple of the tiles."""
    start = (Path(__file__).resolve().parents[1] / "bench" / "kernelbench" / "level1"
             / "1_Square_matrix_multiplication_.py").read_text()
    _, result = _forward(start)
    text = result.ir.text
    assert "num_pid_m = tl.cdiv(N, BM)" in text and "num_pid_n = tl.cdiv(N, BN)" in text
    assert 'lambda meta: (triton.cdiv(n, meta["BM"]) * triton.cdiv(n, meta["BN"]),)' in text
    run = _load(text, tmp_path).run
    for n in (70, 150):
        g = torch.Generator().manual_seed(n)
        a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
        assert torch.allclose(run(a, b), a @ b, atol=1e-3 * n ** 0.5, rtol=1e-3), n
