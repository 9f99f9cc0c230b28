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


# ---------------------------------------------------------------------------------------------
# staged cells: each warp's fragments through a slab of its own, the body run in row order


def test_a_half_warps_paired_stores_into_its_slab_fall_in_distinct_banks() -> None:
    from passes.cuda.gemm_cells import STAGE_WIDTHS, stage_pitch

    for width in STAGE_WIDTHS:
        pitch = stage_pitch(width)
        assert pitch >= width and pitch % 2 == 0
        for j in range(width // 8):
            for h in (0, 1):
                for lanes in (range(16), range(16, 32)):  # an 8-byte store: two phases
                    banks = {((lane // 4 + 8 * h) * pitch + 8 * j + 2 * (lane % 4) + d) % 32
                             for lane in lanes for d in (0, 1)}
                    assert len(banks) == 32, (width, j, h)


def test_the_widest_slab_that_fits_is_taken() -> None:
    from passes.cuda.gemm_cells import stage_bytes, stage_width

    # two warpgroups of 64 x 256 (eight warps, 256 columns each) beside a four-slot ring
    room = 227 * 1024 - 4 * 49152 - 1024 - 96
    assert stage_width(256, 8, room) == 32 and stage_bytes(32, 8) <= room < stage_bytes(64, 8)
    # four of 64 x 128: sixteen warps
    assert stage_width(128, 16, room) == 16
    # a warp of 8-column fragments: no wider slab than its columns
    assert stage_width(8, 4, room) == 8
    assert stage_width(256, 8, stage_bytes(8, 8) - 1) == 0


def _virtual():  # noqa: ANN202
    import importlib

    return importlib.import_module("test_gemm_schedule_virtual")


@pytest.mark.parametrize("name", ["flat", "row-block"])
def test_staged_cells_match_torch_on_the_emulator_and_read_their_own_slab_cell(name: str) -> None:
    pytest.importorskip("torch")
    from gate.hostforms import device_source
    from nvrtc_helpers import ptx_for_sm90a

    v = _virtual()
    source, block, run = v.KERNELS[name]
    result = v._apply(source, {"block": block, **v.TMA})
    assert result.ok, result
    text = result.ir.text
    kernel = v._kernel(text)
    # two warpgroups of 64 x 256: eight warps, slabs 32 columns wide beside the four slots
    assert '"cells": true' in text and '"staged": 32' in text
    ptx = ptx_for_sm90a(device_source(text))
    # paired stores into the slab, only the warp waits (no barrier of the multiplying threads)
    assert "st.shared.v2.f32" in ptx and "bar.warp.sync" in ptx and "bar.sync 1, 256" not in ptx
    v._matches(v._launched(text, kernel, (384, 1)), run, ((72, 136, 72), (130, 40, 45)))
    # a lane reading its neighbour's cell of the slab: caught
    wrong = text.replace("{kl_gs_slab[kl_gs_at]}", "{kl_gs_slab[kl_gs_at ^ 1]}")
    assert wrong != text
    with pytest.raises(AssertionError):
        v._matches(v._launched(wrong, kernel, (384, 1)), run, ((72, 136, 72),))
    # `registers`: the body from the fragment registers, no slab, the same output
    plain = v._apply(source, {"block": block, **v.TMA, "registers": True}).ir.text
    assert '"staged"' not in plain and "kl_gs_slab" not in plain
    v._matches(v._launched(plain, kernel, (384, 1)), run, ((72, 136, 72),))


def test_the_style_starts_stage_their_cells_without_spilling() -> None:
    from gate.hostforms import device_source
    from nvrtc_helpers import spills_for_sm90a

    v = _virtual()
    # the 1024-thread textbook kernel on the form's own block (two or four warpgroups that
    # multiply), the 256-thread transposed-operand one on its own block grown by the producer
    for name, block, extra, width in (("cu_mm_smem_tiled", "32x32", {}, 32),
                                      ("cu_mm_smem_tiled", "32x32", {"consumers": 4}, 16),
                                      ("cu_mm_bt", "16x16", {}, 32)):
        start = next((STYLES / name).glob("*.cu"))
        result = v._apply(start.read_text(), {"block": block, **v.TMA, **extra}, start)
        assert result.ok, (name, extra, result)
        text = result.ir.text
        assert f'"staged": {width}' in text, (name, extra)
        used = spills_for_sm90a(device_source(text))
        assert used["spill_stores"] == 0 and used["stack_bytes"] == 0, (name, extra, used)
