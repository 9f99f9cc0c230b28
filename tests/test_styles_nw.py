"""Start kernels written in styles the shipped cards first missed (`bench/styles/nw_*`): the
card finds its site by the role a construct plays, and the kernel it writes passes the
interpret gate on the case's small shapes. Each test names the form that was missed."""
from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

import gate
import kir
from lineage.moves import materializations
from passes import Applied, get_pass
from passes.rewriter import DeterministicRewriter

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
STYLES = ROOT / "bench" / "styles"


@cache
def _cards() -> tuple:
    from lineage.shipped import open_library

    return tuple(c for c in open_library(None)[0].cards() if ".triton." in c.id)


def _start(folder: str) -> tuple[gate.Case, str]:
    case = gate.load_case(STYLES / folder)
    return case, case.start_path().read_text()


def _made(folder: str, pass_name: str, text: str | None = None) -> tuple[str, str]:
    """(site anchor, rewritten text) of the first shipped card of `pass_name` that acts on the
    folder's start kernel (or on `text`) with its rule alone (no sweep, no transplant)."""
    text = _start(folder)[1] if text is None else text
    ir = kir.parse(text, "triton")
    refusals = []
    for card in _cards():
        if card.pass_name != pass_name:
            continue
        made = list(materializations(card, ir, DeterministicRewriter(), None, sweeps=False,
                                     transplants=False))
        ok = next((m for m in made if m.ok), None)
        if ok is not None:
            return str(ok.site.anchor), ok.ir.unparse()
        refusals += made[-1].refusals
    raise AssertionError(f"no {pass_name} card acts on {folder}: {refusals}")


def _gated(text: str, folder: str) -> None:
    case, _ = _start(folder)
    verdict = gate.check(text, "triton", case, "interpret", path=case.start_path(), cache=False)
    assert verdict.ok, verdict.reason


def test_a_block_index_split_from_a_1d_program_id_owns_the_grids_literal() -> None:
    """`qb = pid % q_blocks` with `pid = tl.program_id(0)`: qb scales BQ, so the grid's
    `cdiv(S, 32)` is BQ's copy though the key tile BKV is 32 too and tiles the same sequence;
    the autotune card tunes both (before: "which tile's block count that is cannot be told")."""
    site, out = _made("nw_attn_flat_ptrs", "autotune")
    assert site == "triton:flat_causal_attn"
    assert 'grid = lambda meta: (triton.cdiv(S, meta["BQ"]) * B * H,)' in out
    assert "BQ=32" not in out
    _gated(out, "nw_attn_flat_ptrs")


def test_key_pointers_walked_by_a_causal_split_still_read_through_descriptors() -> None:
    """The causal card splits the key loop at the diagonal, both halves advancing the same
    key / value pointers: the second half's counter starts where the first one's walk stopped
    (`below // BKV * BKV`), so both halves' loads are boxes at their counter and one descriptor
    per tensor serves both (before: "the pointer is built from a name assigned more than
    once", no site); the kernel passes the interpret gate on the case's small shapes."""
    _, split = _made("nw_attn_flat_ptrs", "causal-block-skip")
    assert split.count("k_ptrs += BKV * s_s") == 2
    site, out = _made("nw_attn_flat_ptrs", "tma-descriptors", split)
    assert site == "triton:flat_causal_attn/for[0]/call:tl.load[0]"
    assert out.count("tl.make_tensor_descriptor(k_ptr + base") == 1
    assert out.count("(tl.trans(k_desc.load([kv0, 0])) if TMA_OK else tl.load(k_ptrs") == 2
    assert out.count("(v_desc.load([kv0, 0]) if TMA_OK else tl.load(v_ptrs") == 2
    _gated(out, "nw_attn_flat_ptrs")


def test_a_walked_row_id_whose_methods_the_body_calls_stays_a_tensor() -> None:
    """`row = tl.program_id(0)` then `row.to(tl.int64)`: made persistent, the row is bound from
    the walk's variable through `tl.cast` (the interpreter hands loop variables out as Python
    ints, which have no `.to`)."""
    site, out = _made("nw_layernorm_3pass", "persistent-grid")
    assert site == "triton:ln_three_pass/assign:row[0]"
    assert "        row = tl.cast(tile, tl.int32)\n" in out
    _gated(out, "nw_layernorm_3pass")


