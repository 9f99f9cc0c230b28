"""The virtual form's epilogue read straight from the accumulator fragments (`gemm-schedule`).

Where each of the user's threads holds one accumulator and its block's threads and cells match
one to one (each bit of threadIdx.x / .y is one bit of the cell's row or column in the block:
the textbook shared-tiled GEMM, the naive one-thread-per-output GEMM), the virtual thread that
owns a cell of the tile follows from the cell itself. Each multiplying thread then runs the
kernel's body once per cell of its own fragments, for the virtual thread owning that cell, its
accumulator taken from the fragment's register: no exchange through shared memory, no barrier,
the tile's cells unrolled so that the fragment registers are named by constants. Kernels whose
threads hold several cells (register blocking) keep the exchange: a thread's cells lie in
other threads' fragments.

Staged cells (`stage_width`, where the caller has shared memory beside its ring): a thread's
own cells are a fragment's, eight rows by a pair of columns a warp instruction, so the body run
for them stores to eight output rows at once (a 2-byte output: eight 128-byte lines touched for
64 bytes). Each warp instead writes its fragments into a slab of shared memory of its own
(16 rows by `W` columns at a time, paired 8-byte stores, rows padded so that they fall in
distinct banks), and its lanes then run the body for the slab's cells in row order, lane after
lane along a row: the user's stores of consecutive cells come from consecutive lanes and
coalesce. Only the warp waits (`__syncwarp`): no block barrier, so the body's preconditions
are those of the per-register form.

Positions are not used here: everything is text spliced by the caller. No GPU library is
imported here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from passes.cuda._gemm_text import MARK, PREFIX
from passes.cuda.mma_tile import bit_sum_text

if TYPE_CHECKING:
    from passes.cuda.gemm_eval import BitSum, GemmTile

CELL_ROW, CELL_COL = f"{PREFIX}cr", f"{PREFIX}cc"
"""The names of a cell's row and column in its user block, which `cell_threads` reads."""


def cell_threads(t: GemmTile) -> tuple[str, str] | None:
    """The C text of threadIdx.x and threadIdx.y of the user thread holding the cell
    (`kl_gs_cr`, `kl_gs_cc`) of its block, where each thread holds one accumulator at its base
    cell and the block's threads map one to one onto its bm x bn cells, each thread-index bit
    one distinct power-of-two bit of the row or of the column; else None."""
    if len(t.elements) != 1 or (t.elements[0].dm, t.elements[0].dn) != (0, 0):
        return None
    if t.row.const or t.col.const or t.block[0] * t.block[1] != t.bm * t.bn:
        return None
    used: dict[str, set[int]] = {"r": set(), "c": set()}
    fields: list[list[tuple[int, str, int]]] = []
    for axis, extent in enumerate(t.block):
        row, col = _weights(t.row, axis), _weights(t.col, axis)
        bits = max(len(row), len(col))
        if extent != 1 << bits:
            return None
        out = []
        for b in range(bits):
            wr = row[b] if b < len(row) else 0
            wc = col[b] if b < len(col) else 0
            if (wr == 0) == (wc == 0):
                return None
            which, w = ("r", wr) if wr else ("c", wc)
            if w < 0 or w & (w - 1) or w in used[which]:
                return None
            used[which].add(w)
            out.append((b, which, w.bit_length() - 1))
        fields.append(out)
    for which, extent in (("r", t.bm), ("c", t.bn)):
        if used[which] != {1 << k for k in range(extent.bit_length() - 1)} or extent & (extent - 1):
            return None
    return _field_text(fields[0]), _field_text(fields[1])


def _weights(f: BitSum, axis: int) -> tuple[int, ...]:
    return f.weights[axis] if axis < len(f.weights) else ()


def _field_text(bits: list[tuple[int, str, int]]) -> str:
    """`sum(bit s of (row or column) << b)` as C text, runs of consecutive bits as one masked,
    shifted field."""
    terms, i = [], 0
    while i < len(bits):
        b, which, s = bits[i]
        j = i
        while j + 1 < len(bits) and bits[j + 1][1] == which and bits[j + 1][2] == bits[j][2] + 1:
            j += 1
        var = CELL_ROW if which == "r" else CELL_COL
        field = f"({var} >> {s})" if s else var
        field = f"({field} & {(1 << (j - i + 1)) - 1})"
        terms.append(f"({field} << {b})" if b else field)
        i = j + 1
    return "(unsigned)(" + " + ".join(terms) + ")" if terms else "0u"


