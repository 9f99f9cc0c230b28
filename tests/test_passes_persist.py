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
    # the K loop feeds tl.dot from pointer loads: a plain loop (flattened, it measured slower)
    assert ("for pid in range(tl.program_id(0), (tl.cdiv(M, BLK_M) * tl.cdiv(N, BLK_N)), "
            "tl.num_programs(0)):") in text
    assert ('mm_walk[lambda meta: (min(triton.cdiv(M, meta["BLK_M"]) * triton.cdiv(N, meta["BLK_N"]), '
            "_resident_programs(mm_walk, meta)),)]") in text
    # made persistent, the rule sees its loop as present
    assert not [s for s in get_pass("persistent-grid")().sites(ir) if not s.present]


@pytest.mark.parametrize("edit, reason", [
    (("    pid = tl.program_id(0)\n", "    pid = tl.program_id(0)\n    if pid >= 1 << 30:\n        return\n"),
     "returns early"),
    (("    pid = tl.program_id(0)\n", "    for pid in range(tl.program_id(0), 4, tl.num_programs(0)):\n        pass\n"
      "    pid = tl.program_id(0)\n"), "already walks its tiles"),
    (("    pid = tl.program_id(0)\n", "    programs = tl.num_programs(0)\n    pid = tl.program_id(0)\n"),
     "before its first program id"),
    (('triton.cdiv(M, meta["BLK_M"])', "triton.cdiv(a.numel(), 256)"), "literal size"),
    (('triton.cdiv(M, meta["BLK_M"])', 'triton.cdiv(M, meta["BLK_M"] + meta["missing"])'),
     "does not receive"),
    (('triton.cdiv(M, meta["BLK_M"])', "triton.cdiv(M, 8)"), "literal size"),
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


# A batched kernel over a 3-D grid (row tiles, column tiles, batch), program ids read inline.
BATCHED = """
import torch
import triton
import triton.language as tl


@triton.jit
def bmm3(x, y, z, M, N, K, sxb, sxm, syb, syk, szb, szm, R: tl.constexpr, C: tl.constexpr, D: tl.constexpr):
    scale = 1.0
    rows = tl.program_id(0) * R + tl.arange(0, R)
    cols = tl.program_id(1) * C + tl.arange(0, C)
    xb = x + tl.program_id(2) * sxb
    acc = tl.zeros((R, C), dtype=tl.float32)
    for k0 in range(0, K, D):
        ks = k0 + tl.arange(0, D)
        xt = tl.load(xb + rows[:, None] * sxm + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        yt = tl.load(y + tl.program_id(2) * syb + ks[:, None] * syk + cols[None, :],
                     mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(xt, yt)
    tl.store(z + tl.program_id(2) * szb + rows[:, None] * szm + cols[None, :], acc * scale,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def run(x, y):
    B, M, K = x.shape
    N = y.shape[2]
    z = torch.empty(B, M, N, dtype=x.dtype)
    grid = lambda meta: (triton.cdiv(M, meta["R"]), triton.cdiv(N, meta["C"]), B)
    bmm3[grid](x, y, z, M, N, K, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
               z.stride(0), z.stride(1), R=16, C=16, D=16)
    return z
"""


def test_a_3d_grid_walks_one_linear_index_axis_0_fastest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the grid becomes one capped axis, each program id is decoded from the linear index, and
    # the batch count (a host value the kernel did not receive) becomes a parameter
    ir = _apply(kir.parse(BATCHED, language="triton"), "persistent-grid", "role")
    out = ir.text
    assert ("for tile in range(tl.program_id(0), (tl.cdiv(M, R)) * (tl.cdiv(N, C)) * (grid_B), "
            "tl.num_programs(0)):") in out
    assert "D: tl.constexpr, grid_B=1):" in out and "R=16, C=16, D=16, grid_B=B)" in out
    assert "pid_axis0 = tile % (tl.cdiv(M, R))" in out
    assert "pid_axis2 = (tile // ((tl.cdiv(M, R)) * (tl.cdiv(N, C))))" in out
    assert ('(min((triton.cdiv(M, meta["R"])) * (triton.cdiv(N, meta["C"])) * (B), '
            "_resident_programs(bmm3, meta)),)") in out
    assert out.index("scale = 1.0") < out.index("for tile in range(")  # work before the ids stays out
    assert "tl.program_id(1)" not in out and "tl.program_id(2)" not in out
    assert not [s for s in get_pass("persistent-grid")().sites(ir) if not s.present]
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    module = _load(out, tmp_path)
    g = torch.Generator().manual_seed(3)
    for b, m, n, k in ((3, 40, 33, 20), (2, 16, 50, 48)):  # 27 and 16 tiles over 4 programs
        x, y = torch.randn(b, m, k, generator=g), torch.randn(b, k, n, generator=g)
        assert torch.allclose(module.run(x, y), x @ y, atol=1e-3, rtol=1e-3), (b, m, n, k)


@pytest.mark.parametrize("carried, line", [
    ("x", "    x += tl.program_id(2) * sxb\n"),  # a parameter moved to the batch, in place
    ("scale", "    scale = scale * 2.0\n"),       # a value from before the ids, reassigned from itself
])
def test_a_body_that_changes_a_value_from_before_it_does_not_walk_its_tiles(
        carried: str, line: str) -> None:
    """Run once per tile, `x += batch * stride` would move `x` again for every tile a program
    walks: the rule refuses and names the variable."""
    text = BATCHED.replace("    acc = tl.zeros((R, C), dtype=tl.float32)\n",
                           line + "    acc = tl.zeros((R, C), dtype=tl.float32)\n")
    assert text != BATCHED
    mod = PyModule(kir.parse(text, language="triton"))
    why = walk_of(mod, mod.kernels()[0])
    assert isinstance(why, str) and f"changes {carried} after reading" in why, why


def test_names_the_body_defines_on_a_guarded_path_are_not_carried() -> None:
    from passes.triton.persist import carried_names

    body = __import__("ast").parse(
        "if F:\n    d = make(x)\nfor k in range(0, K, B):\n    t = d.load(k) if F else x\n"
        "    acc += t\nacc = acc + 1\nx2 = x\n").body
    assert carried_names(body, {"x", "F", "K", "B", "acc"}) == {"acc"}
    assert carried_names(body, {"x", "F", "K", "B"}) == set()


def test_a_tile_whose_loop_length_the_tile_sets_does_not_walk_its_tiles() -> None:
    """The style tier's causal attention after causal-block-skip: its key loop stops at the
    query tile's diagonal, so tiles carry unequal work; dealt to programs in turn they leave
    some programs with more (on an H200 the resident walk ran 0.178 ms against 0.158 launched,
    bench/results/ab.md). Before the skip every tile walks all keys, and the rule applies."""
    start = Path(__file__).resolve().parent.parent / "bench/styles/nw_attn_flat_ptrs/flat_attn.py"
    ir = kir.parse(start.read_text(), language="triton", path=start)
    mod = PyModule(ir)
    assert not isinstance(walk_of(mod, mod.kernels()[0]), str)
    skip = get_pass("causal-block-skip")()
    applied = skip.optimize(ir, next(s for s in skip.sites(ir) if not s.present))
    assert isinstance(applied, Applied), applied
    mod = PyModule(applied.ir)
    why = walk_of(mod, mod.kernels()[0])
    assert isinstance(why, str) and "the work of a tile depends on the tile" in why, why


@pytest.mark.parametrize("bounds, walks", [("range(pid * 4, pid * 4 + 4)", True),
                                           ("range(0, 4)", True), ("range(0, pid + 1)", False),
                                           ("range(lim)", False)])
def test_a_loop_whose_two_bounds_move_with_the_tile_walks_the_same_steps(bounds: str, walks: bool) -> None:
    text = TUNED.replace("    pid = tl.program_id(0)\n",
                         f"    pid = tl.program_id(0)\n    lim = pid % 3\n    for _ in {bounds}:\n        pass\n")
    assert text != TUNED
    mod = PyModule(kir.parse(text, language="triton"))
    why = walk_of(mod, mod.kernels()[0])
    assert isinstance(why, str) != walks, why
