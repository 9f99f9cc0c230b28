"""A one-tile-per-program kernel made persistent by role (`persistent-grid`, no recorded loop):
the tile count read in the kernel's terms, refusals with their reasons, and the composition
grouped order -> persistent loop -> descriptors built once per program, checked against torch."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import kir
from passes import get_pass
from passes.base import Applied
from passes.triton._py import PyModule
from passes.triton.persist import walk_of
from test_passes_tma_boxes import NAMED, WALKED, _load

# The walked kernel after a tile sweep has made its grid read the tuned tiles.
TUNED = WALKED.replace("mm_walk[(triton.cdiv(M, 16) * triton.cdiv(N, 16),)]",
                       'mm_walk[lambda meta: (triton.cdiv(M, meta["BLK_M"]) * triton.cdiv(N, meta["BLK_N"]),)]')

torch = pytest.importorskip("torch")


def _apply(ir: kir.KernelIR, name: str, key: str) -> kir.KernelIR:
    p = get_pass(name)()
    sites = [s for s in p.sites(ir) if not s.present and key in s.detail]
    assert len(sites) == 1, (name, sites)
    result = p.optimize(ir, sites[0])
    assert isinstance(result, Applied), result
    return result.ir


def test_a_1d_kernel_walks_its_tiles_and_the_grid_is_capped() -> None:
    assert TUNED != WALKED
    ir = _apply(kir.parse(TUNED, language="triton"), "persistent-grid", "role")
    text = ir.text
    assert "for pid in range(tl.program_id(0), (tl.cdiv(M, BLK_M) * tl.cdiv(N, BLK_N)), tl.num_programs(0)):" in text
    assert ('mm_walk[lambda meta: (min(triton.cdiv(M, meta["BLK_M"]) * triton.cdiv(N, meta["BLK_N"]), '
            "_resident_programs()),)]") in text
    # made persistent, the rule sees its loop as present
    assert not [s for s in get_pass("persistent-grid")().sites(ir) if not s.present]


@pytest.mark.parametrize("edit, reason", [
    (("    pid = tl.program_id(0)\n", "    pid = tl.program_id(0)\n    if pid >= 1 << 30:\n        return\n"),
     "returns early"),
    (('triton.cdiv(N, meta["BLK_N"]),)]', 'triton.cdiv(N, meta["BLK_N"]), 1)]'), "2 axes"),
    (('triton.cdiv(M, meta["BLK_M"])', "triton.cdiv(a.numel(), 256)"), "does not receive"),
    (('triton.cdiv(M, meta["BLK_M"])', "triton.cdiv(M, 16)"), "literal size"),
])
def test_what_cannot_walk_its_tiles_says_why(edit: tuple[str, str], reason: str) -> None:
    text = TUNED.replace(*edit)
    assert text != TUNED
    mod = PyModule(kir.parse(text, language="triton"))
    why = walk_of(mod, mod.kernels()[0])
    assert isinstance(why, str) and reason in why, why


def test_grouped_then_persistent_then_descriptors_built_once_per_program(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ir = kir.parse(NAMED.replace("mm[(triton.cdiv(M, 16), triton.cdiv(N, 16))]",
                                 'mm[lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))]'),
                   language="triton")
    for name, key in (("grouped-ordering", "kernel"), ("persistent-grid", "role"),
                      ("tma-descriptors", "operands")):
        ir = _apply(ir, name, key)
    text = ir.text
    assert text.index("a_desc = tl.make_tensor_descriptor(") < text.index("for pid in range(")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    module = _load(text, tmp_path)
    g = torch.Generator().manual_seed(2)
    for m, n, k in itertools.product((48, 37), (40, 21), (64, 45)):  # more tiles than programs
        a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
        assert torch.allclose(module.run(a, b), a @ b, atol=1e-3, rtol=1e-3), (m, n, k)
