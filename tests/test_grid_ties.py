"""A sweep ties each literal of a host-computed launch grid to the tile constexpr it counts
blocks of by data flow (the size it divides, the program axis it fills), never by equal values:
two tiles written with the same literal stay apart, and a literal whose tile cannot be told
keeps every tile of that value as written."""
from __future__ import annotations

from pathlib import Path

import kir

from lineage.control import apply_byte_edits, autotune_control, generic_configs
from lineage.transfer import config_candidates
from passes.triton.roles import joint_config, sweep_edit

# Weighted sums over blocks of 32 rows: the host sizes the output by 32-row blocks, so ROWS
# is pinned; COLS, written with the same literal, is swept. Program axis 0 walks the columns.
PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, w):
        parts = [(x[i:i + 32] * w[i:i + 32, None]).sum(0) for i in range(0, x.shape[0], 32)]
        return torch.stack(parts)


rows = 200
cols = 72


def get_inputs():
    return [torch.randn(rows, cols), torch.randn(rows)]


def get_init_inputs():
    return []
'''

START = '''import torch
import triton
import triton.language as tl


@triton.jit
def weighted_block_sums(x_ptr, w_ptr, out_ptr, R, C, ROWS: tl.constexpr, COLS: tl.constexpr):
    cb = tl.program_id(0)
    rb = tl.program_id(1)
    r = rb * ROWS + tl.arange(0, ROWS)
    c = cb * COLS + tl.arange(0, COLS)
    x = tl.load(x_ptr + r[:, None] * C + c[None, :], mask=(r[:, None] < R) & (c[None, :] < C), other=0.0)
    w = tl.load(w_ptr + r, mask=r < R, other=0.0)
    tl.store(out_ptr + rb * C + c, tl.sum(x * w[:, None], axis=0), mask=c < C)


def run(x, w):
    R, C = x.shape
    out = torch.empty((triton.cdiv(R, 32), C), device=x.device, dtype=x.dtype)
    weighted_block_sums[(triton.cdiv(C, 32), triton.cdiv(R, 32))](x, w, out, R, C, ROWS=32, COLS=32)
    return out
'''

# Two launches of one GEMM whose row and column tiles are both the literal 64 (the grid
# `cdiv(M, 64)` counts row blocks, `cdiv(H, 64)` column blocks).
TWO_GEMMS = '''import torch
import triton
import triton.language as tl


