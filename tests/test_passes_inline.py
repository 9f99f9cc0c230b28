"""Inlining `@triton.jit` helpers (`passes.triton.inline`) and cards acting through it."""
from __future__ import annotations

from pathlib import Path

import kir
import pytest
from attention_sources import CAUSAL
from skill_helpers import packed_library

from passes import get_pass
from passes.triton.inline import inline_helpers

ROOT = Path(__file__).resolve().parents[1]
HELPER_CASE = ROOT / "bench" / "styles" / "mm_helper"
HELPER_SOURCE = (HELPER_CASE / "mm_helper.py").read_text()


def _open_sites(name: str, ir: kir.KernelIR) -> int:
    return sum(not s.present for s in get_pass(name)().sites(ir))


def test_a_helpers_k_loop_is_written_into_the_kernel() -> None:
    ir = kir.parse(HELPER_SOURCE, "triton")
    out = inline_helpers(ir)
    assert out is not None
    text = out.unparse()
    kernel = text[text.index("def matmul_kernel"):text.index("def run")]
    assert "_mma_tile(" not in kernel and "tl.dot(a, b)" in kernel
    assert "def _mma_tile(" in text  # the helper stays defined
    compile(text, "inlined.py", "exec")
    # what the helper hid is a site now
    assert _open_sites("tma-descriptors", ir) == 0 < _open_sites("tma-descriptors", out)
    assert _open_sites("grouped-ordering", ir) == 0 < _open_sites("grouped-ordering", out)
    assert inline_helpers(out) is None  # nothing left to inline


def test_arguments_that_are_expressions_are_bound_first_and_clashing_names_renamed() -> None:
    text = '''import triton
import triton.language as tl


@triton.jit
def _scaled(x, s):
    y = x * s
    return y + 1


@triton.jit
def k(p, n, BLOCK: tl.constexpr):
    y = tl.arange(0, BLOCK)
    v = tl.load(p + y, mask=y < n)
    out = _scaled(v, n * 2)
    tl.store(p + y, out + y, mask=y < n)


def run(x):
    k[(1,)](x, x.numel(), BLOCK=64)
    return x
'''
    out = inline_helpers(kir.parse(text, "triton")).unparse()
    body = out[out.index("def k("):out.index("def run")]
    assert "s = n * 2" in body and "y_scaled = v * s" in body and "out = y_scaled + 1" in body
    assert "tl.store(p + y, out + y" in body  # the kernel's own `y` is untouched


@pytest.mark.parametrize("change", [
    ("    return acc\n", "    if K < 0:\n        return acc\n    return acc\n"),  # two returns
    ("    acc = _mma_tile(a_ptr", "    acc = 1 + _mma_tile(a_ptr"),  # not `name = helper(...)`
])
def test_helpers_that_cannot_be_inlined_as_written_are_left(change: tuple[str, str]) -> None:
    text = HELPER_SOURCE.replace(*change)
    assert text != HELPER_SOURCE
    assert inline_helpers(kir.parse(text, "triton")) is None


@pytest.mark.slow
def test_the_inlined_kernel_computes_the_same() -> None:
    gate = pytest.importorskip("gate")
    out = inline_helpers(kir.parse(HELPER_SOURCE, "triton"))
    verdict = gate.check(out.unparse(), "triton", str(HELPER_CASE), tier="interpret", cache=False)
    assert verdict.ok, (verdict.stage, verdict.reason)


def test_a_card_without_a_site_acts_on_the_kernel_with_its_helpers_inlined() -> None:
    from lineage.optimize import materializations
    from lineage.skills import Library
    from passes.base import PassContext
    from passes.rewriter import DeterministicRewriter

    lib = Library.open(packed_library("heldout_all"))
    card = next(c for c in lib.cards() if c.id == "tma-descriptors.triton.7de2c2db")
    ir = kir.parse(HELPER_SOURCE, "triton")
    ctx = PassContext.for_case(str(HELPER_CASE), tier="device")
    made = next(iter(materializations(card, ir, DeterministicRewriter(), ctx)))
    assert made.ok and "helpers inlined" in made.refusals
    assert "make_tensor_descriptor(" in made.ir.unparse()


