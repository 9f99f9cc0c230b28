"""The static tier: compile for sm_90a on a CPU and read facts off the artifacts."""
from __future__ import annotations

import re

from pathlib import Path

import pytest

import gate
from gate import FailureKind, Tier
from gate import facts as gate_facts

DATA = Path(__file__).parent / "data"
SAXPY = DATA / "cases" / "saxpy"
MATMUL = DATA / "cases" / "matmul_triton.py"


def test_ptx_instruction_classes_are_counted() -> None:
    ptx = "\n".join([
        "\twgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%f1}, %rd1, %rd2, 1, 1, 1, 0, 1;",
        "\t@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];",
        "\tld.global.v2.f32 {%f1, %f2}, [%rd3];",  # 64-bit: not a 128-bit load
        "\tcp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r2, %r3}], [%r4];",
        "\tcp.async.cg.shared.global [ %r5 + 0 ], [ %rd5 + 0 ], 0x10, %r6;",
        "\tshfl.sync.bfly.b32 %r7, %r8, 16, 31, -1;",
        "\tldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r1, %r2, %r3, %r4}, [%r9];",
        "\tst.local.u32 [%rd9], %r1;",
    ])
    counts = gate_facts.ptx_instruction_counts(ptx)
    assert counts["wgmma"] == 1 and counts["tma"] == 1 and counts["cp_async"] == 1
    assert counts["vec128_load"] == 1 and counts["shuffle"] == 1 and counts["ldmatrix"] == 1
    assert counts["local_memory"] == 1 and counts["mma"] == 0


def test_cubin_resources_match_the_ptxas_report() -> None:
    from experts import cudahost

    src = ('extern "C" __global__ void k(const float* x, float* y) {'
           ' __shared__ float buf[512]; buf[threadIdx.x] = x[threadIdx.x]; __syncthreads();'
           ' y[threadIdx.x] = buf[511 - threadIdx.x]; }')
    compiled = cudahost.compile_source(src, name="k.cu", arch="sm_90a")
    kernels = gate_facts.cubin_kernels(compiled.cubin)
    report = cudahost.ptxas_resources(compiled.log)["k"]
    assert kernels["k"].registers == report["registers"]
    assert kernels["k"].static_shared_bytes == 2048 == gate_facts.ptxas_shared(compiled.log)["k"]
    assert kernels["k"].frame_bytes == report["stack_bytes"]


def test_static_facts_of_a_vectorised_triton_kernel() -> None:
    verdict = gate.check_file(SAXPY / "saxpy_triton.py", SAXPY, Tier.STATIC, cache=False)
    assert verdict.ok, verdict.reason
    assert verdict.stage == "compile" and verdict.correctness is None
    (c,) = verdict.facts.compiles
    assert c.kernel == "saxpy_kernel" and c.config["BLOCK"] == 1024
    assert c.registers and c.registers > 0
    assert c.instructions["vec128_load"] > 0  # 16-byte aligned pointers: 128-bit loads
    assert not verdict.facts.spills


@pytest.mark.slow
def test_every_autotune_config_of_a_matmul_is_compiled_with_hopper_facts() -> None:
    verdict = gate.check_file(MATMUL, "gemm", Tier.STATIC, cache=False)
    assert verdict.ok, verdict.reason
    configs = {(c.config["BM"], c.config["BN"], c.config["BK"]) for c in verdict.facts.compiles}
    assert configs == {(128, 128, 64), (128, 64, 64), (64, 128, 64), (64, 64, 32)}
    assert "wgmma" in verdict.facts.instruction_classes
    big = next(c for c in verdict.facts.compiles if c.config["BM"] == 128 and c.config["BN"] == 128)
    small = next(c for c in verdict.facts.compiles if c.config["BM"] == 64 and c.config["BN"] == 64)
    assert big.shared_bytes > small.shared_bytes > 0


def test_cuda_kernels_compile_with_nvrtc_and_stop_at_static_on_a_cpu() -> None:
    verdict = gate.check_file(SAXPY / "saxpy_cuda.cu", SAXPY, Tier.INTERPRET, cache=False)
    assert verdict.ok, verdict.reason
    assert verdict.tier is Tier.STATIC
    assert any("static" in f for f in verdict.flags)
    assert [c.kernel for c in verdict.facts.compiles] == ["saxpy"]


