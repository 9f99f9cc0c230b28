"""split-k: a dot kernel's K loop split over a new grid axis of SPLIT_K programs, their partial
sums added atomically into a zeroed fp32 workspace the host casts into the output.

Sites: each kernel with one `tl.dot` loop. It applies to a plain tiled GEMM (2-D grid: the
slices on axis 2) and to both kernels of a two-kernel dispatch (a skinny one on a 1-D grid,
slices on axis 1; a clamped one). The rewritten module is right in the interpreter at sizes
where K is no multiple of BK * SPLIT_K, SPLIT_K 1, 2 and 3 launched directly and as the host
picks it; an epilogue that is not linear in the accumulator, a loop that advances its own
pointers, an already split loop are refused with the reason; the search offers the rule
without a card; the rewritten kernel compiles for sm_90 with its atomic adds.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import kir
from passes.base import Applied, PassContext, Skipped
from passes.registry import get_pass
from tests.module_helpers import compiled_for_sm90, load_module

ROOT = Path(__file__).resolve().parent.parent
NAIVE = (ROOT / "bench/heldout/mm1024/mm_naive.py").read_text()
DISPATCH = (ROOT / "bench/styles/nw_mm_dispatch/dispatch_mm.py").read_text()
# autotuned, a tile index loop advancing its pointers, a heuristic, a lambda grid
AUTOTUNED = (ROOT / "tests/data/passes/mm_autotuned.py").read_text()
PASS = get_pass("split-k")()


def _ir(source: str) -> kir.KernelIR:
    return kir.parse(source, "triton")


def _split(source: str, kernel: str) -> Applied | Skipped:
    ir = _ir(source)
    site = next(s for s in PASS.sites(ir) if s.detail["kernel"] == kernel)
    return PASS.optimize(ir, site)


def _split_all(source: str) -> str:
    ir = _ir(source)
    for name in [s.detail["kernel"] for s in PASS.sites(ir)]:
        result = PASS.optimize(ir, next(s for s in PASS.sites(ir) if s.detail["kernel"] == name))
        assert isinstance(result, Applied), (name, result)
        ir = result.ir
    return ir.unparse()


def test_it_splits_a_tiled_gemm_on_the_next_program_axis() -> None:
    out = _split(NAIVE, "matmul_kernel")
    assert isinstance(out, Applied), out
    text = out.ir.unparse()
    assert "BK: tl.constexpr, SPLIT_K: tl.constexpr = 1):" in text
    assert "pid_k = tl.program_id(2)" in text
    assert "for k0 in range((0) + pid_k * (BK), K, (BK) * SPLIT_K):" in text
    assert "if SPLIT_K == 1:\n        tl.store(" in text and "tl.atomic_add(" in text
    assert "matmul_kernel[(*grid, split_k)](a, b, partial," in text


def test_it_splits_both_kernels_of_a_dispatch_with_one_set_of_helpers() -> None:
    text = _split_all(DISPATCH)
    assert "pid_k = tl.program_id(1)" in text and "pid_k_2 = tl.program_id(2)" in text
    assert text.count("@triton.jit") == 3  # the two kernels and one cast kernel
    assert "skinny_mm[(triton.cdiv(N, 64), split_k)]" in text


@pytest.mark.parametrize("split", [1, 2, 3])
def test_the_split_kernel_is_right_at_odd_sizes(tmp_path, split: int) -> None:
    import torch
    import triton

    mod = load_module(_split(NAIVE, "matmul_kernel").ir.unparse(), tmp_path)
    torch.manual_seed(split)
    M, N, K = 37, 45, 90  # 90 = 2 * 32 + 26: three trips of BK 32, one of them partial
    a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
    c = torch.zeros(M, N) if split > 1 else torch.empty(M, N, dtype=torch.float16)
    mod.matmul_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16), split)](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        c.stride(0), c.stride(1), BM=16, BN=16, BK=32, SPLIT_K=split)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize(("source", "m", "n"), [(NAIVE, 20, 24), (NAIVE, 100, 72),
                                                (DISPATCH, 6, 100), (DISPATCH, 40, 24)])
def test_the_host_picks_the_split_and_the_output_is_right(tmp_path, source: str, m: int,
                                                           n: int) -> None:
    import torch

    mod = load_module(_split_all(source), tmp_path)
    torch.manual_seed(m)
    a, b = torch.randn(m, 90).half(), torch.randn(90, n).half()
    assert mod.split_k_for(1, a.device) == 4 and mod.split_k_for(12, a.device) == 1
    torch.testing.assert_close(mod.run(a, b).float(), a.float() @ b.float(), atol=2e-2, rtol=1e-2)


def test_a_non_linear_epilogue_is_refused() -> None:
    relu = NAIVE.replace("c = acc.to(", "c = tl.maximum(acc, 0.0).to(")
    out = _split(relu, "matmul_kernel")
    assert isinstance(out, Skipped) and "not linear" in out.reason
    bias = NAIVE.replace("    c = acc.to(", "    acc += tl.load(b_ptr + rn)[None, :]\n    c = acc.to(")
    out = _split(bias, "matmul_kernel")
    assert isinstance(out, Skipped) and "not linear" in out.reason


def test_a_loop_split_already_or_advancing_a_pointer_by_turns_is_refused() -> None:
    done = _split(NAIVE, "matmul_kernel").ir
    again = PASS.optimize(done, PASS.sites(done)[0])
    assert isinstance(again, Skipped) and "already split" in again.reason
    by_turns = AUTOTUNED.replace("        a_ptrs += BLOCK_K * sak\n",
                                 "        if k % 2 == 0:\n            a_ptrs += BLOCK_K * sak\n")
    out = _split(by_turns, "mm_kernel")
    assert isinstance(out, Skipped) and "carries `a_ptrs`" in out.reason


def test_an_autotuned_kernel_gets_split_configurations_and_a_zeroing_hook() -> None:
    out = _split(AUTOTUNED, "mm_kernel")
    assert isinstance(out, Applied), out
    text = out.ir.unparse()
    splits = [line for line in text.splitlines() if "triton.Config(" in line]
    # each configuration at 1, then copies at 2 and 4 of the one of the fewest tiles (64 x 32)
    assert [line.split('"SPLIT_K": ')[1][0] for line in splits] == ["1", "1", "2", "4"]
    assert all('"BLOCK_M": 64' in line for line in splits[2:])
    assert all("pre_hook=_zero_partial_ptr" in line for line in splits)
    assert "a_ptrs += pid_k * (BLOCK_K * sak)" in text and "a_ptrs += (BLOCK_K * sak) * SPLIT_K" in text
    assert 'meta["SPLIT_K"])' in text and "partial_ptr=partial)" in text
    hooked = AUTOTUNED.replace("num_stages=2)", "num_stages=2, pre_hook=None)")
    out = _split(hooked, "mm_kernel")
    assert isinstance(out, Skipped) and "pre_hook" in out.reason


def test_each_configuration_of_the_autotuned_split_is_right(tmp_path) -> None:
    import torch

    mod = load_module(_split(AUTOTUNED, "mm_kernel").ir.unparse(), tmp_path)
    tuner = mod.mm_kernel
    torch.manual_seed(0)
    a, b = torch.randn(20, 90).half(), torch.randn(90, 24).half()
    for config in list(tuner.configs):  # one configuration: the autotuner runs it untimed
        tuner.configs = [config]
        torch.testing.assert_close(mod.run(a, b).float(), a.float() @ b.float(), atol=2e-2,
                                   rtol=1e-2, msg=str(config))


def test_the_search_does_not_offer_the_rule_on_its_own_after_it_measured_slower() -> None:
    """Measured slower on an H200 where it was meant to pay (its prior is 1.0): the search
    offers it only through a card. The rule itself still takes the kernel."""
    from lineage.moves import rule_offers

    ctx = PassContext.for_case(None, extra={"dtype": "fp16"})
    assert "split-k" not in {card.pass_name for card, _ in rule_offers(_ir(NAIVE), ctx)}
    assert get_pass("split-k")().sites(_ir(NAIVE))


def test_the_split_kernel_compiles_for_sm90_with_its_atomic_adds(tmp_path) -> None:
    text = _split(NAIVE, "matmul_kernel").ir.unparse()
    out = compiled_for_sm90(text, tmp_path, "split", "matmul_kernel",
                            {"BM": 64, "BN": 64, "BK": 32, "SPLIT_K": 2}, pointers="*fp32")
    atomic = re.compile(r"\b(red|atom)\.global")
    assert atomic.search(out["ptx"])
    plain = compiled_for_sm90(text, tmp_path, "plain", "matmul_kernel",
                              {"BM": 64, "BN": 64, "BK": 32, "SPLIT_K": 1}, pointers="*fp32")
    assert not atomic.search(plain["ptx"])  # SPLIT_K 1 stores as before