FLAGGED_HELPER = '''import torch
import triton
import triton.language as tl


@triton.jit
def _keys(acc, l_i, m_i, q, k_ptr, v_ptr, rows, lo, hi, n, scale,
          BN: tl.constexpr, D: tl.constexpr, IS_CAUSAL: tl.constexpr):
    cols = tl.arange(0, BN)
    dims = tl.arange(0, D)
    for j in range(lo, hi, BN):
        keys = j + cols
        k = tl.load(k_ptr + keys[:, None] * D + dims[None, :], mask=keys[:, None] < n, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        if IS_CAUSAL:
            s = tl.where(rows[:, None] >= keys[None, :], s, float("-inf"))
        else:
            s = tl.where(keys[None, :] < n, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        v = tl.load(v_ptr + keys[:, None] * D + dims[None, :], mask=keys[:, None] < n, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attn(q_ptr, k_ptr, v_ptr, o_ptr, n, scale, BM: tl.constexpr, BN: tl.constexpr,
         D: tl.constexpr, CAUSAL: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    dims = tl.arange(0, D)
    q = tl.load(q_ptr + rows[:, None] * D + dims[None, :], mask=rows[:, None] < n, other=0.0)
    acc = tl.zeros((BM, D), dtype=tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    m_i = tl.full((BM,), float("-inf"), dtype=tl.float32)
    if CAUSAL:
        acc, l_i, m_i = _keys(acc, l_i, m_i, q, k_ptr, v_ptr, rows, 0, n, n, scale, BN, D, True)
    else:
        acc, l_i, m_i = _keys(acc, l_i, m_i, q, k_ptr, v_ptr, rows, 0, n, n, scale, BN, D, False)
    tl.store(o_ptr + rows[:, None] * D + dims[None, :], acc / l_i[:, None], mask=rows[:, None] < n)


def run(q, k, v, causal):
    o = torch.empty_like(q)
    n, d = q.shape
    attn[(triton.cdiv(n, 64),)](q, k, v, o, n, d ** -0.5, BM=64, BN=64, D=d, CAUSAL=causal)
    return o
'''


def test_a_flag_the_call_binds_to_a_literal_is_folded_and_its_masked_loop_becomes_a_site() -> None:
    ir = kir.parse(FLAGGED_HELPER, "triton")
    out = inline_helpers(ir)
    assert out is not None
    text = out.unparse()
    kernel = text[text.index("def attn("):text.index("def run")]
    # the causal call keeps the triangle's mask only, the other call the length mask only
    assert "if True" not in kernel and "if False" not in kernel and "IS_CAUSAL" not in kernel
    assert kernel.count("rows[:, None] >= keys[None, :]") == 1
    compile(text, "inlined.py", "exec")
    # under the flag the mask was no mask of every iteration; folded, the key loop of the
    # causal call can stop at the row block's end
    skip = get_pass("causal-block-skip")()
    assert not [s for s in skip.sites(ir) if s.detail.get("form") == "bound"]
    bounds = [s for s in skip.sites(out) if s.detail.get("form") == "bound"]
    assert len(bounds) == 1 and not bounds[0].present
    assert bounds[0].detail["limit"] == "tl.program_id(0) * BM + BM"


def test_a_causal_card_from_another_operator_skips_blocks_behind_a_flagged_helper() -> None:
    """The trmm lineage's card (a K loop of a triangular product stopped at the row block)
    carries no recorded code an attention kernel has; on a kernel whose masked loop sits in a
    helper under a flag, it acts on the kernel with the helper inlined and its flag folded."""
    from lineage.optimize import materializations
    from lineage.skills import Library
    from passes.base import PassContext
    from passes.rewriter import DeterministicRewriter

    lib = Library.open(packed_library("heldout_all"))
    card = next(c for c in lib.cards()
                if c.pass_name == "causal-block-skip" and c.scope["cases"] == ["trmm"])
    assert card.admitted
    ir = kir.parse(FLAGGED_HELPER, "triton")
    made = next(iter(materializations(card, ir, DeterministicRewriter(), PassContext())))
    assert made.ok and "helpers inlined" in made.refusals
    text = made.ir.unparse()
    assert "tl.minimum(n, tl.program_id(0) * BM + BM)" in text


