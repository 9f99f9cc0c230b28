"""loop-depth: a loop's literal `tl.range(..., num_stages=N)` is taken off, so that the depth
the launch and its autotune configurations set is the one the loop runs with.

Sites: a loading loop whose literal depth differs from a depth the kernel's configurations (or
its launch, or Triton's default) apply; none where they agree, on a loop that does not load, or
on an outer loop around the loading one. The rewrite removes only the keyword (other keywords
stay), the search offers it without a card, and at sm_90 the rewritten kernel compiled at
num_stages=4 holds more shared memory (more stages in flight) than the original, whose loop
kept its own two whatever the launch said.
"""
from __future__ import annotations

from pathlib import Path

import kir
from passes.base import PassContext, Skipped
from passes.registry import get_pass
from tests.module_helpers import applied_at_its_site, compiled_for_sm90

ROOT = Path(__file__).resolve().parent.parent
RANGED = (ROOT / "bench/styles/nw_mm_range_stages/ranged_mm.py").read_text()
PASS = get_pass("loop-depth")()

AUTOTUNED = '''
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BM": 64, "BN": 64}, num_warps=4, num_stages=3),
                          triton.Config({"BM": 128, "BN": 64}, num_warps=8, num_stages=4)],
                 key=["M", "N", "K"])
@triton.jit
def mm(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    i = tl.program_id(0)
    j = tl.program_id(1)
    rm = i * BM + tl.arange(0, BM)
    rn = j * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in tl.range(0, K, BK, loop_unroll_factor=2, num_stages=STAGES):
        x = tl.load(a + rm[:, None] * K + (k0 + rk)[None, :], mask=(k0 + rk)[None, :] < K, other=0.0)
        y = tl.load(b + (k0 + rk)[:, None] * N + rn[None, :], mask=(k0 + rk)[:, None] < K, other=0.0)
        acc = tl.dot(x, y, acc)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float16, device=a.device)
    mm[lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))](a, b, c, M, N, K, BK=32)
    return c
'''


def _ir(source: str) -> kir.KernelIR:
    return kir.parse(source, "triton")


def _lifted(source: str) -> str:
    result = applied_at_its_site(PASS, _ir(source))
    assert PASS.sites(result.ir) == []
    return result.ir.unparse()


def test_a_literal_depth_unlike_the_configurations_is_taken_off_and_other_keywords_stay() -> None:
    out = _lifted(AUTOTUNED.replace("STAGES", "2"))
    assert "for k0 in tl.range(0, K, BK, loop_unroll_factor=2):" in out
    assert out.count("num_stages=") == 2  # the configurations' depths, now the loop's


def test_a_literal_depth_among_several_configurations_is_a_site() -> None:
    # 3 is one configuration's depth, not the other's: the 4 only reaches the loop once lifted
    assert "num_stages=STAGES" not in _lifted(AUTOTUNED.replace("STAGES", "3"))


def test_no_site_where_the_loop_and_every_configuration_agree() -> None:
    source = AUTOTUNED.replace("num_stages=4", "num_stages=3").replace("STAGES", "3")
    assert PASS.sites(_ir(source)) == []


def test_a_plain_launch_applies_its_keyword_or_the_default() -> None:
    # the style kernel: launched without num_stages (Triton's default 3) over a loop of depth 2
    assert "tl.range(0, k_tiles):" in _lifted(RANGED)
    same = RANGED.replace("num_stages=2", "num_stages=3")
    assert PASS.sites(_ir(same)) == []
    keyword = same.replace("TILE_K=32)", "TILE_K=32, num_stages=4)")
    assert keyword != same
    assert "tl.range(0, k_tiles):" in _lifted(keyword)


def test_a_loop_that_loads_nothing_or_holds_the_loading_loop_is_no_site() -> None:
    outer = AUTOTUNED.replace("STAGES", "3").replace(
        "    for k0 in tl.range(0, K, BK, loop_unroll_factor=2, num_stages=3):\n",
        "    for rep in tl.range(0, 2, num_stages=2):\n      for k0 in range(0, K, BK):\n")
    outer = outer.replace("\n        x = ", "\n          x = ").replace("\n        y = ", "\n          y = ") \
        .replace("\n        acc = tl.dot", "\n          acc = tl.dot")
    ir = _ir(outer)
    assert "for rep in tl.range(0, 2, num_stages=2)" in ir.unparse()
    assert PASS.sites(ir) == []


def test_it_writes_no_de_optimization() -> None:
    ir = _ir(AUTOTUNED.replace("STAGES", "2"))
    site = PASS.sites(ir)[0]
    assert isinstance(PASS.deoptimize(ir, site), Skipped)


def test_the_search_offers_the_rule_without_a_card() -> None:
    from lineage.moves import rule_offers

    ctx = PassContext.for_case(None, extra={"dtype": "fp16"})
    offered = {card.pass_name for card, _ in rule_offers(_ir(RANGED), ctx)}
    assert "loop-depth" in offered
    same = RANGED.replace("num_stages=2", "num_stages=3")
    assert "loop-depth" not in {card.pass_name for card, _ in rule_offers(_ir(same), ctx)}


_TILES = {"TILE_M": 128, "TILE_N": 128, "TILE_K": 64, "stride_ak": 1, "stride_bn": 1, "stride_cn": 1}


def test_at_sm90_the_launch_depth_reaches_the_loop_only_once_lifted(tmp_path) -> None:
    kept, lifted = (compiled_for_sm90(text, tmp_path, name, "ranged_matmul", _TILES, num_warps=8,
                                      num_stages=4)["shared"]
                    for name, text in (("kept", RANGED), ("lifted", _lifted(RANGED))))
    # a stage of 128x64 + 64x128 fp16 tiles is 32 KiB: two stages in flight against four
    assert lifted >= kept + 32768, (kept, lifted)
