"""Kernels written in styles the roles first missed (`bench/styles/`): what each construct is
found to be, the sweep and card rewrites that follow from it, their refusals where a rewrite
would be unsound, and the rewritten kernels passing the interpret gate on their cases."""
from __future__ import annotations

from pathlib import Path

import gate
import kir

from lineage.control import apply_byte_edits, autotune_control
from passes.triton._py import PyModule
from passes.triton.roles import joint_config, sweep_edit, unchecked_tiles

ROOT = Path(__file__).resolve().parent.parent
STYLES = ROOT / "bench" / "styles"


def _ir(text: str) -> kir.KernelIR:
    return kir.parse(text, "triton")


def _gated(text: str, folder: str) -> None:
    case = gate.load_case(STYLES / folder)
    verdict = gate.check(text, "triton", case, "interpret", path=case.start_path(), cache=False)
    assert verdict.ok, verdict.reason


# -- rows per program walked one by one -------------------------------------------------------
def test_rows_a_program_walks_one_by_one_are_its_block_and_a_sweep_tunes_them() -> None:
    """`first = tl.program_id(0) * R`, then `for r in tl.static_range(R)` with `first + r`
    checked against the row count: R is the program's block of rows (role grid), tunable like a
    block size; the grid the host divides by it follows the tuned value."""
    text = (STYLES / "softmax_rows_static/rows_softmax.py").read_text()
    config = joint_config(_ir(text))["softmax_rows"]
    assert config.by_role() == {"grid": 4}
    made = sweep_edit(_ir(text), "softmax_rows", [{"grid": 8, "num_warps": 8}, {"grid": 1}])
    assert not hasattr(made, "reason"), made
    assert [c["ROWS_PER_PROG"] for c in made[1]] == [8, 1]
    out = apply_byte_edits(text, made[0])
    assert 'triton.cdiv(n_rows, meta["ROWS_PER_PROG"])' in out
    _gated(out, "softmax_rows_static")
    assert '"ROWS_PER_PROG": 16' in autotune_control(text)


def test_a_loop_count_the_kernel_never_bounds_is_not_a_block() -> None:
    """A constexpr that is the trip count of a loop whose values are never compared with a
    bound (K rounds of a top-k, each writing `row * K + j`) is part of the problem: no role."""
    text = (STYLES / "softmax_rows_static/rows_softmax.py").read_text()
    unguarded = text.replace("        if row < n_rows:\n", "        if True:\n")
    assert unguarded != text
    assert joint_config(_ir(unguarded))["softmax_rows"].by_role() == {}
    topk = (ROOT / "bench/heldout/topk_k8/topk_select.py").read_text()
    assert "K" not in {p.name for p in joint_config(_ir(topk))["row_topk"].params}
    kernel = next(k for k in PyModule(_ir(text)).kernels() if k.name == "softmax_rows")
    assert unchecked_tiles(kernel) == set()


# -- a K loop that counts blocks and moves block pointers ------------------------------------
def test_a_block_pointer_advanced_by_a_tile_in_the_dot_loop_makes_it_the_k_tile() -> None:
    """`for _ in range(0, tl.cdiv(K, BK))` with `tl.advance(p, (0, BK))`: the loop steps its
    block by BK though it counts blocks, so BK is the dot's K tile and the sweep's K tiles
    reach it (before, BK kept the author's value in every configuration)."""
    text = (STYLES / "mm_blockptr_at/bp_at.py").read_text()
    assert joint_config(_ir(text))["bp_at_matmul"].by_role() == {"m": 64, "n": 64, "k": 32}
    out = autotune_control(text)
    assert '"BK": 64' in out
    compile(out, "bp_at.py", "exec")  # Triton 3.9 compiles no block pointer: device tier only
    # the tile a block pointer is advanced by outside any dot loop keeps no K role
    rows = text.replace("acc += tl.dot(x, y)", "acc += x[:, :1] * y[:1, :]")
    assert "k" not in joint_config(_ir(rows))["bp_at_matmul"].by_role()


