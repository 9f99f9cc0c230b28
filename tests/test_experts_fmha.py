"""The fmha expert: Triton flash attention at the interpret tier (CPU) against SDPA's math path,
and at the real shapes on a GPU against SDPA's flash back-end (`-m gpu`)."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch

from experts.fmha import case

FMHA_DIR = Path(__file__).resolve().parents[1] / "experts" / "fmha"


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref.float()).norm() / ref.float().norm())


@pytest.fixture()
def interpreted_triton(monkeypatch: pytest.MonkeyPatch):
    """fmha_triton imported with the Triton interpreter on (it reads TRITON_INTERPRET at import)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    import experts.fmha.fmha_triton as module

    module = importlib.reload(module)
    yield module
    monkeypatch.delenv("TRITON_INTERPRET")
    importlib.reload(module)


def test_case_declares_the_expert_and_both_variants() -> None:
    assert case.EXPERTS == [("fmha_triton.py", "triton")]
    assert (FMHA_DIR / "fmha_triton.py").is_file()
    assert {v["causal"] for v in case.SHAPES.values()} == {True, False}
    assert case.flops(case.SHAPES["causal"]) * 2 == case.flops(case.SHAPES["noncausal"])


def test_bench_shapes_are_the_papers_table_2_workload_and_gates_keep_theirs() -> None:
    paper = {"B": 8, "H": 64, "S": 2048, "D": 128, "dtype": "fp16"}
    assert {v["causal"] for v in case.BENCH_SHAPES.values()} == {True, False}
    for shape in case.BENCH_SHAPES.values():
        assert {k: shape[k] for k in paper} == paper
    assert all(shape["H"] == 16 for shape in case.SHAPES.values())
    assert not set(case.BENCH_SHAPES) & set(case.SHAPES)
    # 268 MB per fp16 tensor: q, k, v and o of one call stay near 1 GB.
    assert case.bytes_moved(case.BENCH_SHAPES["paper-noncausal"]) == 4 * 8 * 64 * 2048 * 128 * 2


@pytest.mark.parametrize("shape", [
    *case.SMALL_SHAPES.values(),
    {"B": 2, "H": 1, "S": 256, "D": 32, "causal": True, "dtype": "fp16"},  # whole tiles only
    {"B": 1, "H": 3, "S": 37, "D": 64, "causal": False, "dtype": "fp32"},  # one partial tile
    # The gate's and the paper's head dim (128), scaled down in batch, heads and sequence.
    {"B": 1, "H": 2, "S": 256, "D": 128, "causal": False, "dtype": "fp16"},
    {"B": 1, "H": 2, "S": 300, "D": 128, "causal": True, "dtype": "fp16"},
])
@pytest.mark.parametrize("seed", [0, 1])
def test_triton_matches_reference_in_the_interpreter(interpreted_triton, shape: dict,
                                                     seed: int) -> None:
    q, k, v, causal = case.make_inputs(shape, seed=seed, device="cpu")
    out = interpreted_triton.run(q, k, v, causal)
    ref = case.reference(q, k, v, causal)
    assert out.shape == ref.shape and out.dtype == q.dtype
    assert _rel_err(out, ref) <= case.TOLERANCE[shape["dtype"]]


def test_causal_flag_changes_the_result(interpreted_triton) -> None:
    q, k, v, _ = case.make_inputs(case.SMALL_SHAPES["causal"], seed=3, device="cpu")
    causal = interpreted_triton.run(q, k, v, True)
    full = interpreted_triton.run(q, k, v, False)
    # The first query sees only the first key under the causal mask.
    assert torch.allclose(causal[:, :, 0].float(), v[:, :, 0].float(), atol=1e-3)
    assert _rel_err(causal, full) > 0.1


def test_triton_rejects_unsupported_shapes(interpreted_triton) -> None:
    q = torch.zeros(1, 1, 8, 48)
    with pytest.raises(ValueError):
        interpreted_triton.run(q, q, q, False)
    with pytest.raises(ValueError):
        interpreted_triton.run(torch.zeros(1, 1, 8, 32), torch.zeros(1, 1, 9, 32),
                               torch.zeros(1, 1, 9, 32), False)


