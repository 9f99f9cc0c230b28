"""The selection-kernel passes (histogram-primitive, scan-fusion, early-exit, radix-width): their
sites in the topk expert, de-optimizations the gate accepts at the interpret tier, round trips,
defaults without recorded options, kernels without the constructs, and precondition refusals."""
from __future__ import annotations

from pathlib import Path

import pytest

import kir
from passes import Applied, PassContext, Skipped, get_pass
from passes.roundtrip import deoptimize_all, forward_site, normalized, roundtrip

ROOT = Path(__file__).resolve().parents[1]
TOPK = ROOT / "experts" / "topk" / "topk_triton.py"
SELECTION = ("histogram-primitive", "scan-fusion", "early-exit", "radix-width")
CTX = PassContext(facts={"arch": "sm_90", "dtype": "fp32"})


def _present(ir: kir.KernelIR, name: str) -> list:
    return [s for s in get_pass(name)().sites(ir) if s.present]


@pytest.fixture(scope="module")
def pinned() -> kir.KernelIR:
    """The topk expert with its autotune config list pinned to the first config (the state the
    lineage reaches after its first step): the flag and the width become launch arguments."""
    ir = kir.parse_file(TOPK)
    tune = get_pass("autotune")()
    site = next(s for s in tune.sites(ir) if s.present)
    result = tune.deoptimize(ir, site, CTX)
    assert isinstance(result, Applied), result
    return result.ir


def test_sites_in_the_topk_expert(pinned: kir.KernelIR) -> None:
    expert = kir.parse_file(TOPK)
    assert [s.anchor for s in _present(expert, "histogram-primitive")] == \
        ["triton:_radix_pass/call:tl.histogram[0]"]
    assert [s.detail["packed"] for s in _present(expert, "scan-fusion")] == ["counts"]
    # the autotuner searches EARLY_EXIT and RADIX_BITS: it pins them before these passes act
    assert not _present(expert, "early-exit") and not _present(expert, "radix-width")
    assert [s.detail["flag"] for s in _present(pinned, "early-exit")] == ["EARLY_EXIT"]
    width = _present(pinned, "radix-width")
    assert [(s.detail["constexpr"], s.detail["bits"]) for s in width] == [("RADIX_BITS", 4)]


@pytest.mark.parametrize("name", SELECTION)
def test_round_trip_on_the_pinned_expert_gives_the_same_text(pinned: kir.KernelIR, name: str) -> None:
    p = get_pass(name)()
    site = _present(pinned, name)[0]
    trip = roundtrip(p, pinned, site, CTX)
    assert isinstance(trip.backward, Applied), trip.backward
    assert trip.backward.ir.text != pinned.text
    assert isinstance(trip.forward, Applied), trip.forward
    assert trip.forward.ir.text == pinned.text  # byte for byte, comments included


@pytest.mark.slow  # one interpret-tier gate of the 31-pass (1-bit) radix select: ~20 s
def test_deoptimized_chain_passes_the_gate_and_reoptimizes(pinned: kir.KernelIR) -> None:
    """Every selection de-optimization in sequence (early exit, packed scan, histogram, the
    width 4 -> 2 -> 1): the result still computes top-k at the interpret tier (both small
    shapes, ties included), and re-applying each step with its recorded options climbs back to
    the pinned expert."""
    gate = pytest.importorskip("gate")
    naive, steps = deoptimize_all(pinned, CTX, passes=list(SELECTION))
    assert [n for n, _ in steps] == ["early-exit", "scan-fusion", "histogram-primitive",
                                     "radix-width", "radix-width"]
    assert "tl.histogram(" not in naive.text and "while (" not in naive.text
    assert "RADIX_BITS=1," in naive.text and "EARLY_EXIT: tl.constexpr" not in naive.text
    assert "EARLY_EXIT=" not in naive.text
    verdict = gate.check(naive.text, "triton", "topk", tier="interpret", path=str(TOPK), cache=False)
    assert verdict.ok, (verdict.stage, verdict.reason)

    # climb back: each de-optimization from the pinned expert, then its forward re-derivation
    ir, chain = pinned, []
    for name, _ in steps:
        p = get_pass(name)()
        site = _present(ir, name)[0]
        back = p.deoptimize(ir, site, CTX)
        assert isinstance(back, Applied), back
        chain.append((p.with_options(back.options), site, ir))
        ir = back.ir
    assert normalized(ir.text, "triton") == normalized(naive.text, "triton")
    for forward, removed, before in reversed(chain):
        fsite = forward_site(forward, ir, removed)
        result = forward.optimize(ir, fsite, CTX)
        assert isinstance(result, Applied), result
        assert result.ir.text == before.text
        ir = result.ir


# -- small kernels of our own: forms, defaults without recorded options, refusals -------------
HEADER = "import triton\nimport triton.language as tl\n\n\n"

HIST = HEADER + '''@triton.jit
def hist_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, BINS: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    h = tl.histogram(x % BINS, BINS)
    tl.store(out_ptr + tl.arange(0, BINS), h)
'''

SCANS = HEADER + '''@triton.jit
def compact_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    pos = tl.cumsum((x > 0).to(tl.int32), 0)
    neg = tl.cumsum((x < 0).to(tl.int32), 0)
    tl.store(out_ptr + offs, pos - neg)
'''

ELEMENTWISE = HEADER + '''@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in tl.static_range(2):
        acc += tl.load(x_ptr + offs, mask=mask) * i
    tl.store(out_ptr + offs, acc + tl.load(y_ptr + offs, mask=mask), mask=mask)


def run(x, y):
    out = x.new_empty(x.shape)
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
'''

