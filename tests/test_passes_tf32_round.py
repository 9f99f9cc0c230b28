"""tf32-round-operands: an N-major tf32 dot operand is rounded to TF32 in registers before the dot.

Before/after on a square product whose B is read N-contiguous; refusals (a K-major operand, a
full-fp32 or tf32x3 dot, a 16-bit case); the round trip; the rewritten module computes the
product of the rounded operand under the interpreter; at sm_90 (compiled on the CPU) the
rewritten kernel stages B with 16-byte copies only, where the start copies it 4 bytes at a time."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import kir
from passes.base import Applied, PassContext, Skipped
from passes.triton.tf32_round import Tf32RoundOperands
from tests.module_helpers import load_module

ROOT = Path(__file__).resolve().parent.parent
SQUARE = (ROOT / "bench/kernelbench/level1/1_Square_matrix_multiplication_.py").read_text()
NT = (ROOT / "bench/kernelbench/level1/17_Matmul_with_transposed_B.py").read_text()
PASS = Tf32RoundOperands()


def _site(source: str, operand: str):  # noqa: ANN202
    ir = kir.parse(source, "triton")
    site = next(s for s in PASS.sites(ir) if s.detail["operand"] == operand)
    return ir, site


def _rounded(source: str = SQUARE, operand: str = "B") -> str:
    ir, site = _site(source, operand)
    result = PASS.optimize(ir, site)
    assert isinstance(result, Applied), result
    return result.ir.unparse()


def test_the_n_major_operand_is_rounded_and_the_k_major_one_refused() -> None:
    text = _rounded()
    assert "acc = tl.dot(a, _tf32_round(b), acc)" in text
    assert text.count("def _tf32_round(") == 1
    ir = kir.parse(text, "triton")
    assert {(s.detail["operand"], s.present) for s in PASS.sites(ir)} == {("A", False), ("B", True)}
    ir, site = _site(SQUARE, "A")
    refused = PASS.optimize(ir, site)
    assert isinstance(refused, Skipped) and "already K-major" in refused.reason
    for operand in ("a_ptr", "b_ptr"):  # A @ B.T with B (N, K): both K-major
        ir, site = _site(NT, operand)
        refused = PASS.optimize(ir, site)
        assert isinstance(refused, Skipped) and "already K-major" in refused.reason, refused


@pytest.mark.parametrize("keyword", ['input_precision="ieee"', 'input_precision="tf32x3"', "allow_tf32=False"])
def test_a_dot_not_in_tf32_is_refused(keyword: str) -> None:
    source = SQUARE.replace("acc = tl.dot(a, b, acc)", f"acc = tl.dot(a, b, acc, {keyword})")
    assert keyword in source
    ir, site = _site(source, "B")
    refused = PASS.optimize(ir, site)
    assert isinstance(refused, Skipped), refused
    assert "tf32" in refused.reason or "fp32" in refused.reason


def test_a_16_bit_case_is_refused() -> None:
    ir, site = _site(SQUARE, "B")
    refused = PASS.optimize(ir, site, PassContext(facts={"dtype": "torch.float16"}))
    assert isinstance(refused, Skipped) and "16-bit" in refused.reason


def test_the_round_trip_gives_the_start_back() -> None:
    text = _rounded()
    ir = kir.parse(text, "triton")
    site = next(s for s in PASS.sites(ir) if s.present)
    back = PASS.deoptimize(ir, site)
    assert isinstance(back, Applied), back
    assert back.ir.unparse() == SQUARE


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter not enabled")
def test_the_rewritten_module_multiplies_by_the_rounded_operand(tmp_path: Path) -> None:
    import torch  # noqa: PLC0415

    module = load_module(_rounded(), tmp_path)
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(96, 96, generator=g, dtype=torch.float64).float() for _ in range(2))
    got = module.run(a, b).double()
    rounded = ((b.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32).double()
    assert not torch.equal(rounded.float(), b)
    exact = a.double() @ b.double()
    # the interpreter's dot is fp32: the product is the rounded operand's, not the start's
    assert (got - a.double() @ rounded).abs().max() < 1e-4 < (got - exact).abs().max()


_COMPILE = """
import importlib.util, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
spec = importlib.util.spec_from_file_location("probe_module", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
sig = {"A": "*fp32", "B": "*fp32", "C": "*fp32", "N": "i32", "BM": "constexpr", "BN": "constexpr",
       "BK": "constexpr"}
src = ASTSource(module.square_mm, sig, {"BM": 128, "BN": 128, "BK": 32},
                {(i,): [["tt.divisibility", 16]] for i in range(4)})
ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 3}).asm["ptx"]
print(" ".join(sorted(set(re.findall(r"cp[.]async[.]c[ag][.]shared[.]global [^,]*, [^,]*, (0x[0-9a-f]+)", ptx)))))
"""


def _cp_async_widths(source: str, tmp_path: Path, name: str) -> set[str]:
    """The sizes of the asynchronous copies the module's kernel compiles to at sm_90 (in a
    process of its own: the interpreter's patches stay out of the compile)."""
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", _COMPILE, str(path)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(done.stdout.split())


def test_at_sm90_the_rounded_operand_is_staged_with_16_byte_copies(tmp_path: Path) -> None:
    pytest.importorskip("triton.backends.nvidia")
    assert _cp_async_widths(SQUARE, tmp_path, "start") == {"0x10", "0x4"}
    assert _cp_async_widths(_rounded(), tmp_path, "rounded") == {"0x10"}
