"""Attention kernels written in styles the expert's lineage never saw keep the steps it learnt:
the launch grid's literal is told to be the query tile's block count (the key tile tiles the
same sequence but scales no program id), so the plain sweep tunes both tiles. Each rewrite is
checked against torch under the Triton interpreter at small shapes."""
from __future__ import annotations

from pathlib import Path

import pytest

import kir

from lineage.control import autotune_control

# Causal grouped-query attention in torch: the gate's reference at the interpreter's shapes.
PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        group = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        n = q.shape[2]
        future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        return torch.softmax(s.masked_fill(future, float("-inf")), -1) @ v


def get_inputs():
    return [torch.randn(1, 4, 80, 32), torch.randn(1, 2, 80, 32), torch.randn(1, 2, 80, 32)]


def get_init_inputs():
    return []
'''

# The same operator restyled: heads on grid axis 1 and batch on axis 2, the key tile loaded
# transposed by its pointers, the causal mask as an additive bias computed from the key index,
# the running sum rescaled before the maximum is stored, exp written as exp2 of a scaled
# argument, and one literal 16 for both tiles in the launch and the grid.
START = '''import torch
import triton
import triton.language as tl


@triton.jit
def grouped_causal(Qp, Kp, Vp, Op, scale, n_ctx, n_heads, kv_heads,
                   s_qb, s_qh, s_kb, s_kh, s_ob, s_oh,
                   HD: tl.constexpr, TQ: tl.constexpr, TK: tl.constexpr):
    blk = tl.program_id(0)
    head = tl.program_id(1)
    bat = tl.program_id(2)
    kvh = head // (n_heads // kv_heads)
    qi = blk * TQ + tl.arange(0, TQ)
    di = tl.arange(0, HD)
    qt = tl.load(Qp + bat * s_qb + head * s_qh + qi[:, None] * HD + di[None, :],
                 mask=qi[:, None] < n_ctx, other=0.0)
    run_max = tl.zeros([TQ], tl.float32) - 1.0e30
    run_sum = tl.zeros([TQ], tl.float32)
    out = tl.zeros([TQ, HD], tl.float32)
    for lo in range(0, n_ctx, TK):
        ki = lo + tl.arange(0, TK)
        kt = tl.load(Kp + bat * s_kb + kvh * s_kh + ki[None, :] * HD + di[:, None],
                     mask=ki[None, :] < n_ctx, other=0.0)
        logits = tl.dot(qt, kt) * scale
        logits += tl.where((ki[None, :] > qi[:, None]) | (ki[None, :] >= n_ctx), -1.0e30, 0.0)
        top = tl.maximum(run_max, tl.max(logits, 1))
        shrink = tl.math.exp2((run_max - top) * 1.4426950408889634)
        w = tl.math.exp2((logits - top[:, None]) * 1.4426950408889634)
        run_sum = run_sum * shrink + tl.sum(w, 1)
        vt = tl.load(Vp + bat * s_kb + kvh * s_kh + ki[:, None] * HD + di[None, :],
                     mask=ki[:, None] < n_ctx, other=0.0)
        out = out * shrink[:, None] + tl.dot(w.to(vt.dtype), vt)
        run_max = top
    tl.store(Op + bat * s_ob + head * s_oh + qi[:, None] * HD + di[None, :],
             out / run_sum[:, None], mask=qi[:, None] < n_ctx)


def run(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    nb, hq, n, hd = q.shape
    o = torch.empty_like(q)
    grouped_causal[(triton.cdiv(n, 16), hq, nb)](
        q, k, v, o, hd ** -0.5, n, hq, k.shape[1],
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), o.stride(0), o.stride(1),
        HD=hd, TQ=16, TK=16)
    return o
'''


def _gate(tmp_path: Path, text: str) -> None:
    import gate

    problem = tmp_path / "grouped_causal_attention.py"
    problem.write_text(PROBLEM)
    kernel = tmp_path / "kernel.py"
    kernel.write_text(text)
    verdict = gate.check_file(kernel, gate.load_case(problem), "interpret", cache=False)
    assert verdict.ok, verdict.reason


def test_the_grid_literal_goes_to_the_query_tile_and_both_tiles_are_swept(tmp_path: Path) -> None:
    out = autotune_control(START)
    launch = next(line for line in out.splitlines() if "grouped_causal[" in line)
    # the grid counts query blocks: it follows TQ; TK, which steps the key loop, is swept too
    assert 'triton.cdiv(n, meta["TQ"])' in launch, launch
    assert "TQ=" not in out and "TK=" not in out.split("def run")[1]
    assert '"TQ": 128, "TK": 64' in out, out[:600]
    _gate(tmp_path, out)


# The host of the same kernel binds the tiles to names first (`tq, tk = 16, 16`) and writes
# Triton's default warps out: the fmha lineage's tile and warp steps have their sites there.
HOST_NAMES = START.split("def run")[0] + '''def run(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    nb, hq, n, hd = q.shape
    o = torch.empty_like(q)
    tq, tk = 16, 16
    grouped_causal[(triton.cdiv(n, tq), hq, nb)](
        q, k, v, o, hd ** -0.5, n, hq, k.shape[1],
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), o.stride(0), o.stride(1),
        HD=hd, TQ=tq, TK=tk, num_warps=4)
    return o
