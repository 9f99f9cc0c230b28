"""passes.cuda.gemm_cells: the user thread owning each cell of a block, read from the GEMM's
thread mapping (textbook, naive, transposed-operand and threadIdx.x-along-the-rows kernels), and
the kernels whose threads hold several cells, which keep the exchange."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import kir
from passes.cuda.gemm_cells import CELL_COL, CELL_ROW, cell_threads
from passes.cuda.gemm_schedule import analyse

ROOT = Path(__file__).resolve().parents[1]
STYLES = ROOT / "bench" / "styles" / "cuda"
KERNELS = {
    "textbook": (STYLES / "cu_mm_smem_tiled" / "mm_tiled.cu", (32, 32)),
    "naive": (STYLES / "cu_mm_naive" / "mm_naive.cu", (16, 16)),
    "transposed-operand": (STYLES / "cu_mm_bt" / "linear_bt.cu", (16, 16)),
    "x-along-rows": (Path(__file__).parent / "data" / "cuda_gemm" / "axpby_xrows.cu", (16, 16)),
}


def _tile(path: Path, block: tuple[int, int]):  # noqa: ANN202
    ir = kir.parse(path.read_text(), "cuda")
    names = frozenset(n.name for n in ir.walk() if n.kind == "kernel")
    found, reasons = analyse(ir, block, names)
    assert found, reasons
    return found[0].g.tile


def _value(text: str, row: int, col: int) -> int:
    code = text.replace("(unsigned)", "").replace(CELL_ROW, str(row)).replace(CELL_COL, str(col))
    assert re.fullmatch(r"[\d\s()+&<>]*", code), code
    return eval(code)  # noqa: S307 — digits and bit operators only, checked above


def _bits(f, tx: int, ty: int) -> int:  # noqa: ANN001
    total = f.const
    for axis, value in enumerate((tx, ty)):
        for b, w in enumerate(f.weights[axis] if axis < len(f.weights) else ()):
            total += w * ((value >> b) & 1)
    return total


@pytest.mark.parametrize("name", list(KERNELS))
def test_each_cell_names_the_thread_that_holds_it(name: str) -> None:
    t = _tile(*KERNELS[name])
    found = cell_threads(t)
    assert found is not None
    tx_text, ty_text = found
    owners = set()
    for row in range(t.bm):
        for col in range(t.bn):
            tx, ty = _value(tx_text, row, col), _value(ty_text, row, col)
            assert 0 <= tx < t.block[0] and 0 <= ty < t.block[1]
            # the thread named holds exactly this cell
            assert (_bits(t.row, tx, ty), _bits(t.col, tx, ty)) == (row, col), (row, col, tx, ty)
            owners.add((tx, ty))
    assert len(owners) == t.block[0] * t.block[1]


def test_threads_holding_several_cells_have_no_owner_per_cell() -> None:
    # 1-D register blocking: a column of 8 rows a thread (its cells lie in other threads'
    # fragments, so the form keeps the exchange)
    text = (STYLES / "cu_mm_reg1d" / "mm_reg1d.py").read_text()
    source = re.search(r'r"""(.*?)"""', text, re.S).group(1)
    ir = kir.parse(source, "cuda")
    found, reasons = analyse(ir, (512, 1), frozenset({"mm_reg1d"}))
    assert found, reasons
    assert len(found[0].g.tile.elements) == 8
    assert cell_threads(found[0].g.tile) is None
