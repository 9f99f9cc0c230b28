"""loop-unroll: a pipelined loading loop's literal `tl.range(..., loop_unroll_factor=N)` is taken
off, so that its pipeline buffers are one copy's and larger tiles fit in shared memory.

Sites: a loading loop unrolled by a literal factor above 1 that Triton pipelines (its own depth,
else a depth the kernel's configurations, its launch or Triton's default apply, is above 1);
none without the keyword, at factor 1, on a loop that loads nothing or holds the loading loop,
or where every depth is 1. The rewrite removes only the keyword (other keywords stay), the
search offers it without a card, and at sm_90 a persistent descriptor GEMM compiled at a
128x256x64 tile and 3 stages fits a block's shared memory once rolled and not before (its
unrolled loads each had buffers of their own).
"""
from __future__ import annotations

from pathlib import Path

import kir
from passes.base import PassContext, Skipped
from passes.registry import get_pass
from tests.module_helpers import applied_at_its_site, compiled_for_sm90

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests/data/passes"
GROUPED = (ROOT / "bench/styles/nw_mm_group_cols/colgroup_mm.py").read_text()
PERSISTENT = (DATA / "mm_persistent_tma.py").read_text()
AUTOTUNED = (DATA / "mm_autotuned.py").read_text()
PASS = get_pass("loop-unroll")()
K_LOOP = "tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=3)"


def _autotuned(range_keywords: str, s1: int = 2, s2: int = 3) -> str:
    """mm_autotuned.py with its K loop's keywords and its two configurations' depths given."""
    out = AUTOTUNED.replace(K_LOOP, f"tl.range(0, tl.cdiv(K, BLOCK_K){range_keywords})") \
        .replace("num_warps=4, num_stages=2)", f"num_warps=4, num_stages={s1})") \
        .replace("num_warps=8, num_stages=3)", f"num_warps=8, num_stages={s2})")
    assert out.count("num_stages=") == 2 + range_keywords.count("num_stages="), out
    return out


def _ir(source: str) -> kir.KernelIR:
    return kir.parse(source, "triton")


def _rolled(source: str) -> str:
    result = applied_at_its_site(PASS, _ir(source))
    assert PASS.sites(result.ir) == []
    out = result.ir.unparse()
    kir.parse(out, "triton")
    return out


def test_the_factor_is_taken_off_and_only_it() -> None:
    out = _rolled(_autotuned(", loop_unroll_factor=2, num_stages=3, flatten=False"))
    assert out == _autotuned(", num_stages=3, flatten=False")
    last = _rolled(_autotuned(", num_stages=3, loop_unroll_factor=4"))
    assert last == AUTOTUNED


def test_a_plain_launch_pipelines_at_its_keyword_or_the_default() -> None:
    # the style kernel: launched without num_stages (Triton's default 3 pipelines the loop)
    assert "    for k in tl.range(0, K, BK):\n" in _rolled(GROUPED)
    flat = GROUPED.replace("GROUP_N=2)", "GROUP_N=2, num_stages=1)")
    assert flat != GROUPED
    assert PASS.sites(_ir(flat)) == []
    assert "tl.range(0, K, BK):" in _rolled(GROUPED.replace("GROUP_N=2)", "GROUP_N=2, num_stages=2)"))


def test_no_site_without_a_factor_above_one() -> None:
    assert PASS.sites(_ir(AUTOTUNED)) == []
    assert PASS.sites(_ir(_autotuned(", loop_unroll_factor=1"))) == []
    assert PASS.sites(_ir(GROUPED.replace("loop_unroll_factor=2", "loop_unroll_factor=1"))) == []


def test_no_site_where_no_depth_pipelines_the_loop() -> None:
    assert PASS.sites(_ir(_autotuned(", loop_unroll_factor=2", 1, 1))) == []
    # one configuration pipelines it
    assert len(PASS.sites(_ir(_autotuned(", loop_unroll_factor=2", 1, 2)))) == 1
    # the loop's own depth shadows the configurations': 1 keeps the unroll, 2 does not
    assert PASS.sites(_ir(_autotuned(", loop_unroll_factor=2, num_stages=1"))) == []
    assert len(PASS.sites(_ir(_autotuned(", loop_unroll_factor=2, num_stages=2", 1, 1)))) == 1


_TILE_LOOP = "for tile in tl.range(start, tiles, NUM_SMS):"
_K_LOOP = "for k in range(0, K, BLOCK_K):"


def _persistent(tile_loop: str = _TILE_LOOP, k_loop: str = _K_LOOP) -> str:
    out = PERSISTENT.replace(_TILE_LOOP, tile_loop).replace(_K_LOOP, k_loop)
    assert (out == PERSISTENT) == (tile_loop == _TILE_LOOP and k_loop == _K_LOOP)
    return out


def test_a_loop_that_holds_the_loading_loop_or_loads_nothing_is_no_site() -> None:
    unrolled_tiles = "for tile in tl.range(start, tiles, NUM_SMS, loop_unroll_factor=2):"
    assert PASS.sites(_ir(_persistent(unrolled_tiles))) == []
    # the loading loop inside it is the one whose buffers the unroll multiplies
    k_loop = _persistent(k_loop="for k in tl.range(0, K, BLOCK_K, loop_unroll_factor=2):")
    assert "for k in tl.range(0, K, BLOCK_K):" in _rolled(k_loop)
    scale = AUTOTUNED.replace(
        "    rm = pid_m", "    for r in tl.range(0, 4, loop_unroll_factor=2):\n        acc = acc * 0.5\n"
        "    rm = pid_m")
    assert "for r in tl.range(0, 4, loop_unroll_factor=2):" in _ir(scale).unparse()
    assert PASS.sites(_ir(scale)) == []


def test_it_writes_no_de_optimization() -> None:
    ir = _ir(GROUPED)
    site = PASS.sites(ir)[0]
    assert isinstance(PASS.deoptimize(ir, site), Skipped)


def test_the_search_offers_the_rule_without_a_card() -> None:
    from lineage.moves import rule_offers

    ctx = PassContext.for_case(None, extra={"dtype": "fp16"})
    offered = {card.pass_name for card, _ in rule_offers(_ir(GROUPED), ctx)}
    assert "loop-unroll" in offered
    rolled = GROUPED.replace(", loop_unroll_factor=2", "")
    assert "loop-unroll" not in {card.pass_name for card, _ in rule_offers(_ir(rolled), ctx)}


_TILES = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "NUM_SMS": 132}
SM90_BLOCK_SHARED = 232448  # the most shared memory an sm_90 block may opt in to (227 KiB)


def test_at_sm90_only_the_rolled_loop_fits_a_large_tile(tmp_path) -> None:
    unrolled = _persistent(k_loop="for k in tl.range(0, K, BLOCK_K, loop_unroll_factor=2):")
    kept, rolled = (compiled_for_sm90(text, tmp_path, name, "mm_kernel", _TILES, num_warps=8,
                                      num_stages=3)["shared"]
                    for name, text in (("unrolled", unrolled), ("rolled", _rolled(unrolled))))
    # each unrolled copy of the two loads keeps three stages of its own: the kernel an
    # autotuner would drop at this tile runs once rolled
    assert rolled <= SM90_BLOCK_SHARED < kept, (kept, rolled)