'''


@pytest.mark.parametrize("tile", ["TQ", "TK"])
def test_a_tile_passed_from_a_host_name_is_resized_where_the_name_is_bound(
        tmp_path: Path, tile: str) -> None:
    from passes import Applied, get_pass

    ir = kir.parse(HOST_NAMES, "triton")
    rule = get_pass("tile-sizes").from_options({"value": 32, "tile": tile})
    site = next(s for s in rule.sites(ir) if not s.present and s.detail["tile"] == tile)
    made = rule.optimize(ir, site)
    assert isinstance(made, Applied), made
    after = made.ir.unparse()
    # one literal changes; the grid, which divides by tq, follows it
    assert ("tq, tk = 32, 16" if tile == "TQ" else "tq, tk = 16, 32") in after
    assert after.replace("32, 16", "16, 16").replace("16, 32", "16, 16") == HOST_NAMES
    _gate(tmp_path, after)


def test_a_host_name_the_grid_does_not_follow_is_refused_with_its_reason() -> None:
    from passes import Skipped, get_pass

    text = HOST_NAMES.replace("triton.cdiv(n, tq)", "triton.cdiv(n, 16)")
    ir = kir.parse(text, "triton")
    rule = get_pass("tile-sizes")()
    site = next(s for s in rule.sites(ir) if not s.present and s.detail["tile"] == "TQ")
    made = rule.optimize(ir, site)
    assert isinstance(made, Skipped) and "launch grid does not derive from TQ" in made.reason


def test_one_literal_bound_to_two_tile_names_is_no_site() -> None:
    from passes import get_pass

    text = HOST_NAMES.replace("tq, tk = 16, 16", "tq = tk = 16")
    sites = get_pass("tile-sizes")().sites(kir.parse(text, "triton"))
    assert not sites  # resizing the literal would resize both tiles: neither step is that


def test_default_warps_written_out_are_a_site_of_the_warp_step(tmp_path: Path) -> None:
    from passes import Applied, get_pass

    ir = kir.parse(HOST_NAMES, "triton")
    rule = get_pass("num-warps").from_options({"value": 8})
    [site] = rule.sites(ir)
    assert not site.present  # the kernel does not have the step: 4 is what Triton picks anyway
    made = rule.optimize(ir, site)
    assert isinstance(made, Applied), made
    after = made.ir.unparse()
    assert after == HOST_NAMES.replace("num_warps=4)", "num_warps=8)")
    _gate(tmp_path, after)
    # a value already chosen is left alone
    chosen = kir.parse(HOST_NAMES.replace("num_warps=4", "num_warps=2"), "triton")
    assert all(s.present for s in rule.sites(chosen))


@pytest.mark.parametrize("binding", ["tq, tk = 16, 16", "tq = tk = 16"])
def test_autotuning_pins_the_tiles_a_host_name_passes(tmp_path: Path, binding: str) -> None:
    from passes import Applied, get_pass

    text = HOST_NAMES.replace("tq, tk = 16, 16", binding)
    ir = kir.parse(text, "triton")
    rule = get_pass("autotune")()
    [site] = [s for s in rule.sites(ir) if not s.present]
    made = rule.optimize(ir, site)
    assert isinstance(made, Applied), made
    after = made.ir.unparse()
    assert 'triton.Config({"TQ": 16, "TK": 16}, num_warps=4' in after
    assert 'grouped_causal[lambda meta: (triton.cdiv(n, meta["TQ"]), hq, nb)]' in after
    assert "TQ=tq" not in after and "TK=tk" not in after
    _gate(tmp_path, after)


def test_a_key_loop_over_tl_range_without_a_depth_is_a_pipelining_site(tmp_path: Path) -> None:
    from passes import Applied, get_pass

    text = START.replace("for lo in range(0, n_ctx, TK):", "for lo in tl.range(0, n_ctx, TK):")
    ir = kir.parse(text, "triton")
    rule = get_pass("software-pipelining").from_options({"stages": 3})
    [site] = [s for s in rule.sites(ir) if s.detail.get("loop") == "lo"]
    made = rule.optimize(ir, site)
    assert isinstance(made, Applied), made
    after = made.ir.unparse()
    assert after == text.replace("tl.range(0, n_ctx, TK)", "tl.range(0, n_ctx, TK, num_stages=3)")
    _gate(tmp_path, after)
    # a depth already written (by keyword or position) is the other kind of site
    for written in ("tl.range(0, n_ctx, TK, num_stages=2)", "tl.range(0, n_ctx, TK, 2)"):
        other = kir.parse(text.replace("tl.range(0, n_ctx, TK)", written), "triton")
        assert not any(s.detail.get("loop") == "lo" for s in rule.sites(other))


def test_bench_card_sites_names_the_site_or_the_reason_of_each_fmha_card(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util
    import json

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("_card_sites", root / "bench" / "card_sites.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    kernel = tmp_path / "restyled.py"
    kernel.write_text(HOST_NAMES)
    assert tool.main([str(kernel), "--case", "fmha", "--json"]) == 0
    rows = {r["pass"]: r for r in json.loads(capsys.readouterr().out)[str(kernel)]}
    # the shipped library's fmha cards: each step the restyled kernel has a site for is found
    for found in ("tile-sizes", "autotune", "causal-block-skip"):
        assert rows[found]["site"], rows[found]
    # the kernel has tl.dot, and exp2 with log2(e) in its argument: neither step is left
    for absent in ("tensor-core-dot", "exp2-fold"):
        assert rows[absent]["refusals"] == [f"no site for {absent}"], rows[absent]
    assert tool.main([str(tmp_path / "absent.py")]) == 2
