"""experts/topk: the case's comparison rule accepts exactly the right answers; the Triton
radix-select expert matches torch.topk under the interpreter (ties included); the CUDA expert
compiles with NVRTC for sm_90a to the intended instructions; on a GPU both experts match
torch.topk at the real shape."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
CASE_DIR = ROOT / "experts" / "topk"


def _load(path: Path) -> ModuleType:
    """A fresh module from `path`, so @triton.jit sees the TRITON_INTERPRET set by the test."""
    spec = importlib.util.spec_from_file_location(f"_t_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASE = _load(CASE_DIR / "case.py")
TOL = CASE.TOLERANCE["fp32"]


def _small(variant: str, seed: int) -> tuple:
    return CASE.make_inputs(CASE.SMALL_SHAPES[variant], seed, "cpu")


# ---- the comparison rule -------------------------------------------------------------------

def test_compare_accepts_reference_and_other_tie_orders() -> None:
    inputs = _small("ties", 0)
    ref = CASE.reference(*inputs)
    assert CASE.compare(ref, ref, inputs) == 0.0
    x, k = inputs
    # Another correct answer: among equal values, take positions in reverse order.
    order = torch.argsort(x.double() - torch.arange(x.shape[1]) * 1e-6, dim=-1, descending=True)[:, :k]
    other = (x.gather(-1, order), order)
    assert not torch.equal(other[1], ref[1])
    assert CASE.compare(other, ref, inputs) <= TOL


@pytest.mark.parametrize("defect", ["reversed", "int32", "repeated", "out_of_range", "one_value_off", "nan"])
def test_compare_rejects_wrong_answers(defect: str) -> None:
    inputs = _small("default", 0)
    values, indices = CASE.reference(*inputs)
    values, indices = values.clone(), indices.clone()
    if defect == "reversed":
        values, indices = values.flip(-1), indices.flip(-1)
    elif defect == "int32":
        indices = indices.int()
    elif defect == "repeated":
        indices[:, 1] = indices[:, 0]
        values[:, 1] = values[:, 0]
    elif defect == "out_of_range":
        indices[0, 0] = inputs[0].shape[1]
    elif defect == "one_value_off":
        values[0, -1] = values[0, -1] - 1.0
    elif defect == "nan":
        values[0, 0] = float("nan")
    assert not CASE.compare((values, indices), CASE.reference(*inputs), inputs) <= TOL


# ---- the Triton expert under the interpreter -------------------------------------------------

@pytest.fixture()
def interpreted(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return _load(CASE_DIR / "topk_triton.py")


@pytest.mark.parametrize("variant", sorted(CASE.SMALL_SHAPES))
def test_interpreted_triton_expert_matches_torch_topk(interpreted: ModuleType, variant: str) -> None:
    for seed in (0, 1):
        inputs = _small(variant, seed)
        out = interpreted.run(*inputs)
        assert out[1].dtype == torch.int64
        assert CASE.compare(out, CASE.reference(*inputs), inputs) <= TOL


@pytest.mark.parametrize("bits,early_exit", [(4, True), (4, False), (8, False)])
def test_interpreted_triton_expert_every_tuning_choice(interpreted: ModuleType, bits: int, early_exit: bool) -> None:
    # The interpret tier keeps one config; the device tier may pick any other, so each code
    # path (radix width, the early-exit while loop or all passes unrolled) is checked here.
    triton = pytest.importorskip("triton")
    kernel = interpreted.topk_radix_kernel
    kernel.early_config_prune = lambda configs, named_args, **kw: [
        triton.Config({"RADIX_BITS": bits, "EARLY_EXIT": early_exit}, num_warps=4)]
    for variant in sorted(CASE.SMALL_SHAPES):
        inputs = _small(variant, 3)
        assert CASE.compare(interpreted.run(*inputs), CASE.reference(*inputs), inputs) <= TOL
    assert kernel.best_config.kwargs == {"RADIX_BITS": bits, "EARLY_EXIT": early_exit}


def test_interpreter_runs_the_best_measured_config(interpreted: ModuleType) -> None:
    # Unpatched, the interpreter tries only the first config: the one measured fastest on the
    # device (bench/results/topk.md), which a pinned (de-autotuned) kernel would run there.
    kernel = interpreted.topk_radix_kernel
    first = kernel.configs[0]
    assert first.kwargs == {"RADIX_BITS": 4, "EARLY_EXIT": True} and first.num_warps == 16
    inputs = _small("default", 0)
    assert CASE.compare(interpreted.run(*inputs), CASE.reference(*inputs), inputs) <= TOL
    assert kernel.best_config is first


@pytest.mark.parametrize("length,k", [(5, 1), (64, 64), (1000, 3)])
def test_interpreted_triton_expert_edge_sizes(interpreted: ModuleType, length: int, k: int) -> None:
    inputs = CASE.make_inputs({"B": 2, "L": length, "K": k, "dtype": "fp32"}, 7, "cpu")
    x = inputs[0]
    x[0, : length // 2] = -x[0, : length // 2].abs() - 1.0  # negative keys on both sides
    assert CASE.compare(interpreted.run(*inputs), CASE.reference(*inputs), inputs) <= TOL


def test_triton_expert_rejects_rows_too_long_for_the_packed_scan(interpreted: ModuleType) -> None:
    with pytest.raises(ValueError):
        interpreted.run(torch.zeros(1, 65536), 4)


# ---- the CUDA expert, statically --------------------------------------------------------------

def _cuda_host() -> ModuleType:
    pytest.importorskip("cuda.bindings.nvrtc")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return _load(CASE_DIR / "topk_cuda.py")


def test_cuda_expert_compiles_for_sm90a_to_vector_loads_shared_histograms_and_no_spills() -> None:
    host = _cuda_host()
    shape = CASE.SHAPES["default"]
    for threads in (256, 512):
        compiled = host.compile_for(shape["L"], shape["K"], threads, arch="sm_90a")
        assert compiled.cubin is not None
        ptx = compiled.ptx
        assert re.search(r"ld\.global\.nc\.v4\.f32", ptx), "128-bit row loads"
        assert "atom.shared.add" in ptx, "shared-memory histogram"
        assert "shfl.sync" in ptx, "warp-shuffle scans"
        assert ".maxntid " + str(threads) in ptx, "__launch_bounds__"
        res = compiled.resources()["topk_radix_select"]
        assert res["spill_stores"] == 0 and res["stack_bytes"] == 0, res


def test_cuda_expert_compiles_scalar_path_for_odd_lengths() -> None:
    host = _cuda_host()
    small = CASE.SMALL_SHAPES["default"]
    compiled = host.compile_for(small["L"], small["K"], 256, vec=False, arch="sm_90a")
    assert "ld.global.nc.v4" not in compiled.ptx
    assert host.defines(small["L"], small["K"], 256, False)["TOPK_KPOW2"] == 64


def test_cuda_expert_switches_change_the_code_and_unknown_ones_are_refused() -> None:
    host = _cuda_host()
    shape = CASE.SHAPES["default"]
    plain = host.compile_for(shape["L"], shape["K"], 512, arch="sm_90a")
    aggregated = host.compile_for(shape["L"], shape["K"], 512, arch="sm_90a", aggregate=True)
    assert "match.any.sync" not in plain.ptx and "match.any.sync" in aggregated.ptx
    assert "bar.warp.sync" in plain.ptx
    assert "bar.warp.sync" not in host.compile_for(shape["L"], shape["K"], 512, arch="sm_90a", warp_sync=False).ptx
    with pytest.raises(ValueError):
        host.defines(shape["L"], shape["K"], 512, True, unrolled=True)


# ---- through the gate -------------------------------------------------------------------------

@pytest.mark.slow
def test_gate_passes_the_triton_expert_at_the_interpret_tier() -> None:
    import gate

    verdict = gate.check_file(CASE_DIR / "topk_triton.py", "topk", "interpret", cache=False)
    assert verdict.ok, verdict.reason
    assert verdict.tier == gate.Tier.INTERPRET
    assert verdict.correctness.max_rel_err == 0.0  # selection is exact


def test_gate_passes_the_cuda_expert_at_the_static_tier() -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    import gate

    verdict = gate.check_file(CASE_DIR / "topk_cuda.cu", "topk", "static", cache=False)
    assert verdict.ok, verdict.reason
    assert verdict.tier == gate.Tier.STATIC
    assert not verdict.facts.spills


# ---- on a GPU ----------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("expert", ["topk_triton.py", "topk_cuda.py"])
def test_experts_match_torch_topk_at_real_shape(expert: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    module = _load(CASE_DIR / expert)
    shapes = [CASE.SHAPES["default"], dict(CASE.SHAPES["default"], distinct=8),
              {"B": 5, "L": 1001, "K": 100, "dtype": "fp32"}]
    for seed, shape in enumerate(shapes):
        inputs = CASE.make_inputs(shape, seed, "cuda")
        assert CASE.compare(module.run(*inputs), CASE.reference(*inputs), inputs) <= TOL
