"""masked-bounds: loads kept in bounds by a clamped index become masked loads, and back.

The nw_mm_dispatch style kernel (every index clamped with tl.minimum, the K tail zeroed by a
where) and kernels written here in other styles (a where-clamp on rows only next to a masked K,
a clamp written in the pointer, a 1-D elementwise kernel with the bound first, pointers built
once from the clamps and advanced in the K loop, one or two variables deep): the rewritten
kernel masks its loads, has no clamp left, and matches torch under the interpreter at odd
sizes; the de-optimization gives back a clamped kernel that matches too; clamps whose pinned
lanes could reach a result (read elsewhere, folded by a reduction, stored unmasked) are kept
with the reason, and so are clamps reaching a pointer variable that is also stored to,
reassigned, advanced by the clamp, broadcast above the clamp or itself, or whose index moves
on before the load, and clamps in a pointer with axes inserted above them; the search offers
the rule on the nw_mm_dispatch kernel without a card; at sm_90 the masked GEMM's tiles compile
to 16-byte asynchronous copies where the clamped one loads element by element.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import kir
from passes.base import Applied, PassContext, Skipped
from passes.registry import get_pass
from passes.roundtrip import normalized, roundtrip
from tests.module_helpers import applied_at_its_site, compiled_for_sm90, load_module

ROOT = Path(__file__).resolve().parent.parent
DISPATCH = (ROOT / "bench/styles/nw_mm_dispatch/dispatch_mm.py").read_text()
PASS = get_pass("masked-bounds")()

# rows clamped with a where, columns clamped inside the pointer (in parentheses), K masked
ROWS_WHERE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def rows_kernel(x, w, out, R, C, D, sxr, sxd, swd, swc, sor, soc,
                TR: tl.constexpr, TC: tl.constexpr, TD: tl.constexpr):
    rows = tl.program_id(0) * TR + tl.arange(0, TR)
    cols = tl.program_id(1) * TC + tl.arange(0, TC)
    depth = tl.arange(0, TD)
    safe_rows = tl.where(rows < R, rows, R - 1)
    total = tl.zeros((TR, TC), dtype=tl.float32)
    for d0 in range(0, D, TD):
        dd = d0 + depth
        xt = tl.load(x + safe_rows[:, None] * sxr + dd[None, :] * sxd, mask=dd[None, :] < D,
                     other=0.0)
        wt = tl.load(w + dd[:, None] * swd + (tl.minimum(cols, C - 1))[None, :] * swc,
                     mask=dd[:, None] < D, other=0.0)
        total = tl.dot(xt, wt, total)
    tl.store(out + rows[:, None] * sor + cols[None, :] * soc, total,
             mask=(rows[:, None] < R) & (cols[None, :] < C))


def run(x, w):
    R, D = x.shape
    C = w.shape[1]
    out = torch.empty((R, C), dtype=torch.float32)
    rows_kernel[(triton.cdiv(R, 16), triton.cdiv(C, 16))](
        x, w, out, R, C, D, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
        out.stride(0), out.stride(1), TR=16, TC=16, TD=16)
    return out
'''

# 1-D, the bound written first, one clamp read by one load
ELEMENTWISE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def affine(src, dst, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    idx = tl.minimum(n - 1, offs)
    v = tl.load(src + idx)
    tl.store(dst + offs, v * alpha + 1.0, mask=offs < n)


def run(x, alpha):
    out = torch.empty_like(x)
    n = x.numel()
    affine[(triton.cdiv(n, 64),)](x, out, n, alpha, BLOCK=64)
    return out
'''


def _optimized(source: str) -> Applied:
    return applied_at_its_site(PASS, kir.parse(source, "triton"))


def _kernel_loads(text: str, kernel: str) -> tuple[ast.FunctionDef, list[ast.Call]]:
    fn = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == kernel)
    loads = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and ast.unparse(n.func) == "tl.load"]
    return fn, loads


def _deoptimized(ir: kir.KernelIR, kernel: str) -> Applied:
    (site,) = [s for s in PASS.sites(ir) if s.present and s.detail["kernel"] == kernel]
    back = PASS.deoptimize(ir, site)
    assert isinstance(back, Applied), back
    return back


def _check_masked(text: str, kernel: str) -> None:
    fn, loads = _kernel_loads(text, kernel)
    assert loads and all(any(k.arg == "mask" for k in c.keywords) for c in loads)
    assert "tl.minimum" not in ast.unparse(fn)


def test_dispatch_clamps_become_masks_and_back(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    result = _optimized(DISPATCH)
    text = result.ir.unparse()
    _check_masked(text, "tiled_mm")
    fn, _ = _kernel_loads(text, "tiled_mm")
    assert "tl.where" not in ast.unparse(fn)  # the K tail's zeroing is the mask's `other` now
    gen = torch.Generator().manual_seed(0)
    for m, n, k in ((37, 45, 51), (6, 70, 33)):  # the tiled kernel, then the skinny one
        a = torch.randn(m, k, generator=gen)
        b = torch.randn(k, n, generator=gen)
        for source in (text, _deoptimized(result.ir, "tiled_mm").ir.unparse()):
            got = load_module(source, tmp_path).run(a, b)
            torch.testing.assert_close(got, a @ b, rtol=1e-4, atol=1e-4)
    # the clamped form the de-optimization writes is the rule's again
    back = _deoptimized(result.ir, "tiled_mm").ir
    assert "tl.minimum(rm, M - 1)" in back.unparse()
    again = _optimized(back.unparse()).ir
    assert normalized(again.unparse(), "triton") == normalized(text, "triton")


def test_rows_clamped_by_where_and_inline_clamp(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    text = _optimized(ROWS_WHERE).ir.unparse()
    _check_masked(text, "rows_kernel")
    assert "safe_rows" not in text and "R - 1" not in text
    # the rows' term joins the mask the load had; the columns' clamp written in the pointer too
    assert "mask=(dd[None, :] < D) & (rows[:, None] < R)" in text
    assert "mask=(dd[:, None] < D) & (cols[None, :] < C)" in text
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(29, 35, generator=gen), torch.randn(35, 23, generator=gen)
    for source in (text, _deoptimized(kir.parse(text, "triton"), "rows_kernel").ir.unparse()):
        torch.testing.assert_close(load_module(source, tmp_path).run(x, w), x @ w,
                                   rtol=1e-4, atol=1e-4)


def test_elementwise_clamp(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    text = _optimized(ELEMENTWISE).ir.unparse()
    _check_masked(text, "affine")
    assert "tl.load(src + offs, mask=offs < n, other=0.0)" in text
    x = torch.randn(203, generator=torch.Generator().manual_seed(2))
    back = _deoptimized(kir.parse(text, "triton"), "affine").ir.unparse()
    assert "tl.minimum(offs, n - 1)" in back
    for source in (text, back):
        torch.testing.assert_close(load_module(source, tmp_path).run(x, 0.5), x * 0.5 + 1.0)


@pytest.mark.parametrize("change, why", [
    ("tl.store(dst + offs, v * alpha + 1.0, mask=offs < n)",
     "tl.store(dst + idx, v * alpha + 1.0, mask=offs < n)"),
    ("v * alpha + 1.0", "v * alpha + idx"),
], ids=["stored", "arithmetic"])
def test_a_clamp_read_outside_load_pointers_is_kept(change, why) -> None:
    assert change in ELEMENTWISE
    source = ELEMENTWISE.replace(change, why)
    ir = kir.parse(source, "triton")
    (site,) = [s for s in PASS.sites(ir) if not s.present]
    result = PASS.optimize(ir, site)
    assert isinstance(result, Skipped) and "`idx` is also read outside load pointers" in result.reason


@pytest.mark.parametrize("change, new, why", [
    # a max over the clamped lanes: their duplicates leave it alone, zeros would not
    ("tl.store(dst + offs, v * alpha + 1.0, mask=offs < n)",
     "tl.store(dst + tl.program_id(0), tl.max(v, axis=0))", "moves lanes across axes"),
    ("mask=offs < n)", ")", "does not mask out the clamped lanes"),
    # the index moves on after the clamp: the load's mask would bound another index
    ("    v = tl.load(src + idx)\n", "    offs = offs + 1\n    v = tl.load(src + idx)\n",
     "`offs` is bound again between `idx` and the load"),
], ids=["reduced", "unmasked-store", "rebound"])
def test_a_clamp_whose_lanes_reach_a_result_is_kept(change, new, why) -> None:
    assert change in ELEMENTWISE
    ir = kir.parse(ELEMENTWISE.replace(change, new), "triton")
    (site,) = [s for s in PASS.sites(ir) if not s.present]
    result = PASS.optimize(ir, site)
    assert isinstance(result, Skipped) and why in result.reason, result


def test_the_contracted_axis_of_a_dot_needs_its_zeroing() -> None:
    """Without A's where, the dot would sum the clamped K tail of A: that clamp is kept (the
    rows and columns still become masks)."""
    source = DISPATCH.replace("        a = tl.where(kk[None, :] < K, a, 0.0)\n", "")
    assert source != DISPATCH
    fn, _ = _kernel_loads(_optimized(source).ir.unparse(), "tiled_mm")
    body = ast.unparse(fn)
    assert "kc = tl.minimum(kk, K - 1)" in body
    assert "tl.minimum(rm, M - 1)" not in body and "tl.minimum(rn, N - 1)" not in body


def test_the_search_offers_the_rule_without_a_card() -> None:
    from lineage.moves import rule_offers

    ctx = PassContext.for_case(None, extra={"dtype": "bf16"})
    offered = {card.pass_name: prior for card, prior in rule_offers(kir.parse(DISPATCH, "triton"), ctx)}
    assert "masked-bounds" in offered and offered["masked-bounds"] > 0


# what the launcher specializes at 4096^3: unit strides, sizes and pointers divisible by 16
_TILES = {"BM": 64, "BN": 64, "BK": 32, "sak": 1, "sbn": 1, "scn": 1}


def test_masked_tiles_are_copied_16_bytes_at_a_time_at_sm90(tmp_path) -> None:
    """The mechanism behind the prior: with its indices clamped, the tile's loads are one
    2-byte load per element; masked, they are 16-byte asynchronous copies into shared memory."""
    pytest.importorskip("triton")
    counts = {}
    for name, text in (("clamped", DISPATCH), ("masked", _optimized(DISPATCH).ir.unparse())):
        ptx = compiled_for_sm90(text, tmp_path, name, "tiled_mm", _TILES, pointers="*bf16")["ptx"]
        counts[name] = (len(re.findall(r"cp\.async\.cg\.shared\.global[^;]*0x10", ptx)),
                        len(re.findall(r"ld\.global(?:\.\w+)*\.b16 ", ptx)))
    assert counts["clamped"][0] == 0 and counts["clamped"][1] > 0
    assert counts["masked"][0] > 0 and counts["masked"][1] == 0


# the pointers built once from the clamped indices and advanced in the K loop
POINTER_VARS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def advanced_mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    am = tl.minimum(rm, M - 1)
    bn = tl.minimum(rn, N - 1)
    a_ptrs = a_ptr + am[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + bn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k0, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k0, other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float32)
    advanced_mm[(triton.cdiv(M, 16), triton.cdiv(N, 16))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        c.stride(0), c.stride(1), BM=16, BN=16, BK=16)
    return c
'''

# two levels: the rows' base pointer, then the tile's pointers built from it
TWO_LEVELS = POINTER_VARS.replace(
    "    a_ptrs = a_ptr + am[:, None] * sam + rk[None, :] * sak\n",
    "    a_rows = a_ptr + am[:, None] * sam\n    a_ptrs = a_rows + rk[None, :] * sak\n").replace(
    "    b_ptrs = b_ptr + rk[:, None] * sbk + bn[None, :] * sbn\n",
    "    b_ptrs = b_ptr + rk[:, None] * sbk + tl.minimum(rn, N - 1)[None, :] * sbn\n").replace(
    "    bn = tl.minimum(rn, N - 1)\n", "")


@pytest.mark.parametrize("source", [POINTER_VARS, TWO_LEVELS], ids=["one-level", "two-levels"])
def test_clamps_reaching_loads_through_pointer_variables(source, tmp_path) -> None:
    torch = pytest.importorskip("torch")
    assert source.count("tl.minimum") == 2
    text = _optimized(source).ir.unparse()
    _check_masked(text, "advanced_mm")
    # the pointers are built from the indices themselves; each load masks its own axis
    assert "am" not in text.split() and "M - 1" not in text and "N - 1" not in text
    assert "mask=(rk[None, :] < K - k0) & (rm[:, None] < M), other=0.0)" in text
    assert "mask=(rk[:, None] < K - k0) & (rn[None, :] < N), other=0.0)" in text
    assert "a_ptrs += BK * sak" in text and "b_ptrs += BK * sbk" in text
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(37, 29, generator=gen), torch.randn(29, 21, generator=gen)
    torch.testing.assert_close(load_module(text, tmp_path).run(a, b), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("change, new, why", [
    # the pointer also addresses a store: its pinned lanes would write the last row
    ("    acc = tl.zeros((BM, BN), dtype=tl.float32)\n",
     "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n    tl.store(a_ptrs, tl.zeros((BM, BK), dtype=tl.float32))\n",
     "`a_ptrs`, built from the clamp, is also read outside load pointers (line"),
    ("        a_ptrs += BK * sak\n", "        a_ptrs = a_ptrs + BK * sak\n",
     "`a_ptrs`, built from the clamp, is assigned 2 times"),
    ("        a_ptrs += BK * sak\n", "        a_ptrs += am[:, None] * 0 + BK * sak\n",
     "`a_ptrs`, built from the clamp, is changed on line"),
    ("    a_ptrs = a_ptr + am[:, None] * sam + rk[None, :] * sak\n",
     "    a_ptrs = a_ptr + (am * sam)[:, None] + rk[None, :] * sak\n",
     "`(am * sam)[:, None]` stands between `am` and the load"),
    ("    a_ptrs = a_ptr + am[:, None] * sam + rk[None, :] * sak\n",
     "    a_rows = a_ptr + am * sam\n    a_ptrs = a_rows[:, None] + rk[None, :] * sak\n",
     "`a_rows[:, None]` stands between `a_rows` and the load"),
], ids=["stored", "reassigned", "advanced-by-the-clamp", "broadcast-above-the-clamp",
        "broadcast-variable"])
def test_a_pointer_variable_the_masks_cannot_follow_keeps_its_clamp(change, new, why) -> None:
    assert change in POINTER_VARS
    source = POINTER_VARS.replace(change, new)
    refused = _optimized(source).ir.unparse()  # the columns' clamp is still converted
    assert "am = tl.minimum(rm, M - 1)" in refused and "tl.minimum(rn, N - 1)" not in refused
    rows_only = source.replace("    bn = tl.minimum(rn, N - 1)\n", "").replace(
        "bn[None, :] * sbn", "rn[None, :] * sbn")
    ir = kir.parse(rows_only, "triton")
    (site,) = [s for s in PASS.sites(ir) if not s.present]
    skipped = PASS.optimize(ir, site)
    assert isinstance(skipped, Skipped) and why in skipped.reason, skipped


def test_an_index_bound_again_after_the_pointer_variable_keeps_its_clamp() -> None:
    """The columns' clamp is written in `b_ptrs`; `rn` moves on in the loop, so a mask at the
    load would bound another index than the one the pointer was built from."""
    change = "        acc += tl.dot(a, b)\n"
    source = TWO_LEVELS.replace(change, change + "        rn = rn + 0\n")
    assert source != TWO_LEVELS
    text = _optimized(source).ir.unparse()
    assert "tl.minimum(rn, N - 1)" in text and "tl.minimum(rm, M - 1)" not in text
    ir = kir.parse(source.replace("tl.minimum(rm, M - 1)", "rm"), "triton")
    (site,) = [s for s in PASS.sites(ir) if not s.present]
    result = PASS.optimize(ir, site)
    assert isinstance(result, Skipped), result
    assert "`rn` is bound again between `b_ptrs` and the load" in result.reason



# rows clamped with their axis inserted above the clamp, columns on it
SCALE_2D = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale2d(src, dst, R, C, sr, sc, dr, dc, alpha, B: tl.constexpr):
    r = tl.program_id(0) * B + tl.arange(0, B)
    c = tl.program_id(1) * B + tl.arange(0, B)
    v = tl.load(src + (tl.minimum(r, R - 1) * sr)[:, None] + tl.minimum(c, C - 1)[None, :] * sc)
    tl.store(dst + r[:, None] * dr + c[None, :] * dc, v * alpha,
             mask=(r[:, None] < R) & (c[None, :] < C))


def run(x, alpha):
    R, C = x.shape
    out = torch.empty_like(x)
    scale2d[(triton.cdiv(R, 16), triton.cdiv(C, 16))](
        x, out, R, C, x.stride(0), x.stride(1), out.stride(0), out.stride(1), alpha, B=16)
    return out
'''


def test_axes_inserted_above_a_clamp_in_the_pointer_keep_it(tmp_path) -> None:
    """`(tl.minimum(r, R - 1) * sr)[:, None]`: the term `r < R` would mask the columns (the
    tile is square), so the rows' clamp is kept; the columns' clamp is converted."""
    torch = pytest.importorskip("torch")
    text = _optimized(SCALE_2D).ir.unparse()
    assert "(tl.minimum(r, R - 1) * sr)[:, None]" in text and "C - 1" not in text
    assert "mask=c[None, :] < C, other=0.0" in text
    x = torch.randn(37, 21, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(load_module(text, tmp_path).run(x, 0.5), x * 0.5)
