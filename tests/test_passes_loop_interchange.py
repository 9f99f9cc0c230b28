"""loop-interchange: a runtime `tl.dot` loop under `tl.static_range` loops is moved outside them,
the static loops and their assignments inside its body, so that one pipelined loop holds every
unrolled trip's loads.

Sites: such a nest in two implicit-GEMM convolutions written differently (NCHW with two static
loops over the taps and `acc += tl.dot(...)`; NHWC with one static loop over the flattened taps,
a `tl.range` header over two lines, a comment and `acc = tl.dot(a, b, acc)`); none without
static loops. The rewrite keeps each line's indentation right (the runtime loop's body stays
where it was), and the rewritten kernels match the reference under Triton's interpreter. It
refuses, with the reason, a pointer carried across trips, a store or a carried value among the
static loops' assignments, bounds that read a tap variable or a name the nest assigns,
statements after the runtime loop, and a nest's name read after it. The search offers the rule
without a card.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kir
from passes.base import PassContext, Skipped
from passes.registry import get_pass
from tests.module_helpers import applied_at_its_site

ROOT = Path(__file__).resolve().parent.parent
NCHW_CASE = ROOT / "bench/heldout/conv2d_nchw"
NCHW = (NCHW_CASE / "conv_direct.py").read_text()
NHWC_CASE = ROOT / "bench/styles/conv3x3_nhwc"
NHWC = (ROOT / "tests/data/passes/conv_nhwc_static_taps.py").read_text()
PASS = get_pass("loop-interchange")()

NCHW_NEST = """\
    for r in tl.static_range(R):
        for s in tl.static_range(S):
            hi = p * stride - pad + r
            wi = q * stride - pad + s
            in_img = pix_ok & (hi >= 0) & (hi < H) & (wi >= 0) & (wi < W)
            for c0 in range(0, C, BLOCK_C):
                cc = c0 + tl.arange(0, BLOCK_C)
"""
NCHW_INTERCHANGED = """\
    for c0 in range(0, C, BLOCK_C):
        for r in tl.static_range(R):
            for s in tl.static_range(S):
                hi = p * stride - pad + r
                wi = q * stride - pad + s
                in_img = pix_ok & (hi >= 0) & (hi < H) & (wi >= 0) & (wi < W)
                cc = c0 + tl.arange(0, BLOCK_C)