def test_interpreter_runs_the_best_measured_config_only(interpreted_triton) -> None:
    # bench/results/fmha.md: 128 x 128 / 8 warps / 3 stages is the fastest over both variants.
    configs = interpreted_triton._attn_fwd.configs
    assert len(configs) == 8
    assert configs[0].kwargs == {"BLOCK_M": 128, "BLOCK_N": 128}
    assert (configs[0].num_warps, configs[0].num_stages) == (8, 3)
    assert interpreted_triton._prune(configs, {}) == configs[:1]


def test_small_shapes_exercise_several_tiles_per_variant() -> None:
    # Two query blocks and two key-loop iterations of the first (128-row) config at least.
    for shape in case.SMALL_SHAPES.values():
        assert shape["S"] > 2 * 128 if shape["causal"] else shape["S"] >= 2 * 128
        assert shape["B"] * shape["H"] >= 2
    assert case.SMALL_SHAPES["noncausal"]["S"] % 128 == 0  # EVEN_N, as at the real shapes


def test_triton_expert_constructs_are_visible() -> None:
    text = (FMHA_DIR / "fmha_triton.py").read_text()
    for construct in ("@triton.autotune", "@triton.heuristics", "EVEN_N", "num_stages=",
                      "BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr", "tl.dot(", "exp2",
                      "1.4426950408889634", "TensorDescriptor", "early_config_prune"):
        assert construct in text, construct


@pytest.mark.slow
def test_triton_through_the_gate_interpret_tier() -> None:
    import gate
    # cache=False: a verdict cached by an older gate must not stand in for this run.
    verdict = gate.check_file(FMHA_DIR / "fmha_triton.py", gate.load_case("fmha"),
                              tier=gate.Tier.INTERPRET, cache=False)
    assert verdict.ok, verdict.reason


@pytest.mark.gpu
@pytest.mark.parametrize("variant", sorted(case.SHAPES))
def test_triton_matches_flash_sdpa_on_gpu(variant: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from experts.fmha import fmha_triton

    shape = case.SHAPES[variant]
    inputs = case.make_inputs(shape, seed=0, device="cuda")
    out = fmha_triton.run(*inputs)
    assert _rel_err(out, case.reference(*inputs)) <= case.TOLERANCE[shape["dtype"]]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", sorted(case.BENCH_SHAPES))
def test_triton_times_the_paper_shape_against_flash_sdpa_through_the_gate(variant: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import gate

    view = gate.load_case("fmha").with_variants([variant])
    verdict = gate.check_file(FMHA_DIR / "fmha_triton.py", view, tier=gate.Tier.DEVICE, cache=False)
    assert verdict.ok, verdict.reason
    assert verdict.timing is not None
    assert [v.variant for v in verdict.timing.variants] == [variant]
    assert verdict.timing.candidate_ms > 0 and verdict.timing.reference_ms > 0
    assert not any("flash back-end" in f for f in verdict.flags), verdict.flags


@pytest.mark.gpu
def test_reference_without_the_flash_back_end_falls_back_with_a_warning() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    # Flash attention takes fp16/bf16 only: fp32 is computed by SDPA's own choice, once warned.
    shape = {"B": 1, "H": 2, "S": 256, "D": 64, "causal": True, "dtype": "fp32"}
    inputs = case.make_inputs(shape, seed=0, device="cuda")
    with pytest.warns(UserWarning, match="flash back-end of SDPA is unavailable"):
        out = case.reference(*inputs)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = case.reference(*inputs)  # decided once: no second try, no second warning
    cpu = case.reference(*(t.cpu() if isinstance(t, torch.Tensor) else t for t in inputs))
    assert _rel_err(out.cpu(), cpu) <= case.TOLERANCE["fp32"] * 10
    assert torch.equal(out, again)
