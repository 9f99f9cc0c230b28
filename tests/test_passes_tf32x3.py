"""tf32x3-dot: a full-fp32 tl.dot becomes three tf32 tensor-core products.

Before/after on a GEMM asked for in full fp32 two ways (`input_precision="ieee"`,
`allow_tf32=False`); refusals for 16-bit operands; the round trip; the rewritten module
matches torch in fp32 under the interpreter; at sm_90 the product compiles to wgmma where the
full-fp32 one had none; the search offers the rule on a kernel no lineage holds."""
from __future__ import annotations

from pathlib import Path

import pytest

import kir
from passes.base import Applied, PassContext, Skipped
from passes.registry import get_pass
from passes.roundtrip import roundtrip
from tests.module_helpers import compiled_for_sm90, load_module

ROOT = Path(__file__).resolve().parent.parent
# sum over the columns of x @ w.T, the product in full fp32 (a two-kernel start kernel)
START = (ROOT / "bench/kernelbench/level2/14_Gemm_Divide_Sum_Scaling.py").read_text()

NT_STRIDED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbn, sbk, BM: tl.constexpr, BN: tl.constexpr,
       BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak, mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rn[:, None] * sbn + rk[None, :] * sbk, mask=(rn[:, None] < N) & (rk[None, :] < K), other=0.0)
        acc = tl.dot(a, tl.trans(b), acc, allow_tf32=False)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[0]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    mm[(triton.cdiv(M, 16), triton.cdiv(N, 16))](a, b, c, M, N, K, a.stride(0), a.stride(1),
                                                 b.stride(0), b.stride(1), BM=16, BN=16, BK=16)
    return c
'''

PASS = get_pass("tf32x3-dot")()


def _optimized(source: str, ctx: PassContext | None = None):  # noqa: ANN202
    ir = kir.parse(source, "triton")
    sites = [s for s in PASS.sites(ir) if not s.present]
    assert len(sites) == 1, sites
    return PASS.optimize(ir, sites[0], ctx)


@pytest.mark.parametrize("source,before", [
    (START, 'tl.dot(a, b, input_precision="ieee")'),
    (NT_STRIDED, "tl.dot(a, tl.trans(b), acc, allow_tf32=False)"),
], ids=["ieee", "allow-tf32-false"])
def test_full_fp32_dots_become_tf32x3(source, before) -> None:
    result = _optimized(source)
    assert isinstance(result, Applied), result
    text = result.ir.unparse()
    assert before in source and before not in text
    assert before.replace('input_precision="ieee"', 'input_precision="tf32x3"').replace(
        "allow_tf32=False", 'input_precision="tf32x3"') in text
    ir = kir.parse(text, "triton")
    assert [s.present for s in PASS.sites(ir)] == [True]  # done: nothing left to take


@pytest.mark.parametrize("why,source,ctx", [
    ("16-bit", START, PassContext(facts={"dtype": "float16"})),
    ("cast to float16", START.replace("tl.dot(a, b,", "tl.dot(a.to(tl.float16), b.to(tl.float16),"), None),
], ids=["fp16-case", "cast"])
def test_sixteen_bit_operands_are_refused(why, source, ctx) -> None:
    result = _optimized(source, ctx)
    assert isinstance(result, Skipped) and why in result.reason


def test_a_kernel_without_a_full_fp32_dot_has_no_site() -> None:
    tf32 = START.replace(', input_precision="ieee"', "")
    assert PASS.sites(kir.parse(tf32, "triton")) == []


def test_optimize_of_deoptimize_round_trips() -> None:
    ir = _optimized(START).ir
    (site,) = PASS.sites(ir)
    trip = roundtrip(PASS, ir, site)
    assert trip.same, getattr(trip.forward, "reason", trip.backward)
    back = PASS.deoptimize(ir, site)
    assert isinstance(back, Applied) and 'input_precision="ieee"' in back.ir.unparse()


def test_the_rewritten_kernels_match_torch_in_fp32(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    start = load_module(_optimized(START).ir.unparse(), tmp_path)
    x, w = torch.rand(40, 72, generator=gen), torch.rand(56, 72, generator=gen)
    ref = ((x.double() @ w.double().T) / 2).sum(1, keepdim=True) * 1.5
    torch.testing.assert_close(start.run(x, w).double(), ref, rtol=1e-5, atol=1e-3)
    nt = load_module(_optimized(NT_STRIDED).ir.unparse(), tmp_path)
    a, b = torch.randn(24, 40, generator=gen), torch.randn(20, 40, generator=gen)
    torch.testing.assert_close(nt.run(a, b), a @ b.T, rtol=1e-5, atol=1e-5)


_TILES = {"BM": 128, "BN": 128, "BK": 32}


def test_tf32x3_compiles_to_wgmma_at_sm90(tmp_path) -> None:
    """Three tf32 products per K step on the tensor cores; the full-fp32 start has none."""
    pytest.importorskip("triton")
    counts = {}
    for name, text in (("start", START), ("split", _optimized(START).ir.unparse())):
        ptx = compiled_for_sm90(text, tmp_path, name, "gemm_nt", _TILES, pointers="*fp32")["ptx"]
        counts[name] = ptx.count("wgmma.mma_async")
    assert counts["start"] == 0 and counts["split"] > 0 and counts["split"] % 3 == 0


def test_the_search_offers_the_rule() -> None:
    from lineage.moves import rule_moves

    offered = rule_moves(kir.parse(START, "triton"))
    assert "tf32x3-dot" in offered
    assert 'input_precision="tf32x3"' in offered["tf32x3-dot"][0].unparse()
    assert "tf32x3-dot" not in rule_moves(kir.parse(NT_STRIDED.replace(", allow_tf32=False", ""), "triton"))