STAGE_WIDTHS = (64, 32, 16, 8)
"""Columns of a warp's slab at a time, widest first (each a whole number of 8-column
fragments)."""


def stage_pitch(width: int) -> int:
    """Floats between two rows of a slab `width` columns wide: 8 or 24 modulo 32, so that the
    four rows a half-warp's paired stores reach start in distinct 8-bank groups."""
    return width + 8 if width >= 16 else 8


def stage_bytes(width: int, warps: int) -> int:
    """Shared memory of the slabs of `warps` warps, `width` columns each (16 rows)."""
    return warps * 16 * stage_pitch(width) * 4


def stage_width(columns: int, warps: int, room: int) -> int:
    """The widest slab (`STAGE_WIDTHS`) dividing a warp's `columns` of fragments whose slabs for
    `warps` warps fit in `room` bytes, else 0 (no staging)."""
    return next((w for w in STAGE_WIDTHS
                 if columns % w == 0 and stage_bytes(w, warps) <= room), 0)


def cell_products(t: GemmTile, pad: str, staged: bool = False) -> str:
    """The stand-in for the K loop in the body run for one cell: the thread's accumulator adds
    the product the fragment register holds, or (`staged`) the warp's slab holds at
    `kl_gs_at` (the row and column of the cell in the user block recorded beside it, as the
    de-optimization reads them)."""
    p, e = PREFIX, t.elements[0]
    i1 = pad + "  "
    held = f"{p}slab[{p}at]" if staged else f"{p}acc[{p}i][{p}j][{p}q]"
    return "\n".join([
        f"{{  {MARK}the tile's products into this thread's accumulators",
        f"{i1}const float {p}y[1] = {{{held}}};  // the cell at row "
        f"{bit_sum_text(t.row)}, column {bit_sum_text(t.col)} of its block",
        f"{i1}{e.lvalue} += {p}y[0];",
        f"{pad}}}"])


def cells_tail(t: GemmTile, frame: dict[str, Any], body: str,
               grid: tuple[dict[str, str], dict[str, str]], restore: str, pad: str) -> list[str]:
    """The virtual form after a tile's K loop where the cells name their threads: for each cell
    of the thread's fragments (`frame`: `mi`, `ni` fragments, `row_step` rows apart; `active`
    the warps holding fragments, `warps` the multiplying warps), the kernel's own `body` (its K
    loop replaced by `cell_products`) for the virtual thread owning the cell, unless the cell's
    user block lies past M or N (the user's grid has no such block). `grid`: the virtual block's
    blockIdx / gridDim components; `restore`: the statements giving back the parameters the
    body writes. With `frame["stage"]` (a slab width `W`) and `frame["slab"]` (the C text of the
    slabs' shared memory, warp after warp): the cells of each 16 x W piece of the warp's
    fragments through its slab, the body run for them in row order (`_staged`)."""
    p = PREFIX
    partial = frame["active"] < frame["warps"]  # (warps past the MMA's hold no fragments)
    guard = [f"{pad}if ({p}warp < {frame['active']}) {{"] if partial else []
    run = _cell_run(t, body, grid, restore, pad + "      ")
    if frame.get("stage"):
        lines = [*guard, *_staged(frame, run, pad)]
    else:
        lines = [
            f"{pad}// each cell of the thread's fragments: the kernel's body for the thread owning it",
            *guard,
            f"{pad}#pragma unroll",
            f"{pad}for (int {p}i = 0; {p}i < {frame['mi']}; ++{p}i)",
            f"{pad}#pragma unroll",
            f"{pad}  for (int {p}j = 0; {p}j < {frame['ni']}; ++{p}j)",
            f"{pad}#pragma unroll",
            f"{pad}    for (int {p}q = 0; {p}q < 4; ++{p}q) {{  // rows +0 / +8, columns +0 / +1",
            f"{pad}      const int {p}r = {p}wm + {frame['row_step']} * {p}i + {p}lane / 4 + "
            f"8 * ({p}q / 2), {p}c = {p}wn + 8 * {p}j + 2 * ({p}lane % 4) + {p}q % 2;",
            *run,
            f"{pad}    }}",
        ]
    if guard:
        lines.append(f"{pad}}}")
    return lines