# -- tiles a @triton.heuristics sets ---------------------------------------------------------
def test_a_tile_a_heuristic_sets_to_a_constant_is_tuned_and_the_heuristic_gives_way() -> None:
    """`"ROWS": lambda args: 2` pins ROWS as a launch keyword would, and Triton runs heuristics
    after the autotuner picks: the sweep tunes ROWS and takes its entry out of the heuristics
    (else every configuration would run with 2); a heuristic that computes its value
    (`next_power_of_2(N)`) stays, its tile untuned."""
    text = (STYLES / "rmsnorm_heur_keepdims/heur_rms.py").read_text()
    assert joint_config(_ir(text))["rms_tile"].by_role() == {"grid": 2}
    made = sweep_edit(_ir(text), "rms_tile", [{"grid": 4, "num_warps": 8}, {"grid": 1}])
    assert not hasattr(made, "reason"), made
    out = apply_byte_edits(text, made[0])
    assert '"ROWS": lambda' not in out and '"BLOCK_N": lambda args: triton.next_power_of_2' in out
    assert [c["ROWS"] for c in made[1]] == [4, 1]
    _gated(out, "rmsnorm_heur_keepdims")
    # a recorded tile step resizes the constant where the heuristic returns it
    from passes import Applied, get_pass

    step = get_pass("tile-sizes").from_options({"value": 32})
    site = next(s for s in step.sites(_ir(text)) if not s.present)
    resized = step.optimize(_ir(text), site)
    assert isinstance(resized, Applied) and '"ROWS": lambda args: 32,' in resized.ir.unparse()
    assert '"BLOCK_N": lambda args: triton.next_power_of_2(args["N"])' in resized.ir.unparse()
    # the autotune rule lists the constant as the launch's pinned values, the entry out
    rule = get_pass("autotune")()
    listed = rule.optimize(_ir(text), next(s for s in rule.sites(_ir(text)) if not s.present))
    assert isinstance(listed, Applied), listed
    assert 'triton.Config({"ROWS": 2}, num_warps=8' in listed.ir.unparse()
    assert '"ROWS": lambda' not in listed.ir.unparse()


def test_a_launch_value_a_heuristic_overrides_is_not_tunable() -> None:
    """A tile passed at the launch but computed by a heuristic runs with the heuristic's value:
    sweeping the launch's would change nothing, so it has none."""
    text = (STYLES / "mm_ieee_where/ieee_mm.py").read_text()
    passed = text.replace("c.stride(0), c.stride(1), BM=32, BN=32)",
                          "c.stride(0), c.stride(1), BM=32, BN=32, BK=32)")
    assert passed != text
    for source in (text, passed):
        params = {p.name: p.value for p in joint_config(_ir(source))["ieee_matmul"].params}
        assert params == {"BM": 32, "BN": 32, "BK": None}


# -- a program count the host computes into a variable ---------------------------------------
def test_the_autotune_rule_writes_a_host_program_count_into_the_grid_it_feeds() -> None:
    """`programs = min(sms, cdiv(M, bm) * cdiv(N, bn))` then `kernel[(programs,)]` (a persistent
    kernel's host): the autotune rule, like the sweep, writes the count into the grid, which
    then reads the tuned tiles; a count the host also reads elsewhere keeps the refusal."""
    from passes import Applied, Skipped, get_pass

    rule = get_pass("autotune")()
    text = (STYLES / "mm_persist_range/persist_mm.py").read_text()
    site = next(s for s in rule.sites(_ir(text)) if not s.present)
    made = rule.optimize(_ir(text), site)
    assert isinstance(made, Applied), made
    out = made.ir.unparse()
    assert 'min(sms, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]))' in out
    assert "programs = " not in out and "BLOCK_M=bm" not in out
    _gated(out, "mm_persist_range")
    kept = text.replace("    return c\n", "    assert programs > 0\n    return c\n")
    site = next(s for s in rule.sites(_ir(kept)) if not s.present)
    refused = rule.optimize(_ir(kept), site)
    assert isinstance(refused, Skipped) and "beyond the launch" in refused.reason


# -- a grid that repeats the launch's literal tile -------------------------------------------
def test_a_tile_step_resizes_the_grids_copy_of_its_literal() -> None:
    """`kernel[(cdiv(M, 32), cdiv(N, 32))](..., BM=32, BN=32)`: each 32 of the grid is the copy
    of the tile whose size it divides, told by data flow (`rm < M` where the launch passes M),
    so a tile step resizes it along and the programs still cover the output."""
    from passes import Applied, get_pass

    text = (STYLES / "mm_ieee_where/ieee_mm.py").read_text()
    step = get_pass("tile-sizes")()
    site = next(s for s in step.sites(_ir(text)) if not s.present and s.detail["tile"] == "BM")
    made = step.optimize(_ir(text), site)
    assert isinstance(made, Applied), made
    out = made.ir.unparse()
    assert "[(triton.cdiv(M, 64), triton.cdiv(N, 32))]" in out and "BM=64, BN=32" in out
    _gated(out, "mm_ieee_where")