"""


def _ir(source: str) -> kir.KernelIR:
    return kir.parse(source, "triton")


def _interchanged(source: str) -> str:
    result = applied_at_its_site(PASS, _ir(source))
    assert PASS.sites(result.ir) == []
    return result.ir.unparse()


def _refusal(source: str) -> str:
    ir = _ir(source)
    sites = PASS.sites(ir)
    assert len(sites) == 1, sites
    result = PASS.optimize(ir, sites[0])
    assert isinstance(result, Skipped), result
    return result.reason


def _edited(source: str, old: str, new: str) -> str:
    assert source.count(old) == 1, old
    return source.replace(old, new)


def _loops(text: str) -> list[str]:
    """The loop headers of the jit kernel of `text`, outermost first along its first nest."""
    kernel = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef))
    out, node = [], next(s for s in kernel.body if isinstance(s, ast.For))
    while isinstance(node, ast.For):
        out.append(f"{node.target.id} in {ast.unparse(node.iter)}")
        node = next((s for s in node.body if isinstance(s, ast.For)), None)
    return out


def test_the_conv_start_s_channel_loop_goes_outside_its_taps() -> None:
    assert NCHW_NEST in NCHW
    out = _interchanged(NCHW)
    assert out == NCHW.replace(NCHW_NEST, NCHW_INTERCHANGED)  # the body's lines stay
    assert _loops(out) == ["c0 in range(0, C, BLOCK_C)", "r in tl.static_range(R)",
                           "s in tl.static_range(S)"]


def test_a_flattened_tap_loop_over_nhwc_is_interchanged_too() -> None:
    out = _interchanged(NHWC)
    assert _loops(out) == ["k in tl.range(0, cin, TILE_K)", "t in tl.static_range(TAPS)"]
    assert "    for k in tl.range(0, cin,\n                      TILE_K):\n" \
           "        for t in tl.static_range(TAPS):\n" \
           "            # the tap's input pixel and the filter slab it multiplies\n" in out
    assert "            b_slab = filt + t * cin * cout\n            kk = k + chans\n" in out


@pytest.mark.parametrize("source, case", [(NCHW, NCHW_CASE), (NHWC, NHWC_CASE)],
                         ids=["nchw", "nhwc"])
def test_the_interchanged_kernel_matches_the_reference_interpreted(source, case, tmp_path) -> None:
    import gate

    target = tmp_path / "interchanged.py"
    target.write_text(_interchanged(source))
    verdict = gate.check_file(target, gate.load_case(str(case)), tier="interpret", cache=False)
    assert verdict.ok, verdict.reason


def test_only_the_inner_static_loop_moves_when_the_outer_does_more() -> None:
    source = _edited(NCHW, "                acc += tl.dot(xt, wt)\n",
                     "                acc += tl.dot(xt, wt)\n        row_tap = r * S\n")
    out = applied_at_its_site(PASS, _ir(source)).ir.unparse()
    assert _loops(out) == ["r in tl.static_range(R)", "c0 in range(0, C, BLOCK_C)",
                           "s in tl.static_range(S)"]
    # the loop over taps r keeps its statement after the channel loop: no further step
    assert "statements follow the loop over `c0`" in _refusal(out)


def test_a_pointer_carried_across_trips_is_refused() -> None:
    source = _edited(NHWC, "    chans = tl.arange(0, TILE_K)\n",
                     "    chans = tl.arange(0, TILE_K)\n"
                     "    b_ptrs = filt + chans[:, None] * cout + cols[None, :]\n")
    source = _edited(source, "b = tl.load(b_slab + kk[:, None] * cout + cols[None, :],",
                     "b = tl.load(b_ptrs,")
    source = _edited(source, "            total = tl.dot(a, b, total)\n",
                     "            total = tl.dot(a, b, total)\n"
                     "            b_ptrs += TILE_K * cout\n")
    assert "carries `b_ptrs` from trip to trip" in _refusal(source)


def test_a_store_among_the_tap_assignments_is_refused() -> None:
    source = _edited(NCHW, "            wi = q * stride - pad + s\n",
                     "            wi = q * stride - pad + s\n"
                     "            tl.store(y + pix, hi, mask=pix_ok)\n")
    assert "tl.store" in _refusal(source)
    # a store written as an assignment's value is refused as well
    helper = _edited(NCHW, "            wi = q * stride - pad + s\n",
                     "            wi = q * stride - pad + s\n"
                     "            done = tl.atomic_add(y + pix, hi, mask=pix_ok)\n")
    assert "tl.atomic_add" in _refusal(helper)


@pytest.mark.parametrize("header, names", [
    ("for c0 in range(r * BLOCK_C, C, BLOCK_C):", "`r`"),
    ("for c0 in range(0, C, BLOCK_C * (s + 1)):", "`s`"),
    ("for c0 in range(0, hi.shape[0] * C, BLOCK_C):", "`hi`"),
])
def test_bounds_that_read_the_nest_s_names_are_refused(header: str, names: str) -> None:
    reason = _refusal(_edited(NCHW, "for c0 in range(0, C, BLOCK_C):", header))
    assert f"the bounds of the loop over `c0` read {names}" in reason


@pytest.mark.parametrize("old, new, why", [
    ("                acc += tl.dot(xt, wt)\n",
     "                acc += tl.dot(xt, wt)\n            tap_hi = hi\n", "statements follow"),
    ("    y_off = ", "    last_row = hi\n    y_off = ",
     "`hi`, which the loop nest assigns, is read after"),
    ("            hi = p * stride - pad + r\n", "            hi = p * stride - pad + r + wi\n",
     "reads `wi` before its trip assigns it"),
    ("                acc += tl.dot(xt, wt)\n", "                acc += tl.dot(xt, wt)\n"
     "                acc = acc * 0.5\n", "does more with `acc` than add products"),
])
def test_other_changes_of_meaning_are_refused(old: str, new: str, why: str) -> None:
    assert why in _refusal(_edited(NCHW, old, new))


def test_no_site_without_static_loops_above_a_dot_loop() -> None:
    plain = (ROOT / "tests/data/passes/mm_autotuned.py").read_text()
    assert "tl.dot" in plain and PASS.sites(_ir(plain)) == []
    # the taps as a runtime loop: both loops are pipelined, nothing is unrolled
    runtime = _edited(NCHW, "for s in tl.static_range(S):", "for s in range(S):")
    assert PASS.sites(_ir(runtime)) == []


def test_it_writes_no_de_optimization() -> None:
    ir = _ir(NCHW)
    assert isinstance(PASS.deoptimize(ir, PASS.sites(ir)[0]), Skipped)


def test_the_search_offers_the_rule_without_a_card() -> None:
    from lineage.moves import rule_offers

    ctx = PassContext.for_case(None, extra={"dtype": "fp16"})
    assert "loop-interchange" in {card.pass_name for card, _ in rule_offers(_ir(NCHW), ctx)}
    done = _ir(_interchanged(NCHW))
    assert "loop-interchange" not in {card.pass_name for card, _ in rule_offers(done, ctx)}


def test_the_generic_list_tunes_the_channel_block_of_the_interchanged_kernel() -> None:
    """The channel block steps the runtime loop either way: the generic list the search writes
    for the rule's output tunes it as it does the start's (unrolled loops inside the runtime
    loop do not make another loop the one that walks the reduction)."""
    from lineage.control import autotune_control

    start = autotune_control(NCHW)
    out = autotune_control(_interchanged(NCHW))
    assert '"BLOCK_C": 64' in start
    assert out == _interchanged(start)
