"""The passes that walk the fmha expert back to a naive kernel: every step edits code that
runs, the comments a de-optimization makes untrue go with it (and come back byte for byte on
the forward step), and tensor-descriptor restores stay on the tensor they were recorded for."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kir
from passes import Applied, PassContext, Skipped, get_pass
from passes.base import Pass, Site
from passes.roundtrip import deoptimize_all
from passes.triton._py import PyModule
from passes.triton.launch import holders

ROOT = Path(__file__).resolve().parents[1]
FMHA = ROOT / "experts" / "fmha" / "fmha_triton.py"
GEMM = ROOT / "experts" / "gemm" / "gemm_triton.py"
CTX = PassContext(facts={"arch": "sm_90", "dtype": "fp16"})
LAUNCH_PASSES = ("tile-sizes", "num-warps", "software-pipelining")


def _present(ir: kir.KernelIR, name: str) -> list[Site]:
    return [s for s in get_pass(name)().sites(ir) if s.present]


def _deopt_first(ir: kir.KernelIR, name: str) -> Applied:
    p = get_pass(name)()
    result = p.deoptimize(ir, _present(ir, name)[0], CTX)
    assert isinstance(result, Applied), result
    return result


def _forward(name: str, back: Applied, pick: str | None = None) -> kir.KernelIR:
    """The forward re-derivation with the recorded options at the (first matching) site."""
    p: Pass = get_pass(name).from_options(back.options)
    sites = [s for s in p.sites(back.ir) if not s.present
             and (pick is None or pick in repr(s.detail))]
    result = p.optimize(back.ir, sites[0], CTX)
    assert isinstance(result, Applied), result
    return result.ir


@pytest.fixture(scope="module")
def fmha() -> kir.KernelIR:
    return kir.parse_file(FMHA)


@pytest.fixture(scope="module")
def pinned(fmha: kir.KernelIR) -> Applied:
    """The fmha expert with its autotune list pinned to the first config."""
    return _deopt_first(fmha, "autotune")


def test_configs_a_pin_cuts_off_offer_no_sites(fmha: kir.KernelIR, pinned: Applied) -> None:
    # before the pin every config is tuned on the device: each carries sites
    before = {s.anchor for n in LAUNCH_PASSES for s in _present(fmha, n)}
    assert "triton:_attn_fwd/call:triton.Config[7]" in before
    assert pinned.options["pinned"] == "slice" and "][:1], key=" in pinned.ir.text
    # after it only the first config runs, on any tier: the others are not worth a step
    after = {(n, s.anchor) for n in LAUNCH_PASSES for s in _present(pinned.ir, n)}
    assert {a for _, a in after} == {"triton:_attn_fwd/call:triton.Config[0]"}
    assert {n for n, _ in after} == set(LAUNCH_PASSES)


def test_holders_keep_what_a_slice_keeps() -> None:
    text = ("import triton\nA = [triton.Config({'BLOCK': 1}), triton.Config({'BLOCK': 2}),\n"
            "     triton.Config({'BLOCK': 3})][:2]\nB = [triton.Config({'BLOCK': 4})]\n")
    mod = PyModule(kir.parse(text, language="triton"))
    kept = [ast.literal_eval(h.call.args[0]) for h in holders(mod)]
    assert kept == [{"BLOCK": 1}, {"BLOCK": 2}, {"BLOCK": 4}]


def test_fmha_deoptimizes_to_a_naive_kernel_with_one_step_per_running_value(
        fmha: kir.KernelIR) -> None:
    root, steps = deoptimize_all(fmha, CTX)
    launch_steps = [(n, a) for n, a in steps if n in LAUNCH_PASSES]
    assert {a for _, a in launch_steps} == {"triton:_attn_fwd/call:triton.Config[0]"}
    # 128 -> 64 -> 32 -> 16 for each of BLOCK_M and BLOCK_N, one num_stages, one num_warps
    assert sorted(n for n, _ in launch_steps) == (["num-warps", "software-pipelining"]
                                                  + ["tile-sizes"] * 6)
    assert [n for n, _ in steps].count("autotune") == 1
    for name in ("autotune", "tensor-core-dot", "software-pipelining", "tile-sizes", "num-warps"):
        assert not _present(root, name), name
    first = root.text.split("triton.Config(", 2)[1].split("\n")[0]
    assert first.startswith('{"BLOCK_M": 16, "BLOCK_N": 16}, num_stages=1'), first


def test_autotune_pin_takes_the_comment_on_the_tuned_list_and_gives_it_back(
        fmha: kir.KernelIR, pinned: Applied) -> None:
    assert "# Measured on an H200" in fmha.text
    assert "# Measured on an H200" not in pinned.ir.text
    assert pinned.options["comment"].startswith("# Measured on an H200")
    assert _forward("autotune", pinned).text == fmha.text


def test_causal_skip_removal_drops_the_stage_comments(fmha: kir.KernelIR) -> None:
    back = _deopt_first(fmha, "causal-block-skip")
    assert "# Stage 1" not in back.ir.text and "# Stage 2" not in back.ir.text
    assert "0, seq_len, seq_len,\n" in back.ir.text
    assert _forward("causal-block-skip", back, pick="'_attn_fwd'}").text == fmha.text


@pytest.fixture(scope="module")
def gemm_steps() -> list[tuple[kir.KernelIR, Applied]]:
    """(state, its tma de-optimization) for the gemm expert's three descriptors in turn."""
    ir, out = kir.parse_file(GEMM), []
    for _ in range(3):
        back = _deopt_first(ir, "tma-descriptors")
        out.append((ir, back))
        ir = back.ir
    return out


def test_tma_removing_the_last_descriptor_takes_their_comment(
        gemm_steps: list[tuple[kir.KernelIR, Applied]]) -> None:
    note = "# Tensor descriptors: the TMA engine"
    (_, first), (_, second), (_, last) = gemm_steps
    assert note in first.ir.text and note in second.ir.text  # others still follow it
    assert note not in last.ir.text and "make_tensor_descriptor" not in last.ir.text
    assert "NUM_SMS: tl.constexpr,\n):\n    start_pid = " in last.ir.text
    for state, back in gemm_steps:
        base = back.options["decl"].split("make_tensor_descriptor(")[1].split(",")[0]
        assert _forward("tma-descriptors", back, pick=f"'base': '{base}'").text == state.text


def test_tma_restore_refuses_a_descriptor_recorded_for_another_tensor(
        gemm_steps: list[tuple[kir.KernelIR, Applied]]) -> None:
    (_, over_a), (_, over_b), _ = gemm_steps
    state = over_b.ir  # a_ptr and b_ptr are both read through pointers here
    p = get_pass("tma-descriptors").from_options(over_a.options)
    sites = {s.detail["base"]: s for s in p.sites(state) if not s.present}
    refused = p.optimize(state, sites["b_ptr"], CTX)
    assert isinstance(refused, Skipped), refused
    assert refused.facts == {"recorded_base": "a_ptr", "base": "b_ptr"}
    assert "b_desc" not in refused.reason and "a_ptr" in refused.reason
    assert isinstance(p.optimize(state, sites["a_ptr"], CTX), Applied)