def test_a_stage_number_the_call_binds_is_compared_and_folded() -> None:
    """A helper that picks its mask by comparing a stage argument (`if STAGE == 2:`), called
    with a literal: the comparison is folded like a flag, and a comparison with a name is not."""
    text = (FLAGGED_HELPER
            .replace("IS_CAUSAL: tl.constexpr", "STAGE: tl.constexpr")
            .replace("if IS_CAUSAL:", "if STAGE == 2:")
            .replace("scale, BN, D, True)", "scale, BN, D, 2)")
            .replace("scale, BN, D, False)", "scale, BN, D, 3)"))
    assert text.count("STAGE") == 2
    out = inline_helpers(kir.parse(text, "triton")).unparse()
    kernel = out[out.index("def attn("):out.index("def run")]
    assert "== 2" not in kernel and kernel.count("rows[:, None] >= keys[None, :]") == 1
    bounds = [s for s in get_pass("causal-block-skip")().sites(kir.parse(out, "triton"))
              if s.detail.get("form") == "bound"]
    assert len(bounds) == 1
    # a test on a name the call does not bind to a literal stays a branch
    kept = inline_helpers(kir.parse(text.replace("if STAGE == 2:", "if STAGE == n:"), "triton"))
    assert "== n" in kept.unparse()[kept.unparse().index("def attn("):]


ACCUMULATING_HELPERS = '''import torch
import triton
import triton.language as tl


@triton.jit
def _tile_product(a_ptr, b_ptr, rm, rn, k0, K, BK: tl.constexpr):
    rk = k0 + tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * K + rn[None, :])
    return tl.dot(a, b)


@triton.jit
def _write_tile(c_ptr, rm, rn, N, acc):
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty))


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, K, N, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        acc += _tile_product(a_ptr, b_ptr, rm, rn, k0, K, BK)
    _write_tile(c_ptr, rm, rn, N, acc)


def run(a, b):
    c = torch.empty_like(a)
    n = a.shape[0]
    mm[(n // 64, n // 64)](a, b, c, n, n, BM=64, BN=64, BK=32)
    return c
'''


def test_an_accumulating_call_and_an_epilogue_that_returns_nothing_are_inlined() -> None:
    """`acc += helper(...)` takes the helper's value first, then updates; a helper that only
    stores is written in place of its call statement: the kernel's K loop holds its loads and
    dot, and its store is the kernel's own."""
    out = inline_helpers(kir.parse(ACCUMULATING_HELPERS, "triton"))
    assert out is not None
    text = out.unparse()
    kernel = text[text.index("def mm("):text.index("def run")]
    assert "_tile_product(" not in kernel and "_write_tile(" not in kernel
    assert "value_tile_product = tl.dot(a, b)" in kernel and "acc += value_tile_product" in kernel
    assert "tl.store(c_ptr + rm[:, None] * N + rn[None, :]" in kernel
    compile(text, "inlined.py", "exec")
    assert inline_helpers(out) is None
    # what the helpers hid is the kernel's now: a K loop of loads to pipeline
    ir = kir.parse(ACCUMULATING_HELPERS, "triton")
    assert _open_sites("software-pipelining", ir) == 0 < _open_sites("software-pipelining", out)


