"""experts/conv2d: the Triton implicit-GEMM expert matches the reference under the interpreter at
the case's small shapes, compiles for Hopper to tensor-core (wgmma) code with a cp.async
pipeline, and (on a GPU) matches cuDNN at the real shape."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

CASE_DIR = Path(__file__).resolve().parents[1] / "experts" / "conv2d"


def _load(path: Path) -> ModuleType:
    """A fresh module from `path`, so @triton.jit sees the TRITON_INTERPRET set by the test."""
    spec = importlib.util.spec_from_file_location(f"_t_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


CASE = _load(CASE_DIR / "case.py")


@pytest.fixture()
def interpreted(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return _load(CASE_DIR / "conv2d_triton.py")


@pytest.mark.parametrize("variant", sorted(CASE.SMALL_SHAPES))
def test_interpreted_expert_matches_reference_at_small_shapes(interpreted: ModuleType, variant: str) -> None:
    shape = CASE.SMALL_SHAPES[variant]
    for seed in (0, 1):
        x, w = CASE.make_inputs(shape, seed, "cpu")
        out = interpreted.run(x, w)
        ref = CASE.reference(x, w)
        assert out.shape == ref.shape
        assert _rel_err(out, ref) <= CASE.TOLERANCE[shape["dtype"]]


def test_interpreted_expert_accepts_nchw_and_even_tiles(interpreted: ModuleType) -> None:
    # Contiguous NCHW strides (not the fast layout) and a shape that hits the unmasked path.
    shape = {"N": 1, "C": 32, "H": 8, "W": 4, "F": 32, "R": 3, "S": 3, "dtype": "fp16"}
    x, w = CASE.make_inputs(shape, 5, "cpu")
    ref = CASE.reference(x, w)
    assert _rel_err(interpreted.run(x.contiguous(), w.contiguous()), ref) <= CASE.TOLERANCE["fp16"]
    assert _rel_err(interpreted.run(x, w), ref) <= CASE.TOLERANCE["fp16"]


def test_wrong_expert_output_is_caught_by_tolerance(interpreted: ModuleType) -> None:
    # The check above is not vacuous: dropping one filter tap exceeds the tolerance.
    shape = CASE.SMALL_SHAPES["default"]
    x, w = CASE.make_inputs(shape, 0, "cpu")
    w_bad = w.clone()
    w_bad[:, :, 0, 0] = 0
    assert _rel_err(interpreted.run(x, w_bad), CASE.reference(x, w)) > CASE.TOLERANCE["fp16"]


def test_real_shape_takes_the_unmasked_fast_path() -> None:
    triton = pytest.importorskip("triton")
    module = _load(CASE_DIR / "conv2d_triton.py")
    shape = CASE.SHAPES["default"]
    heuristics = module.conv2d_nhwc_kernel.fn
    assert isinstance(heuristics, triton.runtime.autotuner.Heuristics)
    for cfg in module.conv2d_nhwc_kernel.configs:
        args = dict(shape, **cfg.kwargs)
        assert all(bool(rule(args)) for rule in heuristics.values.values()), cfg


# Compiled in a child process: once the interpreter has run in a process, Triton 3.9 keeps its
# patches of triton.language there and a later real compile of the same kernel fails.
_COMPILE_FOR_SM90 = r"""
import importlib.util, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
spec = importlib.util.spec_from_file_location("conv2d_triton", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
jit = module.conv2d_nhwc_kernel.fn.fn
names = jit.arg_names[:8]
signature = {n: ("*fp16" if n.endswith("_ptr") else "i32") for n in names}
constants = {"R": 3, "S": 3, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8,
             "EVEN_C": True, "EVEN_M": True, "EVEN_F": True}
signature.update({n: "constexpr" for n in constants})
aligned = ["x_ptr", "w_ptr", "y_ptr", "C", "F"]  # what the launcher specializes (16-divisible)
attrs = {(jit.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
src = ASTSource(fn=jit, signature=signature, constexprs=constants, attrs=attrs)
kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 3})
sys.stdout.write(kernel.asm["ptx"])
"""


def test_compiles_to_wgmma_with_cp_async_pipeline_for_sm90() -> None:
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", _COMPILE_FOR_SM90, str(CASE_DIR / "conv2d_triton.py")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "wgmma.mma_async" in done.stdout
    assert "cp.async" in done.stdout


@pytest.mark.slow
def test_gate_passes_the_expert_at_the_interpret_tier() -> None:
    import gate

    verdict = gate.check_file(CASE_DIR / "conv2d_triton.py", "conv2d", "interpret", cache=False)
    assert verdict.ok, verdict.reason
    assert verdict.tier == gate.Tier.INTERPRET
    assert verdict.correctness.max_rel_err <= CASE.TOLERANCE["fp16"]


@pytest.mark.gpu
def test_expert_matches_cudnn_at_real_shape() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch.backends.cudnn.allow_tf32 = False  # the exact reference must be true fp32
    module = _load(CASE_DIR / "conv2d_triton.py")
    shape = CASE.SHAPES["default"]
    for seed in (0, 1, 2):
        x, w = CASE.make_inputs(shape, seed, "cuda")
        exact = F.conv2d(x.float(), w.float(), padding=1)
        out = module.run(x, w)
        assert out.shape == exact.shape
        assert _rel_err(out, exact) <= CASE.TOLERANCE["fp16"]


def test_interpreter_runs_the_best_config_over_several_tiles(interpreted: ModuleType) -> None:
    # The interpreter must run the config a pinned kernel runs on the device (the first,
    # best-measured one), on small shapes that still give >= 2 tiles in M and in F.
    kernel = interpreted.conv2d_nhwc_kernel
    first = kernel.configs[0]
    assert (first.kwargs["BLOCK_M"], first.kwargs["BLOCK_N"], first.kwargs["BLOCK_K"],
            first.num_warps, first.num_stages) == (64, 128, 64, 4, 3)
    for shape in CASE.SMALL_SHAPES.values():
        interpreted.run(*CASE.make_inputs(shape, 0, "cpu"))
        assert kernel.best_config.kwargs == first.kwargs
        assert shape["N"] * shape["H"] * shape["W"] > first.kwargs["BLOCK_M"]
        assert shape["F"] > first.kwargs["BLOCK_N"]
    assert any(s["C"] % first.kwargs["BLOCK_K"] == 0 and s["F"] % first.kwargs["BLOCK_N"] == 0
               for s in CASE.SMALL_SHAPES.values())