RADIX6 = HEADER + '''@triton.jit
def radix_kernel(k_ptr, out_ptr, DIGIT_BITS: tl.constexpr = 6):
    keys = tl.load(k_ptr + tl.arange(0, 64))
    for i in tl.static_range(32 // DIGIT_BITS):
        keys = keys >> DIGIT_BITS
    tl.store(out_ptr + tl.arange(0, 64), keys & ((1 << DIGIT_BITS) - 1))
'''


def _ir(text: str) -> kir.KernelIR:
    return kir.parse(text, language="triton")


def test_histogram_without_mask_and_its_default_forward() -> None:
    ir = _ir(HIST)
    p = get_pass("histogram-primitive")()
    site = _present(ir, "histogram-primitive")[0]
    back = p.deoptimize(ir, site, CTX)
    assert isinstance(back, Applied)
    assert "h = tl.sum(((x % BINS)[:, None] == tl.arange(0, BINS)[None, :]).to(tl.int32), 0)" in back.ir.text
    fsite = forward_site(p, back.ir, site)
    result = p.optimize(back.ir, fsite, CTX)  # no recorded call: built from the compare form
    assert isinstance(result, Applied) and result.ir.text == ir.text


def test_histogram_with_non_power_of_two_bins_is_refused() -> None:
    ir = _ir(HIST.replace("tl.histogram(x % BINS, BINS)", "tl.histogram(x % 12, 12)"))
    p = get_pass("histogram-primitive")()
    result = p.deoptimize(ir, _present(ir, "histogram-primitive")[0], CTX)
    assert isinstance(result, Skipped) and "pow2(num_bins)" in result.reason
    assert result.facts == {"num_bins": 12}


def test_two_scans_are_packed_without_recorded_options() -> None:
    ir = _ir(SCANS)
    p = get_pass("scan-fusion")()
    assert not _present(ir, "scan-fusion")
    site = next(s for s in p.sites(ir) if not s.present)
    result = p.optimize(ir, site, CTX)
    assert isinstance(result, Applied), result
    assert ("    packed = tl.cumsum((x > 0).to(tl.int32) + ((x < 0).to(tl.int32) << 16), 0)\n"
            "    pos = packed & 0xffff\n    neg = packed >> 16\n") in result.ir.text
    # the packed form is a present site whose de-optimization gives the two scans back
    again = _present(result.ir, "scan-fusion")[0]
    back = p.deoptimize(result.ir, again, CTX)
    assert isinstance(back, Applied) and back.ir.text == ir.text


def test_packing_refuses_a_scan_longer_than_the_low_field() -> None:
    ir = _ir(SCANS)
    p = get_pass("scan-fusion")()
    site = next(s for s in p.sites(ir) if not s.present)
    result = p.optimize(ir, site, CTX.with_facts({"scan_len": 1 << 16}))
    assert isinstance(result, Skipped) and "scan_len" in result.reason
    floats = _ir(SCANS.replace("(x > 0).to(tl.int32)", "x"))  # not an integer cast: no bound
    site = next(s for s in p.sites(floats) if not s.present)
    assert isinstance(p.optimize(floats, site, CTX), Skipped)


def test_a_kernel_without_the_constructs_has_no_site() -> None:
    ir = _ir(ELEMENTWISE)
    for name in SELECTION:
        assert not _present(ir, name), name
    for name in ("histogram-primitive", "scan-fusion", "radix-width"):
        assert not get_pass(name)().sites(ir), name
    # a fixed-trip loop is where an exit could go, but only a recorded exit test restores one
    ee = get_pass("early-exit")()
    site = next(s for s in ee.sites(ir) if not s.present)
    assert isinstance(ee.optimize(ir, site, CTX), Skipped)


def test_gemm_expert_has_no_selection_construct() -> None:
    ir = kir.parse_file(ROOT / "experts" / "gemm" / "gemm_triton.py")
    for name in SELECTION:
        assert not _present(ir, name), name


def test_radix_width_refuses_a_width_that_does_not_divide_the_key() -> None:
    ir = _ir(RADIX6)
    p = get_pass("radix-width")()
    site = _present(ir, "radix-width")[0]
    assert site.detail["bits"] == 6
    result = p.deoptimize(ir, site, CTX)  # 6 -> 3: 32 is not a multiple of 3
    assert isinstance(result, Skipped) and "key_bits % bits == 0" in result.reason
    assert result.facts == {"key_bits": 32, "bits": 3}
    fsite = next(s for s in p.sites(ir) if not s.present)
    grown = p.with_options({"value": 8}).optimize(ir, fsite, CTX)  # forward to 8 divides 32
    assert isinstance(grown, Applied) and "DIGIT_BITS: tl.constexpr = 8" in grown.ir.text


def test_early_exit_keeps_a_flag_used_elsewhere(pinned: kir.KernelIR) -> None:
    text = pinned.text.replace("    row = tl.program_id(0)\n",
                               "    row = tl.program_id(0) + EARLY_EXIT * 0\n")
    ir = _ir(text)
    p = get_pass("early-exit")()
    result = p.deoptimize(ir, _present(ir, "early-exit")[0], CTX)
    assert isinstance(result, Skipped) and "used outside" in result.reason


def test_histogram_forward_records_whether_the_values_fit_the_bins(pinned: kir.KernelIR) -> None:
    p = get_pass("histogram-primitive")()
    site = _present(pinned, "histogram-primitive")[0]
    back = p.deoptimize(pinned, site, CTX)
    fwd = p.optimize(back.ir, forward_site(p, back.ir, site), CTX)
    assert isinstance(fwd, Applied)
    # the topk digit is `(high & (NUM_BINS - 1))`: provably a bin index
    assert {r.expr: r.value for r in fwd.preconditions}["values_in_range == true"] is True