MASK = "        x = tl.where(rows[:, None] >= keys[None, :], x, -1.0e30)\n"
# the attention kernel with its causal mask switched by a flag and a branch picked by a mode
FLAGGED_KERNEL = "import torch\n" + CAUSAL.replace(
    "BKV: tl.constexpr):", "BKV: tl.constexpr,\n           IS_CAUSAL: tl.constexpr, MODE: tl.constexpr):"
).replace(MASK, "        keep = ((not IS_CAUSAL) or (rows[:, None] >= keys[None, :])) & (keys[None, :] < n)\n"
                "        x = tl.where(keep, x, -1.0e30)\n"
                "        if MODE == 1:\n            x = x * 1.0\n") + """

def run(q, k, v):
    o = torch.empty_like(q)
    n, d = q.shape
    attend[(triton.cdiv(n, 64),)](q, k, v, o, n, d ** -0.5, D=d, BQ=64, BKV=64, IS_CAUSAL=True,
                                  MODE=2)
    return o
"""


def test_a_kernel_flag_every_launch_sets_is_read_as_its_value() -> None:
    """`IS_CAUSAL=True` at the only launch: `(not IS_CAUSAL) or rows >= keys` is the comparison
    alone, the key loop becomes a bound site; `MODE == 1` (an integer read only in a branch
    test) folds its branch away; the tile constexprs passed as literals stay names."""
    from passes.triton.inline import specialize_flags

    ir = kir.parse(FLAGGED_KERNEL, "triton")
    skip = get_pass("causal-block-skip")()
    assert not [s for s in skip.sites(ir) if s.detail.get("form") == "bound"]
    out = specialize_flags(ir)
    assert out is not None
    kernel = out.unparse()[out.unparse().index("def attend("):out.unparse().index("def run")]
    assert "IS_CAUSAL" not in kernel.split("):", 1)[1] and "MODE" not in kernel.split("):", 1)[1]
    assert "keep = rows[:, None] >= keys[None, :] & (keys[None, :] < n)" not in kernel
    assert "keep = (rows[:, None] >= keys[None, :]) & (keys[None, :] < n)" in kernel
    assert "x * 1.0" not in kernel and "tl.arange(0, BQ)" in kernel
    compile(out.unparse(), "flagged.py", "exec")
    bounds = [s for s in skip.sites(out) if s.detail.get("form") == "bound"]
    assert len(bounds) == 1 and bounds[0].detail["limit"] == "qi * BQ + BQ"
    assert specialize_flags(out) is None  # nothing left to fold


@pytest.mark.parametrize("launch", [
    "IS_CAUSAL=causal, MODE=2",  # a runtime value: the flag may be off
    "IS_CAUSAL=True, MODE=2)\n    attend[(1,)](q, k, v, o, n, 1.0, D=d, BQ=64, BKV=64, IS_CAUSAL=False, MODE=2",
])
def test_a_flag_a_launch_does_not_set_to_the_same_literal_stays(launch: str) -> None:
    from passes.triton.inline import specialize_flags

    text = FLAGGED_KERNEL.replace("IS_CAUSAL=True,\n                                  MODE=2", launch)
    text = text.replace("def run(q, k, v):", "def run(q, k, v, causal=True):")
    assert launch in text
    out = specialize_flags(kir.parse(text, "triton"))
    # MODE still folds; the causal flag stays a name
    assert out is not None and "not IS_CAUSAL" in out.unparse()
    skip = get_pass("causal-block-skip")()
    assert not [s for s in skip.sites(out) if s.detail.get("form") == "bound"]


def test_a_flag_left_to_its_default_is_read_as_the_default() -> None:
    """`IS_CAUSAL: tl.constexpr = True` that no launch passes is the literal `True`; a launch
    that passes another value than the default leaves the flag a name."""
    from passes.triton.inline import specialize_flags

    text = FLAGGED_KERNEL.replace("IS_CAUSAL: tl.constexpr, MODE: tl.constexpr):",
                                  "MODE: tl.constexpr, IS_CAUSAL: tl.constexpr = True):")
    launch = "IS_CAUSAL=True,\n                                  MODE=2"
    assert launch in text and "IS_CAUSAL: tl.constexpr = True" in text
    out = specialize_flags(kir.parse(text.replace(launch, "MODE=2"), "triton"))
    assert out is not None and "not IS_CAUSAL" not in out.unparse()
    out = specialize_flags(kir.parse(text.replace(launch, "MODE=2, IS_CAUSAL=causal"), "triton"))
    assert out is not None and "not IS_CAUSAL" in out.unparse()


