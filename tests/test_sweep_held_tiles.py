"""The plain sweep (`lineage.control.autotune_control`) tunes what it can where the launch grid
does not read every tile that shapes it: such a tile keeps its value in every configuration and
the other tiles, warps and stages are swept. Tile roles read through what a rewrite leaves: a
loop bound rounded to whole blocks of a loop's step (`stop // BC * BC`) does not make the step
a program's block, and plain copies of a dot's accumulator (an inlined helper's `acc_in = acc`)
keep its shape, so the key tile of an attention kernel stays the dot's `k`. Each swept kernel is
gated under the interpreter (every configuration of its list is run)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import gate
import kir
from lineage.control import autotune_control
from passes.triton.roles import SweepRefusal, joint_config, sweep_edit

DATA = Path(__file__).parent / "data" / "held_tiles"
ROWS = (DATA / "lower_row_sums_kernel.py").read_text()
COPIES = (DATA / "attention_copies.py").read_text()
# the grid reading the row tile itself, not through the host helper
ROWS_READ = ROWS.replace("lambda meta: _programs(n_rows, meta)",
                         'lambda meta: (triton.cdiv(n_rows, meta["BR"]),)')


def _values(source: str, tile: str) -> set[int]:
    return {int(v) for v in re.findall(rf'"{tile}": (\d+)', source)}


def _warps(source: str) -> set[int]:
    return {int(v) for v in re.findall(r"num_warps=(\d+)", source)}


def _gate(tmp_path: Path, text: str, problem: str) -> None:
    kernel = tmp_path / "kernel.py"
    kernel.write_text(text)
    verdict = gate.check_file(kernel, gate.load_case(str(DATA / problem)), "interpret",
                              cache=False)
    assert verdict.ok, verdict.reason


def _roles(source: str, kernel: str) -> dict[str, str]:
    return {p.name: p.role for p in joint_config(kir.parse(source, "triton"))[kernel].params}


def test_a_bound_rounded_to_whole_loop_blocks_leaves_the_step_a_loop_tile() -> None:
    assert _roles(ROWS, "lower_row_sums") == {"BR": "grid", "BC": "loop"}


def test_a_tile_the_grid_does_not_read_keeps_its_value_and_the_rest_is_swept(
        tmp_path: Path) -> None:
    out = autotune_control(ROWS)
    # the grid counts row blocks through a helper the sweep cannot read: BR stays 16
    assert _values(out, "BR") == {16}
    assert _values(out, "BC") == {16, 32, 64}
    assert len(_warps(out)) >= 3
    assert "lower_row_sums[lambda meta: _programs(n_rows, meta)]" in out
    _gate(tmp_path, out, "lower_row_sums.py")


def test_a_grid_that_reads_the_tile_lets_it_be_swept() -> None:
    out = autotune_control(ROWS_READ)
    assert _values(out, "BR") == {16, 32, 64}
    assert _values(out, "BC") == {16, 32, 64}


def test_nothing_left_to_tune_beside_the_held_tile_is_refused_with_the_reason() -> None:
    ir = kir.parse(ROWS, "triton")
    made = sweep_edit(ir, "lower_row_sums", [{"grid": 64, "num_warps": 2}])
    assert isinstance(made, SweepRefusal)
    assert made.reason == "the launch grid does not read the tiles that shape it"
    assert made.detail == {"tiles": "BR"}
    # the same list where the grid reads the tile: the tile moves
    made = sweep_edit(kir.parse(ROWS_READ, "triton"), "lower_row_sums",
                      [{"grid": 64, "num_warps": 2}])
    assert not isinstance(made, SweepRefusal), made
    assert made[1] == [{"BR": 64, "BC": 16, "num_warps": 2, "num_stages": 3}]


def test_copies_of_a_dot_accumulator_keep_the_dot_roles(tmp_path: Path) -> None:
    direct = (COPIES.replace("    acc_in = acc\n    top_in = top\n    norm_in = norm\n", "")
              .replace("    (acc, top, norm) = (acc_in, top_in, norm_in)\n", "")
              .replace("acc_in", "acc").replace("top_in", "top").replace("norm_in", "norm"))
    assert "acc_in" not in direct and direct != COPIES
    assert _roles(COPIES, "attend") == _roles(direct, "attend") \
        == {"BQ": "m", "HD": "n", "BK": "k"}
    out = autotune_control(COPIES)
    # the chained products' tile list (lineage.control.CHAINED_DOT_CONFIGS): query tiles and
    # key steps with warps and stages
    assert _values(out, "BQ") == {64, 128} and _values(out, "BK") == {32, 64, 128}
    assert 'attend[lambda meta: (triton.cdiv(seq, meta["BQ"]), batch * heads)]' in out
    _gate(tmp_path, out, "attention.py")


@pytest.mark.slow
def test_flash_attention_with_its_key_loops_inlined_and_cut_at_the_diagonal_is_swept(
        tmp_path: Path) -> None:
    """The fmha expert's kernel after its key loop helper was inlined and the causal loop cut
    at whole key blocks below the diagonal: the grid (a def reading meta["BLOCK_M"]) counts
    query blocks, the key tile steps the loops around the dots."""
    source = (DATA / "fmha_skip_inlined.py").read_text()
    assert _roles(source, "_attn_fwd") == {"BLOCK_M": "m", "HEAD_DIM": "n", "BLOCK_N": "k"}
    out = autotune_control(source)
    assert len(_values(out, "BLOCK_M")) >= 2 and len(_values(out, "BLOCK_N")) >= 2
    assert len(_warps(out)) >= 2
    kernel = tmp_path / "kernel.py"
    kernel.write_text(out)
    verdict = gate.check_file(kernel, gate.load_case("fmha"), "interpret", cache=False)
    assert verdict.ok, verdict.reason


def test_a_held_tile_may_take_the_values_its_own_checked_list_gives_it(tmp_path: Path) -> None:
    """A state already under an autotune list whose entries give the unread tile several
    values (each entry was gated): a sweep of it keeps every configuration whose value of that
    tile is one of them, and holds the others at the first entry's value. Without that, a
    second sweep of a swept kernel held its first entry's value (the list's 128-row tile) and
    lost the narrow entry it had picked."""
    swept = autotune_control(ROWS)
    assert _values(swept, "BR") == {16}
    listed = swept.replace('{"BR": 16, "BC": 32}', '{"BR": 32, "BC": 32}', 1)
    assert listed != swept
    out = autotune_control(listed)
    assert _values(out, "BR") == {16, 32}  # both values its checked list gave it, and no other
    _gate(tmp_path, out, "lower_row_sums.py")
