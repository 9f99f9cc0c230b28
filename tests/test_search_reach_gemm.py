"""Batched GEMM in two common styles gets the tensor-descriptor move (the step that stopped
batched products short of cuBLAS had no site on them): a parameter pointer moved once to its
batch before the loop (`a_ptr += pid_b * stride_ab`) is read as a scalar base from there on, and
an axis the K loop walks by its own counter without a mask (`kt * TK + tl.arange(0, TK)` over
`tl.static_range(K // TK)`) is bounded by the loop's extent. The rewritten kernels match torch
under the interpreter."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import kir
from module_helpers import load_module
from skill_helpers import ROOT
from passes import get_pass
from passes.base import Applied
from passes.triton._py import PyModule
from passes.triton.affine import Scope
from passes.triton.tma import _operand_boxes

torch = pytest.importorskip("torch")

# the two batched styles of the style tier: a base moved to its batch (`a_ptr += pid_b *
# stride_ab`), and K a compile-time constant walked by a static loop with no mask on the K axis
REBASED = (ROOT / "bench/styles/bmm_grid3/bmm3d.py").read_text()
STATIC_K = (ROOT / "bench/styles/bmm_static_k/bmm_static.py").read_text()


def _boxes(source: str) -> list:
    mod = PyModule(kir.parse(source, language="triton"))
    return [box for _, box, _ in _operand_boxes(mod, mod.kernels()[0])]


def test_a_base_moved_once_before_the_loop_is_a_scalar_base() -> None:
    boxes = _boxes(REBASED)
    assert [(b.base, b.shape) for b in boxes] == [("a_ptr", ("M", "K")), ("b_ptr", ("K", "N"))]
    mod = PyModule(kir.parse(REBASED, language="triton"))
    assert {"a_ptr", "b_ptr", "c_ptr"} <= Scope(mod, mod.kernels()[0]).params
    # moved inside the loop, or by a block: not a base the loop can read
    move = "    a_ptr += pid_b * stride_ab\n"
    assert move in REBASED
    for changed in (REBASED.replace(move, "").replace("        kk = k0 + offs_k\n",
                                                      "        kk = k0 + offs_k\n    " + move),
                    REBASED.replace(move, "    a_ptr += offs_m * stride_ab\n")):
        assert isinstance(_boxes(changed)[0], str)


def test_an_unmasked_axis_walked_by_the_loop_counter_is_bounded_by_the_loops_extent() -> None:
    boxes = _boxes(STATIC_K)
    assert [(b.base, b.shape) for b in boxes] == [("a_base", ("M", "K")), ("b_base", ("K", "N"))]
    # a loop that does not count from 0 to its extent in steps of the block bounds nothing
    assert "tl.static_range(K // TK)" in STATIC_K and "kidx = kt * TK + ks" in STATIC_K
    for changed in (STATIC_K.replace("tl.static_range(K // TK)", "tl.static_range(1, K // TK)"),
                    STATIC_K.replace("kidx = kt * TK + ks", "kidx = kt * 2 * TK + ks")):
        assert all(isinstance(b, str) for b in _boxes(changed))


@pytest.mark.parametrize("source", [REBASED, STATIC_K], ids=["rebased", "static-k"])
def test_the_descriptor_rewrite_of_a_batched_product_matches_torch(
        source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("interpreter not enabled")
    ir = kir.parse(source, language="triton")
    tma = get_pass("tma-descriptors")()
    [site] = [s for s in tma.sites(ir) if not s.present and "operands" in s.detail]
    result = tma.optimize(ir, site)
    assert isinstance(result, Applied), result
    text = result.ir.text
    assert text.count("tl.make_tensor_descriptor(") >= 2
    # the unit strides are checked at the launch, also where the host spreads `*a.stride()`
    assert ("*a.stride(), *b.stride(), *c.stride(),)[" in text) == ("*a.stride()" in source)
    assert "a.stride(2) == 1" in text or "*a.stride()" in source
    module = load_module(text, tmp_path, "batched_tma")
    g = torch.Generator().manual_seed(0)
    for m, n in ((64, 64), (40, 48)):  # whole tiles, and partial tiles in M and N
        a, b = torch.randn(2, m, 64, generator=g), torch.randn(2, 64, n, generator=g)
        assert torch.allclose(module.run(a, b), a @ b, atol=1e-3, rtol=1e-3), (m, n)
