"""gemm-schedule's `pingpong` option: in the TMA producer form on 128x128 tiles, each of the two
multiplying warpgroups holds a whole tile and they take the block's tiles in turn, ordered by a
pair of named barriers, so that one runs the kernel's body for its tile while the other
multiplies the next. Kernels in other styles (a 1-D grid counting 16x16 tiles in fp16, one
output row a block walked by pointer bumps) match torch on the CPU emulator on a grid of fewer
blocks than tiles (each block several tiles, the warpgroups an unequal number) with K past
twice the ring's slots (the slots' mbarrier phases wrap); without the turns the emulator stops
on a wait no thread completes. The style tier's one-output-a-thread starts take it through
their own host modules (on an sm_90a GPU too, at ragged sizes of many tiles a block); refusals
say why."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

import kir
from passes import get_pass

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
STYLES = ROOT / "bench" / "styles" / "cuda"
PINGPONG = {"wgmma": True, "deep": True, "producer": True, "tma": True, "pingpong": True}
TURN = 'asm volatile("bar.sync %0, 256;" :: "r"(2 + kl_gs_wg) : "memory");'
HANDED = 'asm volatile("bar.arrive %0, 256;" :: "r"(3 - kl_gs_wg) : "memory");'


def _virtual():  # noqa: ANN202
    import importlib

    return importlib.import_module("test_gemm_schedule_virtual")


def _on_two_blocks(text: str, kernel: str) -> Callable[..., None]:
    """A launcher of the rewritten kernel on two blocks of the schedule's 384 threads, whatever
    grid the caller names (the persistent loop takes every tile)."""
    inner = _virtual()._launched(text, kernel, (384, 1))

    def launch(grid: Any, own: Any, args: list[Any]) -> None:
        inner((2, 1, 1), own, args)
    return launch


@pytest.mark.parametrize("name", ["flat", "row-block"])
def test_the_warpgroups_take_tiles_in_turn_and_match_torch_on_the_emulator(name: str) -> None:
    from gate.hostforms import device_source
    from nvrtc_helpers import ptx_for_sm90a

    v = _virtual()
    source, block, run = v.KERNELS[name]
    result = v._apply(source, {"block": block, **PINGPONG})
    assert result.ok, result
    text = result.ir.text
    kernel = v._kernel(text)
    assert '"pingpong": true' in text and '"cells": true' in text
    assert "__launch_bounds__(384, 1)" in text and TURN in text and HANDED in text
    ptx = ptx_for_sm90a(device_source(text))
    # each warpgroup a whole 128x128 tile: two m64n128 MMAs a k step; the turns' named barriers
    assert "wgmma.mma_async.sync.aligned.m64n128k16" in ptx
    assert "bar.arrive" in ptx and "cp.async.bulk.tensor.2d" in ptx
    # 3x3 tiles on two blocks: one warpgroup three tiles, the other two; K = 520: nine slices
    # through four slots (the phases wrap); and one ragged tile alone
    torch.manual_seed(5)
    for m, n, k in ((300, 260, 520), (72, 136, 72)):
        got, want, tol = run(_on_two_blocks(text, kernel), m, n, k)
        assert (got - want).abs().max() <= tol * want.abs().max(), (m, n, k)
    # without the turns the second warpgroup waits on slots a phase too far ahead
    loose = text.replace(TURN, ";").replace(HANDED, "")
    with pytest.raises(Exception):  # noqa: B017,PT011 — a mismatch or the emulator's deadlock
        got, want, tol = run(_on_two_blocks(loose, kernel), 200, 140, 520)
        assert (got - want).abs().max() <= tol * want.abs().max()


@pytest.mark.parametrize("name", ["cu_mm_smem_tiled", "cu_mm_naive", "cu_mm_bt"])
def test_the_style_starts_take_it_through_their_host(name: str) -> None:
    import gate
    from kir import hostlaunch
    from passes.roundtrip import roundtrip

    v = _virtual()
    start, case = v._case(name)
    ir = kir.parse(start.read_text(), "cuda", path=str(start))
    rule = get_pass("gemm-schedule").from_options(PINGPONG)
    [site] = [s for s in rule.sites(ir) if not s.present]
    result = rule.optimize(ir, site, v.CTX)
    assert result.ok, result
    [asked] = hostlaunch.directives(result.ir.text)
    assert asked.persist and asked.tma is not None and asked.arch == "sm_90a"
    assert asked.block in ((384, 1, 1), (16, 24, 1))
    verdict = gate.check(result.ir.text, "cuda", str(case), "emulate", path=start, cache=False)
    assert verdict.ok, verdict.reason
    done = next(s for s in rule.sites(result.ir) if s.present)
    assert roundtrip(rule, result.ir, done, v.CTX).same


def test_the_textbook_kernel_takes_it_without_spilling() -> None:
    from gate.hostforms import device_source
    from nvrtc_helpers import spills_for_sm90a

    v = _virtual()
    start, _ = v._case("cu_mm_smem_tiled")
    for stages in (4, 6):
        result = v._apply(start.read_text(), {"block": "32x32", **PINGPONG, "stages": stages},
                          start)
        assert result.ok, result
        used = spills_for_sm90a(device_source(result.ir.text))
        assert used["spill_stores"] == 0 and used["stack_bytes"] == 0, (stages, used)


def test_refusals_say_why() -> None:
    v = _virtual()
    source, block, _ = v.KERNELS["flat"]
    base = {"block": block, **PINGPONG}
    assert "128x256 tile" in v._refusal(source, {**base, "wide": True})
    assert "no consumer warpgroups" in v._refusal(source, {**base, "consumers": 4})
    assert "form of the producer warpgroup" in v._refusal(
        source, {"block": block, "wgmma": True, "deep": True, "pingpong": True})
    # threads holding several outputs keep the exchange, whose barriers would hold both
    source, block, _ = v.KERNELS["transposed"]
    assert "once per cell" in v._refusal(source, {"block": block, **PINGPONG})
    # where it runs the body from the registers, the turns still apply (no exchange)
    source, block, _ = v.KERNELS["flat"]
    result = v._apply(source, {**base, "registers": True})
    assert result.ok and TURN in result.ir.text and "kl_gs_slab" not in result.ir.text


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cu_mm_smem_tiled", "cu_mm_bt"])
def test_on_the_gpu_the_turns_run_through_the_start_host(tmp_path: Path, name: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma and TMA need sm_90a")
    v = _virtual()
    start, _ = v._case(name)
    for i, options in enumerate((PINGPONG, {**PINGPONG, "stages": 6},
                                 {**PINGPONG, "registers": True})):
        module = v._through_host(start, options, tmp_path / f"form{i}")
        torch.manual_seed(7)
        # many tiles a block (the warpgroups' turns), ragged; K = 520 rows encode (TMA),
        # K = 517 do not (the cp.async fill)
        for m, n, k in ((2000, 2056, 520), (999, 1001, 517)):
            a = torch.randn(m, k, device="cuda").bfloat16()
            if name == "cu_mm_bt":
                w = torch.randn(n, k, device="cuda").bfloat16()
                got, want = module.run(a, w).float(), a.float() @ w.float().T
            else:
                b = torch.randn(k, n, device="cuda").bfloat16()
                got, want = module.run(a, b).float(), a.float() @ b.float()
            assert (got - want).abs().max() <= 2e-2 * want.abs().max(), (options, m, n, k)
