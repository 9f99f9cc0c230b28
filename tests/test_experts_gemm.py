"""The gemm experts: Triton at the interpret tier (CPU), CUDA at the static tier (NVRTC, CPU),
both at the real shape on a GPU (`-m gpu`)."""
from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
import torch

from experts.gemm import case

GEMM_DIR = Path(__file__).resolve().parents[1] / "experts" / "gemm"


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref.float()).norm() / ref.float().norm())


@pytest.fixture()
def interpreted_triton(monkeypatch: pytest.MonkeyPatch):
    """gemm_triton imported with the Triton interpreter on (it reads TRITON_INTERPRET at import)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    import experts.gemm.gemm_triton as module

    module = importlib.reload(module)
    yield module
    monkeypatch.delenv("TRITON_INTERPRET")
    importlib.reload(module)


def test_case_declares_both_experts_and_they_exist() -> None:
    assert case.EXPERTS == [("gemm_triton.py", "triton"), ("gemm_cuda.cu", "cuda")]
    for filename, _ in case.EXPERTS:
        assert (GEMM_DIR / filename).is_file()
    assert (GEMM_DIR / "gemm_cuda.py").is_file()


@pytest.mark.parametrize("shape", [
    case.SMALL_SHAPES["default"],
    {"M": 50, "N": 72, "K": 40, "dtype": "fp16"},    # one partial tile in each dimension
    {"M": 33, "N": 64, "K": 96, "dtype": "fp32"},
])
def test_triton_matches_reference_in_the_interpreter(interpreted_triton, shape: dict) -> None:
    a, b = case.make_inputs(shape, seed=0, device="cpu")
    out = interpreted_triton.run(a, b)
    ref = case.reference(a, b)
    assert out.shape == ref.shape and out.dtype == a.dtype
    assert _rel_err(out, ref) <= case.TOLERANCE[shape["dtype"]]


def test_triton_rejects_mismatched_operands(interpreted_triton) -> None:
    with pytest.raises(ValueError):
        interpreted_triton.run(torch.ones(4, 8), torch.ones(4, 8))


def test_triton_rejects_rows_a_tensor_descriptor_cannot_address(interpreted_triton) -> None:
    # N = 70 fp16 elements is 140 bytes per row of B and C: not a multiple of 16.
    a, b = case.make_inputs({"M": 50, "N": 70, "K": 40, "dtype": "fp16"}, seed=0, device="cpu")
    with pytest.raises(ValueError, match="16 bytes"):
        interpreted_triton.run(a, b)


def test_triton_interpreter_runs_the_first_config_only(interpreted_triton) -> None:
    kernel = interpreted_triton.matmul_kernel_tma_persistent
    a, b = case.make_inputs(case.SMALL_SHAPES["default"], seed=0, device="cpu")
    interpreted_triton.run(a, b)
    first = kernel.configs[0]
    assert first.kwargs["BLOCK_M"] == 128 and first.kwargs["BLOCK_N"] == 256 and first.num_stages == 3
    assert kernel.best_config.kwargs == first.kwargs
    # The small shape covers the device's code paths: >= 2 tiles per dimension, a K-loop of >= 2
    # steps and more tiles than persistent programs.
    m, n, k = (case.SMALL_SHAPES["default"][d] for d in "MNK")
    tiles_m, tiles_n = -(-m // first.kwargs["BLOCK_M"]), -(-n // first.kwargs["BLOCK_N"])
    assert tiles_m >= 2 and tiles_n >= 2 and k // first.kwargs["BLOCK_K"] >= 2
    assert tiles_m * tiles_n > interpreted_triton.CPU_PROGRAMS


def test_triton_expert_constructs_are_visible() -> None:
    text = (GEMM_DIR / "gemm_triton.py").read_text()
    for construct in ("@triton.autotune", "GROUP_M", "num_stages=", "tl.range(", "set_allocator",
                      "tl.dot(", "BLOCK_K: tl.constexpr", "make_tensor_descriptor", "NUM_SMS"):
        assert construct in text, construct


def test_triton_through_the_gate_interpret_tier() -> None:
    import gate
    verdict = gate.check_file(GEMM_DIR / "gemm_triton.py", gate.load_case("gemm"), tier=gate.Tier.INTERPRET, cache=False)
    assert verdict.ok, verdict.reason


def test_cuda_compiles_for_sm90a_with_the_expert_instructions() -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    from experts.gemm import gemm_cuda

    compiled = gemm_cuda.compile_kernels(arch="sm_90a")
    ptx = compiled.ptx
    for instr in ("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",
                  "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16",
                  "cp.async.bulk.tensor.2d", "mbarrier.try_wait", "setmaxnreg",
                  "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                  "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                  "ldmatrix.sync.aligned.m8n8.x4.trans", "cp.async.cg.shared.global"):
        assert instr in ptx, instr
    resources = compiled.resources()
    for kernel in ("gemm_wgmma_bf16", "gemm_wgmma_fp16", "gemm_mma_bf16", "gemm_mma_fp16"):
        assert resources[kernel]["spill_stores"] == 0, kernel
    # Four warpgroups' worth of accumulators must fit without serializing the wgmma pipeline.
    assert "C7515" not in compiled.log


def test_cuda_host_rejects_shapes_it_cannot_run() -> None:
    from experts.gemm import gemm_cuda

    a = torch.zeros(16, 12, dtype=torch.float16)
    b = torch.zeros(12, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="multiples of 8"):
        gemm_cuda.run(a, b)
    with pytest.raises(ValueError, match="bf16 or fp16"):
        gemm_cuda.run(torch.zeros(16, 16), torch.zeros(16, 16))


def test_cuda_through_the_gate_static_tier() -> None:
    import gate
    verdict = gate.check_file(GEMM_DIR / "gemm_cuda.cu", gate.load_case("gemm"), tier=gate.Tier.STATIC, cache=False)
    assert verdict.ok, verdict.reason


def _gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("interpreter on")


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["triton", "cuda_wgmma", "cuda_mma"])
@pytest.mark.parametrize("shape", [case.SHAPES["default"], {"M": 1000, "N": 1032, "K": 520, "dtype": "bf16"},
                                   {"M": 200, "N": 264, "K": 136, "dtype": "fp16"}])
def test_experts_on_the_gpu(kernel: str, shape: dict) -> None:
    _gpu()
    from experts.gemm import gemm_cuda, gemm_triton

    if kernel.startswith("cuda_wgmma") and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma kernel is sm_90a only")
    fn = {"triton": gemm_triton.run,
          "cuda_wgmma": lambda a, b: gemm_cuda.matmul(a, b, "wgmma"),
          "cuda_mma": lambda a, b: gemm_cuda.matmul(a, b, "mma")}[kernel]
    for seed in (0, 1):
        a, b = case.make_inputs(shape, seed, "cuda")
        out = fn(a, b)
        assert _rel_err(out, a.float() @ b.float()) <= case.TOLERANCE[shape["dtype"]]


@pytest.mark.parametrize("epilogue, instr", [(1, "cp.async.bulk.tensor.2d.global.shared::cta"),
                                             (2, "st.global.v4.u32")])
def test_cuda_staged_epilogues_compile_without_spills(epilogue: int, instr: str) -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    from experts.gemm import gemm_cuda

    defines = {"WG_EPILOGUE": epilogue}
    compiled = gemm_cuda.compile_kernels(arch="sm_90a", defines=defines)
    assert instr in compiled.ptx
    for kernel in ("gemm_wgmma_bf16", "gemm_wgmma_fp16"):
        assert compiled.resources()[kernel]["spill_stores"] == 0, kernel
    assert gemm_cuda.wgmma_smem_bytes(defines) <= 232448  # Hopper's per-block opt-in limit


def test_the_host_launches_an_earlier_source_as_it_was_written(tmp_path: Path) -> None:
    """A lineage state of the earlier expert (C written from registers, no `WG_EPILOGUE`) is
    launched beside today's host module: no C tensor map and no shared memory for C chunks."""
    import importlib.util
    import json
    import shutil

    lineage = json.loads((GEMM_DIR.parents[1] / "bench/results/lineages/device-cuda/gemm_cuda/"
                          "lineage.json").read_text())
    earlier = next(n["source"] for n in lineage["nodes"]
                   if n.get("source") and "expert" in (n.get("roles") or []))
    assert "WG_EPILOGUE" not in earlier
    for name, source in (("earlier", earlier), ("today", (GEMM_DIR / "gemm_cuda.cu").read_text())):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "gemm_cuda.cu").write_text(source)
        shutil.copyfile(GEMM_DIR / "gemm_cuda.py", folder / "gemm_cuda.py")
        spec = importlib.util.spec_from_file_location(f"gemm_cuda_{name}", folder / "gemm_cuda.py")
        host = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(host)
        if name == "earlier":
            assert host._epilogue(None) == 0 and host.wgmma_smem_bytes() == 197696
        else:
            assert host._epilogue(None) == 2 and host.wgmma_smem_bytes() == 197696 + 32768
            assert host._epilogue({"WG_EPILOGUE": 0}) == 0