def test_a_card_without_a_site_acts_on_the_kernel_with_its_flags_specialized(tmp_path: Path) -> None:
    """The trmm lineage's causal card on a kernel whose mask is switched by a flag the launch
    sets: it acts on the kernel read with the flag's value, and the result matches the
    reference in the interpreter."""
    from lineage.optimize import materializations
    from lineage.skills import Library
    from passes.base import PassContext
    from passes.rewriter import DeterministicRewriter

    lib = Library.open(packed_library("heldout_all"))
    card = next(c for c in lib.cards()
                if c.pass_name == "causal-block-skip" and c.scope["cases"] == ["trmm"])
    made = next(iter(materializations(card, kir.parse(FLAGGED_KERNEL, "triton"),
                                      DeterministicRewriter(), PassContext())))
    assert made.ok and "flags specialized" in made.refusals
    text = made.ir.unparse()
    assert "tl.minimum(n, qi * BQ + BQ)" in text
    import gate

    host = text[:text.index("def run(")] + (
        "def run(q, k, v):\n    B, H, S, D = q.shape\n    o = torch.empty_like(q)\n"
        "    for bh in range(B * H):\n        b, h = divmod(bh, H)\n"
        "        attend[(triton.cdiv(S, 16),)](q[b, h], k[b, h], v[b, h], o[b, h], S, D ** -0.5,"
        " D=D, BQ=16, BKV=16, IS_CAUSAL=True, MODE=2)\n    return o\n")
    target = tmp_path / "specialized.py"
    target.write_text(host)
    case = gate.load_case(str(ROOT / "bench/heldout/attn_causal"))
    verdict = gate.check_file(target, case, tier="interpret", cache=False)
    assert verdict.ok, verdict.reason


def test_a_kernel_flag_case_is_split_once_its_flag_reads_true(tmp_path: Path) -> None:
    """The style case whose kernel takes the causal mask as a flag the launch sets, its
    bounds mask a name indexed by broadcast (`inside[:, None]`) and both masks additive
    (`scores += tl.where(..., 0.0, -inf)`): read with the flag's value the key loop is bounded
    and split, the first loop keeps no mask, no `tl.where` of a mask and no `+= 0.0`, and the
    kernel matches the reference in the interpreter."""
    import ast

    import gate
    from passes.triton.inline import specialize_flags

    folder = ROOT / "bench/styles/attn_kernel_flag"
    ir = kir.parse((folder / "flag_attn.py").read_text(), "triton")
    skip = get_pass("causal-block-skip")()
    assert not [s for s in skip.sites(ir) if s.detail.get("form") == "bound"]
    flagged = specialize_flags(ir)
    site = next(s for s in skip.sites(flagged) if s.detail.get("form") == "bound")
    text = skip.optimize(flagged, site).ir.unparse()
    first = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.For))
    body = ast.unparse(first)
    assert "mask" not in body and "inside" not in body and "+= 0" not in body
    assert body.count("tl.where") == 1  # the -inf guard of the running max
    target = tmp_path / "split.py"
    target.write_text(text)
    verdict = gate.check_file(target, gate.load_case(str(folder)), tier="interpret", cache=False)
    assert verdict.ok, verdict.reason


def test_a_flag_anded_with_integers_is_not_dropped() -> None:
    """`x & True` is `x` for a condition, `x & 1` for integers: a flag read in integer
    arithmetic keeps its literal there, while the same flag and a comparison folds."""
    from passes.triton.inline import specialize_flags

    text = FLAGGED_KERNEL.replace(
        "        keys = j + tl.arange(0, BKV)\n",
        "        keys = j + tl.arange(0, BKV)\n        odd = keys & IS_CAUSAL\n"
        "        live = (keys < n) & IS_CAUSAL\n")
    assert "odd = keys & IS_CAUSAL" in text
    out = specialize_flags(kir.parse(text, "triton")).unparse()
    assert "odd = keys & True" in out and "live = keys < n\n" in out
