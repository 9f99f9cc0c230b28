"""The generic autotune list (`lineage.control`) of a row walked in 1-D chunks (the loop step
is the kernel's only tile) reaches the common chunks, whether the host computes the step from
the problem (`min(1024, next_power_of_2(N))`) or it was written small: any step walks the same
masked range. A step the kernel does not mask, or one the host reads beyond the launch, is left
as it is; a loop step beside another tile keeps the author's scale."""
from __future__ import annotations

import re

import pytest

import gate
from lineage.control import HOST_LOOP_STEP, autotune_control
from skill_helpers import ROOT

RMSNORM = ROOT / "bench/heldout/rmsnorm"

# a row kernel written elsewhere: the row walked in host-sized chunks, twice
CHUNKED = '''import torch
import triton
import triton.language as tl


@triton.jit
def scale_rows(src, dst, n, ld, CH: tl.constexpr):
    r = tl.program_id(0)
    acc = tl.zeros([CH], dtype=tl.float32)
    for c0 in range(0, n, CH):
        o = c0 + tl.arange(0, CH)
        v = tl.load(src + r * ld + o, mask=o < n, other=0.0).to(tl.float32)
        acc += tl.abs(v)
    total = tl.sum(acc, axis=0)
    for c0 in range(0, n, CH):
        o = c0 + tl.arange(0, CH)
        v = tl.load(src + r * ld + o, mask=o < n, other=0.0).to(tl.float32)
        tl.store(dst + r * ld + o, (v / total).to(dst.dtype.element_ty), mask=o < n)


def run(x):
    out = torch.empty_like(x)
    rows, n = x.shape
    ch = min(512, triton.next_power_of_2(n))
    scale_rows[(rows,)](x, out, n, x.stride(0), CH=ch)
    return out
'''


def _steps(source: str, name: str) -> set[int]:
    return {int(v) for v in re.findall(rf'"{name}": (\d+)', source)}


def test_a_host_computed_loop_step_is_swept_as_literals() -> None:
    control = autotune_control(CHUNKED)
    assert _steps(control, "CH") == {HOST_LOOP_STEP, 2 * HOST_LOOP_STEP, 4 * HOST_LOOP_STEP}
    assert "CH=ch" not in control  # the autotuner sets it now
    assert len(re.findall(r"triton\.Config\(", control)) == 8


@pytest.mark.parametrize("variant, why", [
    (CHUNKED.replace("mask=o < n, other=0.0", "").replace(", mask=o < n)", ")"),
     "the kernel does not mask the chunk: only sizes the host chose are safe"),
    (CHUNKED.replace("    return out", "    assert n % ch == 0\n    return out"),
     "the host reads the step beyond the launch"),
])
def test_a_host_step_that_is_not_safe_to_change_stays_with_the_host(variant: str, why: str) -> None:
    control = autotune_control(variant)
    assert not _steps(control, "CH"), why
    assert "CH=ch" in control
    assert re.findall(r"num_warps=(\d+)", control)  # the warps are swept still


def test_a_small_written_chunk_reaches_the_common_chunks_and_a_2d_tile_keeps_its_scale() -> None:
    small = CHUNKED.replace("CH=ch)", "CH=64)")
    assert _steps(autotune_control(small), "CH") == {HOST_LOOP_STEP, 2 * HOST_LOOP_STEP,
                                                      4 * HOST_LOOP_STEP}
    # a loop step beside another tile (a GEMV's rows per program): scaled from the author's
    gemv = gate.load_case(ROOT / "bench/styles/gemv_defaults")
    assert _steps(autotune_control(gemv.start_path().read_text()), "BLOCK_K") == {128, 256, 512}


def test_rmsnorms_control_sweeps_its_step_and_passes_the_interpret_gate() -> None:
    case = gate.load_case(RMSNORM)
    start = case.start_path().read_text()
    control = autotune_control(start)
    assert _steps(control, "BLOCK_SIZE") == {1024, 2048, 4096}
    verdict = gate.check(control, "triton", case, "interpret", path=case.start_path(), cache=False)
    assert verdict.ok, verdict.reason
