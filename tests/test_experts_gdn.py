"""The gdn case and expert: the PyTorch chunked reference against the token-by-token
recurrence, the Triton expert at the interpret tier (CPU), and at the real shape on a GPU
against flash-linear-attention when installed (`-m gpu`)."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch

from experts.gdn import case

GDN_DIR = Path(__file__).resolve().parents[1] / "experts" / "gdn"


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


@pytest.fixture()
def interpreted_triton(monkeypatch: pytest.MonkeyPatch):
    """gdn_triton imported with the Triton interpreter on (it reads TRITON_INTERPRET at import)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    import experts.gdn.gdn_triton as module

    module = importlib.reload(module)
    yield module
    monkeypatch.delenv("TRITON_INTERPRET")
    importlib.reload(module)


@pytest.mark.parametrize("shape", [
    case.SMALL_SHAPES["default"],
    {"B": 2, "T": 64, "H": 1, "HV": 3, "K": 16, "V": 32, "dtype": "fp32"},
    {"B": 1, "T": 150, "H": 2, "HV": 2, "K": 32, "V": 16, "dtype": "fp32"},
])
def test_chunked_reference_matches_the_recurrence(shape: dict) -> None:
    inputs = case.make_inputs(shape, seed=0, device="cpu")
    chunked = case.chunked_reference(*inputs)
    assert chunked.shape == inputs[2].shape
    assert _rel_err(chunked, case.recurrent_reference(*inputs)) < 1e-5


def test_recurrence_depends_on_every_input() -> None:
    shape = {"B": 1, "T": 100, "H": 1, "HV": 2, "K": 32, "V": 32, "dtype": "fp32"}
    base = case.make_inputs(shape, seed=0, device="cpu")
    out = case.recurrent_reference(*base)
    for i in range(5):
        changed = list(base)
        changed[i] = case.make_inputs(shape, seed=1, device="cpu")[i]
        assert _rel_err(case.recurrent_reference(*changed), out) > 1e-3, i


def test_value_heads_share_query_key_heads_in_groups() -> None:
    shape = {"B": 1, "T": 20, "H": 2, "HV": 4, "K": 16, "V": 16, "dtype": "fp32"}
    q, k, v, g, beta = case.make_inputs(shape, seed=0, device="cpu")
    out = case.recurrent_reference(q, k, v, g, beta)
    k2 = k.clone()
    k2[:, :, 1] = torch.nn.functional.normalize(torch.randn_like(k2[:, :, 1]), dim=-1)
    out2 = case.recurrent_reference(q, k2, v, g, beta)
    # Value heads 0, 1 read key head 0; heads 2, 3 read key head 1.
    assert torch.equal(out[:, :, :2], out2[:, :, :2])
    assert not torch.allclose(out[:, :, 2:], out2[:, :, 2:])


@pytest.mark.parametrize("shape", [
    case.SMALL_SHAPES["default"],
    {"B": 2, "T": 64, "H": 1, "HV": 3, "K": 16, "V": 32, "dtype": "fp32"},    # whole chunks
    {"B": 1, "T": 130, "H": 2, "HV": 4, "K": 32, "V": 32, "dtype": "fp16"},
])
def test_triton_matches_reference_in_the_interpreter(interpreted_triton, shape: dict) -> None:
    inputs = case.make_inputs(shape, seed=2, device="cpu")
    out = interpreted_triton.run(*inputs)
    ref = case.recurrent_reference(*inputs)
    assert out.shape == ref.shape and out.dtype == inputs[2].dtype
    assert _rel_err(out, ref) <= case.TOLERANCE[shape["dtype"]]


def test_triton_rejects_inputs_outside_the_layout(interpreted_triton) -> None:
    shape = {"B": 1, "T": 8, "H": 2, "HV": 3, "K": 16, "V": 16, "dtype": "fp32"}
    with pytest.raises(ValueError):   # 3 value heads cannot share 2 query/key heads evenly
        interpreted_triton.run(*case.make_inputs(shape, seed=0, device="cpu"))
    q, k, v, g, beta = case.make_inputs(dict(shape, HV=4, K=256), seed=0, device="cpu")
    with pytest.raises(ValueError):
        interpreted_triton.run(q, k, v, g, beta)


def test_interpreter_runs_each_kernels_best_measured_config_only(interpreted_triton) -> None:
    # The winners of bench/results/gdn.md, listed first so a pinned kernel runs them.
    best = {"_gdn_kkt_solve_kernel": ({"BD": 32}, 1, 1), "_gdn_wy_kernel": ({"BD": 128}, 8, 2),
            "_gdn_state_kernel": ({"BV": 64}, 4, 4), "_gdn_output_kernel": ({"BV": 64}, 4, 3)}
    for name, (kwargs, warps, stages) in best.items():
        configs = getattr(interpreted_triton, name).configs
        assert len(configs) >= 4, name
        assert (configs[0].kwargs, configs[0].num_warps, configs[0].num_stages) == (
            kwargs, warps, stages), name
    assert interpreted_triton._prune(configs, {}) == configs[:1]


def test_small_shape_exercises_every_device_path() -> None:
    small, real = case.SMALL_SHAPES["default"], case.SHAPES["default"]
    assert small["T"] > case.CHUNK                      # two chunks: the state carries over
    assert small["K"] == real["K"] and small["V"] >= 2 * 64   # both state halves, two V tiles
    assert small["HV"] > small["H"]                     # value heads share a key head


def test_triton_expert_constructs_are_visible() -> None:
    text = (GDN_DIR / "gdn_triton.py").read_text()
    for construct in ("@triton.autotune", "num_stages=", "BV: tl.constexpr", "BT: tl.constexpr",
                      "tl.dot(", "tl.float32", "_solve_unit_lower", "tl.cumsum", "exp2", "LOG2E"):
        assert construct in text, construct


@pytest.mark.slow
def test_triton_through_the_gate_interpret_tier() -> None:
    import gate
    # cache=False: a verdict cached by an older gate must not stand in for this run.
    verdict = gate.check_file(GDN_DIR / "gdn_triton.py", gate.load_case("gdn"),
                              tier=gate.Tier.INTERPRET, cache=False)
    assert verdict.ok, verdict.reason


@pytest.mark.gpu
def test_triton_matches_reference_on_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from experts.gdn import gdn_triton

    shape = case.SHAPES["default"]
    inputs = case.make_inputs(shape, seed=0, device="cuda")
    out = gdn_triton.run(*inputs)
    assert _rel_err(out, case.chunked_reference(*inputs)) <= case.TOLERANCE[shape["dtype"]]
