"""Which kernel of a several-kernel module a move acts on first (`lineage.moves.kernel_room`):
the one whose timed variants trail the reference most, by its share of each variant's time,
not the one that takes the most time. The start is the style tier's dispatching GEMM (a
skinny kernel for a few rows, a tiled one otherwise); the verdict is made by hand with the
figures of an H200 run of it (24fe551): the big shape at the vendor's speed (0.1844 ms
against 0.1828, all in the tiled kernel), the skinny shape at 0.0454 against 0.027."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

import kir
from gate.verdict import Timing, VariantTiming
from lineage.moves import kernel_of, kernel_room, move_candidates, sweep_card
from skill_helpers import ROOT

START = ROOT / "bench/styles/nw_mm_dispatch/dispatch_mm.py"


def _verdict(skinny_ms: float) -> SimpleNamespace:
    variants = (VariantTiming("default", 0.1844, 0.1828, (("tiled_mm", 0.1797),)),
                VariantTiming("skinny", skinny_ms, 0.027, (("skinny_mm", skinny_ms - 0.0004),)))
    return SimpleNamespace(timing=Timing(sum(v.candidate_ms for v in variants),
                                         sum(v.reference_ms for v in variants), variants))


def test_room_is_each_variants_lag_split_over_its_kernels_by_time() -> None:
    room = kernel_room(_verdict(0.0454))
    assert room["skinny_mm"] == pytest.approx(0.0184)
    assert room["tiled_mm"] == pytest.approx(0.0016)
    assert kernel_room(_verdict(0.02)) == {"tiled_mm": pytest.approx(0.0016)}  # ahead: no room
    assert kernel_room(SimpleNamespace(timing=None)) == {}


@pytest.mark.parametrize(("skinny_ms", "first"), [(0.0454, "skinny_mm"), (0.02, "tiled_mm")])
def test_the_own_sweep_goes_first_to_the_kernel_with_the_most_room(skinny_ms: float, first: str) -> None:
    """The tiled kernel takes 80% of the profiled time; the skinny one trails its variant's
    reference by ten times more. Where the skinny shape is ahead of the vendor, the hotter
    kernel goes first again."""
    ir = kir.parse(START.read_text(), "triton", path=START)
    state = SimpleNamespace(ir=ir, verdict=_verdict(skinny_ms), path=(), used_up={})
    made = [m for m in move_candidates("own", sweep_card("own", "triton"), state, ctx=None,
                                       rewriter=None) if m.ok]
    assert [kernel_of(m.site.anchor) for m in made][:2] == [first, ({"skinny_mm", "tiled_mm"} - {first}).pop()]