def _staged(frame: dict[str, Any], run: list[str], pad: str) -> list[str]:
    """Per fragment row `kl_gs_i` and per W columns of the warp's fragments: the warp's 16 x W
    cells into its slab (each lane its fragment pairs, one 8-byte store each), then each lane
    the cells lane, lane + 32, ... of the slab in row order (`kl_gs_at`), the body (`run`) for
    each; the warp waits before it writes (the reads of the piece before are done) and after."""
    p = PREFIX
    w = int(frame["stage"])
    pitch = stage_pitch(w)
    per_lane = 16 * w // 32
    i1, i2, i3 = pad + "  ", pad + "    ", pad + "      "
    return [
        f"{pad}// each warp's fragments through its own slab of shared memory, {w} columns at a "
        "time, then the kernel's body",
        f"{pad}// for the slab's cells in row order (consecutive lanes: consecutive columns)",
        f"{pad}float* {p}slab = reinterpret_cast<float*>({frame['slab']}) + {p}warp * "
        f"{16 * pitch};",
        f"{pad}#pragma unroll",
        f"{pad}for (int {p}i = 0; {p}i < {frame['mi']}; ++{p}i)",
        f"{pad}#pragma unroll",
        f"{pad}  for (int {p}j0 = 0; {p}j0 < {frame['ni']}; {p}j0 += {w // 8}) {{",
        f"{i2}__syncwarp();",
        f"{i2}#pragma unroll",
        f"{i2}for (int {p}j = 0; {p}j < {w // 8}; ++{p}j)",
        f"{i2}#pragma unroll",
        f"{i2}  for (int {p}h = 0; {p}h < 2; ++{p}h)",
        f"{i2}    *reinterpret_cast<float2*>({p}slab + ({p}lane / 4 + 8 * {p}h) * {pitch} + 8 * "
        f"{p}j + 2 * ({p}lane % 4)) = make_float2({p}acc[{p}i][{p}j0 + {p}j][2 * {p}h], "
        f"{p}acc[{p}i][{p}j0 + {p}j][2 * {p}h + 1]);",
        f"{i2}__syncwarp();",
        # (four cells at a time: the slab's cells name no fragment register, and a full unroll
        # keeps more of their loads in flight than the registers left beside the fragments hold)
        f"{i2}#pragma unroll 4",
        f"{i2}for (int {p}e = 0; {p}e < {per_lane}; ++{p}e) {{  // lane after lane along the rows",
        f"{i3}const int {p}sr = ({p}lane + 32 * {p}e) / {w}, {p}sc = ({p}lane + 32 * {p}e) % {w};",
        f"{i3}const int {p}at = {p}sr * {pitch} + {p}sc;",
        f"{i3}const int {p}r = {p}wm + {frame['row_step']} * {p}i + {p}sr, "
        f"{p}c = {p}wn + 8 * {p}j0 + {p}sc;",
        *run,
        f"{i2}}}",
        f"{i1}}}",
    ]


def _cell_run(t: GemmTile, body: str, grid: tuple[dict[str, str], dict[str, str]],
              restore: str, i3: str) -> list[str]:
    """The body for the cell at tile row `kl_gs_r`, column `kl_gs_c`, as the virtual thread
    owning it, unless its user block lies past M or N (`continue`)."""
    p = PREFIX
    vb, vg = grid
    tx, ty = cell_threads(t) or ("0u", "0u")
    bx, by = t.block
    return [
        f"{i3}const int {p}sm = {p}r / {t.bm} * {t.bm}, {p}sn = {p}c / {t.bn} * {t.bn};",
        f"{i3}if ({p}m0 + {p}sm >= {p}M || {p}n0 + {p}sn >= {p}N) continue;",
        f"{i3}const int {CELL_ROW} = {p}r - {p}sm, {CELL_COL} = {p}c - {p}sn;",
        f"{i3}const uint3 {p}vb = make_uint3({vb.get('x', '0u')}, {vb.get('y', '0u')}, {vb.get('z', '0u')});",
        f"{i3}const uint3 {p}vg = make_uint3({vg.get('x', '1u')}, {vg.get('y', '1u')}, {vg.get('z', '1u')});",
        f"{i3}const uint3 {p}vd = make_uint3({bx}u, {by}u, 1u), "
        f"{p}vt = make_uint3({tx}, {ty}, 0u);",
        *([f"{i3}{restore}"] if restore else []),
        f"{i3}{{  {MARK}the kernel's own body for this block and thread",
        body,
        f"{i3}}}",
    ]