def test_a_compile_error_is_a_verdict(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text((SAXPY / "saxpy_triton.py").read_text().replace("a * x + y", "a * x + undefined_name"))
    verdict = gate.check_file(bad, SAXPY, Tier.STATIC, cache=False)
    assert verdict.failure_kind is FailureKind.COMPILE_ERROR
    assert "undefined_name" in verdict.reason


def test_a_compile_error_in_a_called_function_names_its_cause(tmp_path: Path) -> None:
    """Triton reports a failure inside a called @triton.jit function at the call site only;
    the verdict carries what failed there (the compile error's innermost cause)."""
    text = (SAXPY / "saxpy_triton.py").read_text()
    helper = ("@triton.jit\ndef _widen(v, BLOCK: tl.constexpr):\n"
              "    return tl.reshape(v, (BLOCK * 2,))\n\n\n@triton.jit\ndef saxpy_kernel(")
    bad = tmp_path / "bad.py"
    bad.write_text(text.replace("@triton.jit\ndef saxpy_kernel(", helper)
                   .replace("a * x + y,", "_widen(a * x + y, BLOCK),"))
    verdict = gate.check_file(bad, SAXPY, Tier.STATIC, cache=False)
    assert verdict.failure_kind is FailureKind.COMPILE_ERROR
    assert "_widen(" in verdict.reason  # the call site
    assert "\ncaused by ValueError: reshape" in verdict.reason  # what failed in _widen


def test_cuda_compile_error_names_the_line(tmp_path: Path) -> None:
    source = (SAXPY / "saxpy_cuda.cu").read_text()
    line = source[:source.index("a * x[i]")].count("\n") + 1
    (tmp_path / "saxpy_cuda.cu").write_text(source.replace("a * x[i]", "a * z[i]"))
    (tmp_path / "saxpy_cuda.py").write_text((SAXPY / "saxpy_cuda.py").read_text())
    verdict = gate.check_file(tmp_path / "saxpy_cuda.cu", SAXPY, Tier.STATIC, cache=False)
    assert verdict.failure_kind is FailureKind.COMPILE_ERROR
    # NVRTC's own location (file(line): error ...) survives into the reason, and only that one.
    assert f"saxpy_cuda.cu({line}): error" in verdict.reason, verdict.reason
    assert '"z"' in verdict.reason
    assert re.findall(r"saxpy_cuda\.cu\((\d+)\)", verdict.reason) == [str(line)]


def test_a_parse_error_stops_at_the_parse_stage(tmp_path: Path) -> None:
    bad = tmp_path / "broken.py"
    bad.write_text("def run(a, x, y:\n    return x\n")
    verdict = gate.check_file(bad, SAXPY, Tier.STATIC, cache=False)
    assert verdict.failure_kind is FailureKind.PARSE_ERROR and verdict.stage == "parse"


def test_each_config_is_specialized_after_its_pre_hook() -> None:
    # The configs' pre_hooks reshape the tensor descriptors: BLOCK 256 must not be compiled
    # with the 512-element block the last pre_hook left behind.
    verdict = gate.check_file(SAXPY / "saxpy_desc_triton.py", SAXPY, Tier.STATIC, cache=False)
    assert verdict.ok, verdict.reason
    assert sorted(c.config["BLOCK"] for c in verdict.facts.compiles) == [256, 512]
    assert "tma" in verdict.facts.instruction_classes


def test_workers_take_the_callers_environment_but_the_tier_decides_interpretation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A caller that has TRITON_INTERPRET=1 set (tests do) still gets real sm_90a compiles, and
    # a variable set after the gate's fork server started (SASS opt-in) reaches the worker.
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("KLINEAGE_GATE_SASS", "1")
    verdict = gate.check_file(SAXPY / "saxpy_triton.py", SAXPY, Tier.STATIC, cache=False)
    assert verdict.ok, verdict.reason
    sass = verdict.facts.compiles[0].sass
    if gate_facts.find_disassembler() is not None:
        assert sass is not None and sass["LDG128"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("every", [False, True])
def test_a_launch_needing_more_shared_memory_than_the_target_has(tmp_path: Path, every: bool) -> None:
    """A 256x256x128 tile at 4 stages needs about 512 KB of shared memory, over the 227 KB an
    sm_90 block may opt in to. Beside configurations that fit, the device's autotuner skips it:
    flagged. As the launch's only configuration it would not launch: rejected, as on the GPU."""
    huge = 'triton.Config({"BM": 256, "BN": 256, "BK": 128}, num_warps=8, num_stages=4),'
    text = MATMUL.read_text()
    first = '        triton.Config({"BM": 128, "BN": 128, "BK": 64}, num_warps=8, num_stages=3),'
    assert first in text
    if every:
        start = text.index("    CONFIGS = [\n        triton.Config({\"BM\": 128")
        end = text.index("    ]\n", start) + len("    ]\n")
        text = text[:start] + f"    CONFIGS = [\n        {huge}\n    ]\n" + text[end:]
    else:
        text = text.replace(first, f"        {huge}\n{first}")
    path = tmp_path / "matmul_triton.py"
    path.write_text(text)
    verdict = gate.check_file(path, "gemm", Tier.STATIC, cache=False)
    if every:
        assert not verdict.ok and verdict.failure_kind is FailureKind.COMPILE_ERROR
        assert "shared memory" in verdict.reason and "would not launch" in verdict.reason
    else:
        assert verdict.ok, verdict.reason
        assert any("1 of 5 configurations of matmul_kernel need more shared memory" in f
                   for f in verdict.flags), verdict.flags
        assert verdict.facts.over_shared_limit == 1


@pytest.mark.parametrize("caller", [None, "0"])
def test_workers_keep_fp_fusion_on_unless_the_caller_chose(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caller: str | None) -> None:
    """Triton 3.9 warns from every process that its fusion default will change; the worker
    keeps the default both versions have (on), and a caller's own setting wins."""
    if caller is None:
        monkeypatch.delenv("TRITON_DEFAULT_FP_FUSION", raising=False)
    else:
        monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", caller)
    want = caller or "1"
    path = tmp_path / "saxpy_triton.py"
    path.write_text("import os\nassert os.environ.get('TRITON_DEFAULT_FP_FUSION') == "
                    f"{want!r}, os.environ.get('TRITON_DEFAULT_FP_FUSION')\n"
                    + (SAXPY / "saxpy_triton.py").read_text())
    verdict = gate.check_file(path, SAXPY, Tier.STATIC, cache=False)
    assert verdict.ok, verdict.reason