def test_a_grid_of_literal_tiles_is_walked_in_the_tiles_it_copies() -> None:
    """A 2-D grid `(cdiv(M, 32), cdiv(N, 32))` launched with TILE_M=32, TILE_N=32: each literal
    is told by data flow to be a tile's copy, so the persistent walk counts `tl.cdiv(M, TILE_M)`
    (it refused before: "counts tiles of a literal size")."""
    _, out = _made("nw_mm_range_stages", "persistent-grid")
    assert ("range(tl.program_id(0), (tl.cdiv(M, TILE_M)) * (tl.cdiv(N, TILE_N)), "
            "tl.num_programs(0))") in out
    _gated(out, "nw_mm_range_stages")


def test_an_inline_program_id_and_a_cast_one_are_both_walked() -> None:
    """`col0 = tl.program_id(0) * COLS` (no statement of its own) and `i =
    tl.program_id(0).to(tl.int64)` on a 2-D grid: each read of a program id becomes its axis
    decoded from the walk's index, cast where the body calls its methods. The host picks one of
    the two kernels by shape; both are walked and both shapes pass."""
    _, text = _start("nw_mm_dispatch")
    rule = get_pass("persistent-grid")()
    for kernel in ("skinny_mm", "tiled_mm"):
        ir = kir.parse(text, "triton")
        site = next(s for s in rule.sites(ir) if not s.present and s.detail["kernel"] == kernel)
        made = rule.optimize(ir, site)
        assert isinstance(made, Applied), made
        text = made.ir.unparse()
    assert "        pid_axis0 = tile\n        col0 = pid_axis0 * COLS\n" in text
    assert "        pid_axis0 = tl.cast(tile % (tl.cdiv(M, BM)), tl.int32)\n" in text
    assert "        i = pid_axis0.to(tl.int64)\n" in text
    _gated(text, "nw_mm_dispatch")


def test_a_cast_block_index_is_grouped_and_keeps_its_cast() -> None:
    """`i = tl.program_id(0).to(tl.int64)`: the cast block index walks the accumulator's rows,
    so the 2-D grid is merged into the grouped order, and i keeps its 64-bit width."""
    site, out = _made("nw_mm_dispatch", "grouped-ordering")
    assert site == "triton:tiled_mm"
    assert "    i = i.to(tl.int64)\n    j = j.to(tl.int64)\n" in out
    assert "tl.program_id(1)" not in out
    _gated(out, "nw_mm_dispatch")


def test_a_bound_written_on_a_broadcast_index_plus_an_offset_is_a_box() -> None:
    """`k0 + d[None, :] < K` bounds the same elements as `(k0 + d)[None, :] < K`: the loads
    are boxes, and the tensor-descriptor card rewrites them."""
    site, out = _made("nw_mm_dispatch", "tma-descriptors")
    assert site.startswith("triton:skinny_mm/")
    assert "tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[sam, sak]" in out
    _gated(out, "nw_mm_dispatch")


def test_a_triangle_zeroed_by_where_after_the_load_is_skipped_above_the_diagonal() -> None:
    """tril(A) @ B whose triangle is a `tl.where` on the loaded tile, grid axes swapped: the
    K loop stops at the row block's end, the blocks below the diagonal unmasked."""
    site, out = _made("nw_trmm_where", "causal-block-skip")
    assert site == "triton:tril_matmul/for[0]/call:range[0]"
    assert "for kb in range(0, below_diagonal):" in out
    _gated(out, "nw_trmm_where")


def test_a_k_axis_walked_in_whole_tiles_counted_into_a_name_is_bounded_by_k() -> None:
    """`whole = K // BLOCK_K; for kb in range(whole)` with the K axis of the loads unmasked: the
    loop never reads past K, so K bounds the boxes (before: "the mask does not bound both
    axes"); the peeled remainder after the loop keeps its pointer loads."""
    site, out = _made("nw_mm_peeled_tail", "tma-descriptors")
    assert site == "triton:peeled_matmul/for[0]/call:tl.load[0]"
    assert "tl.make_tensor_descriptor(A, shape=[M, K], strides=[lda, 1]" in out
    assert out.count("mask=row_ok & (k[None, :] < K)") == 1
    _gated(out, "nw_mm_peeled_tail")


def test_a_tile_order_grouped_by_hand_along_n_is_not_grouped_again() -> None:
    """Column groups written by hand (`pn = first_n + (pid % width) % gsize`): no block index is
    a row-major split of the program id, so the grouped order finds nothing to rewrite, while
    the launch cards still act (a heuristic sets BK, the grid reads the meta-parameters)."""
    _, text = _start("nw_mm_group_cols")
    ir = kir.parse(text, "triton")
    assert not [s for s in get_pass("grouped-ordering")().sites(ir) if not s.present]
    site, _ = _made("nw_mm_group_cols", "tile-sizes")
    assert site == "triton:run/launch:colgroup_matmul[0]"