@triton.jit
def dense(x_ptr, w_ptr, y_ptr, M, N, K, TM: tl.constexpr, TN: tl.constexpr, TK: tl.constexpr):
    rows = tl.program_id(0) * TM + tl.arange(0, TM)
    outs = tl.program_id(1) * TN + tl.arange(0, TN)
    acc = tl.zeros((TM, TN), tl.float32)
    for k in range(0, K, TK):
        ks = k + tl.arange(0, TK)
        a = tl.load(x_ptr + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(w_ptr + outs[None, :] * K + ks[:, None], mask=(outs[None, :] < N) & (ks[:, None] < K), other=0.0)
        acc += tl.dot(a, b)
    tl.store(y_ptr + rows[:, None] * N + outs[None, :], acc, mask=(rows[:, None] < M) & (outs[None, :] < N))


def run(x, w1, w2):
    M, K = x.shape
    H, O = w1.shape[0], w2.shape[0]
    h = torch.empty((M, H), device=x.device, dtype=torch.float32)
    dense[(triton.cdiv(M, 64), triton.cdiv(H, 64))](x, w1, h, M, H, K, TM=64, TN=64, TK=32)
    y = torch.empty((M, O), device=x.device, dtype=torch.float32)
    dense[(triton.cdiv(M, 64), triton.cdiv(O, 64))](h, w2, y, M, O, H, TM=64, TN=64, TK=32)
    return y
'''

# A square tiling through one flattened program id: both tiles tile the same size and neither
# scales a program axis of its own, so which of them a `cdiv(n, 32)` counts cannot be told.
FLAT = '''import torch
import triton
import triton.language as tl


@triton.jit
def add_t(x_ptr, y_ptr, N, BR: tl.constexpr, BC: tl.constexpr):
    pid = tl.program_id(0)
    per_row = tl.cdiv(N, BC)
    r = (pid // per_row) * BR + tl.arange(0, BR)
    c = (pid % per_row) * BC + tl.arange(0, BC)
    keep = (r[:, None] < N) & (c[None, :] < N)
    a = tl.load(x_ptr + r[:, None] * N + c[None, :], mask=keep, other=0.0)
    b = tl.load(x_ptr + c[None, :] * N + r[:, None], mask=keep, other=0.0)
    tl.store(y_ptr + r[:, None] * N + c[None, :], a + b, mask=keep)


def run(x):
    n = x.shape[0]
    y = torch.empty_like(x)
    add_t[(triton.cdiv(n, 32) * triton.cdiv(n, 32),)](x, y, n, BR=32, BC=32)
    return y
'''


def _launch_lines(text: str, kernel: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith(f"{kernel}[")]


def test_a_literal_shared_by_two_tiles_goes_to_the_tile_whose_axis_it_counts(tmp_path: Path) -> None:
    import gate

    out = autotune_control(START)
    [launch] = _launch_lines(out, "weighted_block_sums")
    # COLS counts the column blocks of axis 0; ROWS (pinned by the host's buffer) keeps its 32
    assert 'triton.cdiv(C, meta["COLS"]), triton.cdiv(R, 32))' in launch, launch
    assert "ROWS=32" in launch and "COLS=" not in launch
    problem = tmp_path / "weighted_block_sums.py"
    problem.write_text(PROBLEM)
    control = tmp_path / "control.py"
    control.write_text(out)
    # every configuration of the autotuner (COLS 32, 64, 128) is run and checked by the gate
    verdict = gate.check_file(control, gate.load_case(problem), "interpret", cache=False)
    assert verdict.ok, verdict.reason


def test_two_launches_of_one_gemm_sweep_both_tiles_of_the_same_literal() -> None:
    out = autotune_control(TWO_GEMMS)
    first, second = _launch_lines(out, "dense")
    assert 'triton.cdiv(M, meta["TM"]), triton.cdiv(H, meta["TN"])' in first, first
    assert 'triton.cdiv(M, meta["TM"]), triton.cdiv(O, meta["TN"])' in second, second
    assert '"TM": 128, "TN": 256' in out
    # the search's own sweep goes through the same rewrite
    made = [text for _, new_ir, _ in config_candidates({}, kir.parse(TWO_GEMMS, "triton"), own=True,
                                                        every=True)
            for text in [new_ir.unparse()]]
    assert made and all('cdiv(M, meta["TN"])' not in t and 'cdiv(H, meta["TM"])' not in t
                        for t in made)


def test_a_literal_whose_tile_cannot_be_told_keeps_the_tiles_of_its_value() -> None:
    ir = kir.parse(FLAT, "triton")
    made = sweep_edit(ir, "add_t", generic_configs(joint_config(ir)["add_t"]))
    assert not hasattr(made, "reason"), made  # the warps are still swept
    assert made[1] and all(set(c) == {"num_warps", "num_stages"} for c in made[1]), made[1]
    out = apply_byte_edits(FLAT, made[0])
    [launch] = _launch_lines(out, "add_t")
    assert "meta[" not in launch and "BR=32" in launch and "BC=32" in launch, launch
    compile(out, "flat.py", "exec")


# One square tile for rows and columns (`i * TILE`, `j * TILE`) beside a K step of the same
# value: both grid literals count TILE's blocks, one on each program axis.
SQUARE = '''import torch
import triton
import triton.language as tl


@triton.jit
def mm_square(A, B, C, M, N, K, TILE: tl.constexpr, TILE_K: tl.constexpr):
    i = tl.program_id(0)
    j = tl.program_id(1)
    rows = i * TILE + tl.arange(0, TILE)
    cols = j * TILE + tl.arange(0, TILE)
    acc = tl.zeros((TILE, TILE), tl.float32)
    for k0 in range(0, K, TILE_K):
        ks = k0 + tl.arange(0, TILE_K)
        a = tl.load(A + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(B + ks[:, None] * N + cols[None, :], mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(C + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


def run(A, B):
    M, K = A.shape
    N = B.shape[1]
    C = torch.empty((M, N), dtype=torch.float32, device=A.device)
    mm_square[(triton.cdiv(M, 32), triton.cdiv(N, 32))](A, B, C, M, N, K, TILE=32, TILE_K=32)
    return C
'''


def test_a_tile_that_scales_two_program_axes_is_read_on_both() -> None:
    out = autotune_control(SQUARE)
    [launch] = _launch_lines(out, "mm_square")
    # a grid left at 32 columns per program would launch 4x the programs at TILE=128
    assert 'triton.cdiv(M, meta["TILE"]), triton.cdiv(N, meta["TILE"])' in launch, launch
    assert 'meta["TILE_K"]' not in launch, launch


def test_an_axis_whose_count_is_not_the_tiles_holds_the_tile() -> None:
    # axis 1 counts 32-column blocks as `cdiv(N, 16) // 2`: no literal there is TILE's copy, so
    # a rewrite of axis 0 alone would leave axis 1 at 32 columns while TILE changes; TILE
    # keeps its 32 (where the written grid is right) and the K step and warps are swept
    src = SQUARE.replace("triton.cdiv(N, 32))]", "triton.cdiv(N, 16) // 2)]")
    made = sweep_edit(kir.parse(src, "triton"), "mm_square",
                      generic_configs(joint_config(kir.parse(src, "triton"))["mm_square"]))
    assert not hasattr(made, "reason"), made
    assert all("TILE" not in c for c in made[1]) and {c["TILE_K"] for c in made[1]} - {32}
    [launch] = _launch_lines(apply_byte_edits(src, made[0]), "mm_square")
    assert "meta" not in launch and "TILE=32)" in launch, launch
