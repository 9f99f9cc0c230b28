"""A persistent tile walk (alone and with tensor descriptors) around a kernel with swapped
grid axes whose K loop the block-skip rule split in two (`bench/styles/nw_trmm_where`):
the chain of shipped cards the device search composed is gated at the interpret tier on
shapes with at least three ragged tiles along every grid axis and several tiles per
persistent program, so that an axis mix-up, a block index read before the walk binds it or a
boundary the rewrite drops shows as a wrong output on the CPU."""
from __future__ import annotations

import importlib.util
import re
import shutil
from functools import cache
from pathlib import Path

import pytest

import gate

pytest.importorskip("torch")

STYLE = Path(__file__).resolve().parent.parent / "bench" / "styles" / "nw_trmm_where"
TILE = 32  # the start kernel's block sizes (TM = TN = TK)
M, N = 104, 80  # 4 row blocks, 3 column blocks, both ragged; K = M ragged too


@cache
def _probe():
    """bench/persist_split_loops.py, whose chain of shipped cards this gates."""
    spec = importlib.util.spec_from_file_location("_persist_split_loops", STYLE.parents[2]
                                                  / "bench" / "persist_split_loops.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _case(tmp_path: Path) -> Path:
    folder = tmp_path / STYLE.name
    shutil.copytree(STYLE, folder)
    text = (folder / "case.py").read_text()
    text = re.sub(r"SMALL_SHAPES = .*", f'SMALL_SHAPES = {{"default": {{"M": {M}, "N": {N}, '
                  '"dtype": "fp16"}}', text)
    (folder / "case.py").write_text(text)
    return folder


def test_the_shapes_give_three_ragged_tiles_per_axis() -> None:
    start = (STYLE / "tri_where.py").read_text()
    assert f"TM={TILE}, TN={TILE}, TK={TILE}" in start
    assert -(-M // TILE) >= 3 and -(-N // TILE) >= 3 and M % TILE and N % TILE


# persistent-grid refuses a kernel whose K loop the tile sets (the split's first loop stops
# at the diagonal: tiles of unequal work), so the walk comes before the split here
@pytest.mark.parametrize("chain", [
    ("persistent-grid", "causal-block-skip"),
    ("persistent-grid", "causal-block-skip", "tma-descriptors"),
    ("software-pipelining", "grouped-ordering", "persistent-grid", "causal-block-skip"),
    ("software-pipelining", "grouped-ordering", "persistent-grid", "causal-block-skip",
     "tma-descriptors"),
], ids=lambda c: "+".join(c))
def test_a_split_k_loop_walked_persistently_is_right_on_every_tile(tmp_path: Path,
                                                                   chain: tuple) -> None:
    text = _probe()._chain(*chain)
    assert re.search(r"for kb in (tl\.)?range\(0, below_diagonal", text)  # the K loop split
    assert re.search(r"for \w+ in range\(tl\.program_id\(0\), .*tl\.num_programs\(0\)\):", text)
    case = gate.load_case(_case(tmp_path))
    verdict = gate.check(text, "triton", case, "interpret", path=case.start_path(), cache=False)
    assert verdict.ok, verdict.reason
