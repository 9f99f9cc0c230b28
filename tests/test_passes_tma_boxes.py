"""Tensor descriptors on hand-written tile loads: the box is read by role, the rewrite keeps the
original loads for tensors a descriptor cannot read, and both paths match torch (interpreter)."""
from __future__ import annotations

import os
import re
from pathlib import Path
from types import ModuleType

import pytest

import kir
from module_helpers import load_module
from passes import get_pass
from passes.base import Applied
from passes.triton._py import PyModule
from passes.triton.tma import _operand_boxes

torch = pytest.importorskip("torch")

# Named index vectors built before the loop, inline K offsets, explicit strides.
NAMED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * sam + (k0 + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    mm[(triton.cdiv(M, 16), triton.cdiv(N, 16))](a, b, c, M, N, K, a.stride(0), a.stride(1),
                                                 b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                                                 BM=16, BN=16, BK=16)
    return c
'''

# Other names, a batch offset folded into the base, index built inside the loop, the contiguous
# axis with no stride written, bounds as named booleans, a transposed second operand.
STYLED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def bmm_nt(x, y, out, M, N, K, sxb, syb, sob, TILE: tl.constexpr, TK: tl.constexpr):
    z = tl.program_id(2)
    rows = tl.program_id(0) * TILE + tl.arange(0, TILE)
    cols = tl.program_id(1) * TILE + tl.arange(0, TILE)
    row_ok = rows < M
    col_ok = cols < N
    xb = x + z * sxb
    yb = y + z * syb
    total = tl.zeros((TILE, TILE), tl.float32)
    for t in tl.range(0, tl.cdiv(K, TK)):
        ks = t * TK + tl.arange(0, TK)
        k_ok = ks < K
        xt = tl.load(xb + rows[:, None] * K + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.)
        yt = tl.load(yb + cols[:, None] * K + ks[None, :], mask=col_ok[:, None] & k_ok[None, :], other=0.)
        total = tl.dot(xt, tl.trans(yt), total)
    tl.store(out + z * sob + rows[:, None] * N + cols[None, :], total.to(out.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])


def run(x, y):
    nb, M, K = x.shape
    N = y.shape[1]
    out = torch.empty((nb, M, N), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 16), nb)
    bmm_nt[grid](x, y, out, M, N, K, x.stride(0), y.stride(0), out.stride(0), TILE=16, TK=16)
    return out
'''

# The second operand stored N x K (a linear layer's weight) and loaded as a K x N tile: its
# contiguous axis is the tile's first.
FLIPPED = NAMED.replace("b = tl.load(b_ptr + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,",
                        "b = tl.load(b_ptr + (k0 + rk)[:, None] + rn[None, :] * sbn,").replace(
    "N = b.shape[1]", "N = b.shape[0]").replace("b.stride(0), b.stride(1)", "b.stride(1), b.stride(0)")

# Pointers walked by the loop (`+= step * stride` after the loads), a K bound written relative to
# the walk, and row / column indices that wrap at their bound instead of a mask on them.
WALKED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm_walk(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
            BLK_M: tl.constexpr, BLK_N: tl.constexpr, BLK_K: tl.constexpr):
    pid = tl.program_id(0)
    per_row = tl.cdiv(N, BLK_N)
    pm = pid // per_row
    pn = pid % per_row
    rows = (pm * BLK_M + tl.arange(0, BLK_M)) % M
    cols = (pn * BLK_N + tl.arange(0, BLK_N)) % N
    ks = tl.arange(0, BLK_K)
    pa = a_ptr + rows[:, None] * s_am + ks[None, :] * s_ak
    pb = b_ptr + ks[:, None] * s_bk + cols[None, :] * s_bn
    acc = tl.zeros((BLK_M, BLK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLK_K)):
        left = K - step * BLK_K
        a = tl.load(pa, mask=ks[None, :] < left, other=0.0)
        b = tl.load(pb, mask=ks[:, None] < left, other=0.0)
        acc = tl.dot(a, b, acc)
        pa += BLK_K * s_ak
        pb += BLK_K * s_bk
    out_r = pm * BLK_M + tl.arange(0, BLK_M)
    out_c = pn * BLK_N + tl.arange(0, BLK_N)
    tl.store(c_ptr + out_r[:, None] * s_cm + out_c[None, :] * s_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(out_r[:, None] < M) & (out_c[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    mm_walk[(triton.cdiv(M, 16) * triton.cdiv(N, 16),)](a, b, c, M, N, K, a.stride(0), a.stride(1),
                                                       b.stride(0), b.stride(1), c.stride(0),
                                                       c.stride(1), BLK_M=16, BLK_N=16, BLK_K=16)
    return c
'''


def _rewrite(source: str) -> str:
    ir = kir.parse(source, language="triton")
    p = get_pass("tma-descriptors")()
    sites = [s for s in p.sites(ir) if not s.present and "operands" in s.detail]
    assert len(sites) == 1, sites
    result = p.optimize(ir, sites[0])
    assert isinstance(result, Applied), result
    return result.ir.text




def _load(source: str, where: Path) -> ModuleType:
    return load_module(source, where, "tma_boxes")


def test_boxes_are_read_through_names_masks_and_batch_offsets() -> None:
    for source, bases in ((NAMED, {"a_ptr", "b_ptr"}), (STYLED, {"xb", "yb"})):
        mod = PyModule(kir.parse(source, language="triton"))
        (kernel,) = mod.kernels()
        boxes = [b for _, b, _ in _operand_boxes(mod, kernel)]
        assert all(not isinstance(b, str) for b in boxes), boxes
        assert {b.base for b in boxes} == bases
    mod = PyModule(kir.parse(STYLED, language="triton"))
    x_box = _operand_boxes(mod, mod.kernels()[0])[0][1]
    assert x_box.shape == ("M", "K") and x_box.stride == ("K", "1")
    assert x_box.index[0].offset == "tl.program_id(0) * TILE" and x_box.index[1].offset == "t * TK"


def test_a_walked_pointer_is_read_at_its_iteration_and_a_wrapped_index_at_its_bound() -> None:
    mod = PyModule(kir.parse(WALKED, language="triton"))
    a_box, b_box = (b for _, b, _ in _operand_boxes(mod, mod.kernels()[0]))
    assert a_box.shape == ("M", "K") and b_box.shape == ("K", "N")
    assert a_box.index[1].offset == "step * BLK_K" and b_box.index[0].offset == "step * BLK_K"
    assert a_box.index[0].offset == "pm * BLK_M" and b_box.index[1].offset == "pn * BLK_N"
    # advanced before the loads: the access reads the next iteration's tile; not a box
    early = WALKED.replace("        pa += BLK_K * s_ak\n", "").replace(
        "        left = K - step * BLK_K\n", "        left = K - step * BLK_K\n        pa += BLK_K * s_ak\n")
    mod = PyModule(kir.parse(early, language="triton"))
    why = _operand_boxes(mod, mod.kernels()[0])[0][1]
    assert isinstance(why, str) and "after the access" in why


@pytest.mark.parametrize("change", [
    # compiler hints on the index vectors, rebinding them
    ("    rk = tl.arange(0, BK)\n",
     "    rk = tl.arange(0, BK)\n    rm = tl.max_contiguous(tl.multiple_of(rm, BM), BM)\n"),
    # indices computed in 64 bits
    ("    rm = tl.program_id(0) * BM + tl.arange(0, BM)\n",
     "    rm = (tl.program_id(0) * BM + tl.arange(0, BM)).to(tl.int64)\n"),
    # program indices reordered by tl.swizzle2d, unpacked from a tuple
    ("    rm = tl.program_id(0) * BM + tl.arange(0, BM)\n    rn = tl.program_id(1) * BN + tl.arange(0, BN)\n",
     "    pm, pn = tl.swizzle2d(tl.program_id(0), tl.program_id(1), tl.num_programs(0), tl.num_programs(1), 4)\n"
     "    rm = pm * BM + tl.arange(0, BM)\n    rn = pn * BN + tl.arange(0, BN)\n"),
])
def test_boxes_are_read_through_hints_casts_and_swizzled_program_ids(change: tuple[str, str]) -> None:
    text = NAMED.replace(*change)
    assert text != NAMED
    mod = PyModule(kir.parse(text, language="triton"))
    boxes = [b for _, b, _ in _operand_boxes(mod, mod.kernels()[0])]
    assert all(not isinstance(b, str) for b in boxes), boxes
    assert [b.shape for b in boxes] == [("M", "K"), ("K", "N")]


def test_descriptor_coordinates_of_a_64_bit_index_are_cast_to_32_bits() -> None:
    text = NAMED.replace("    rm = tl.program_id(0) * BM + tl.arange(0, BM)\n",
                         "    rm = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM)\n")
    ir = kir.parse(text, language="triton")
    p = get_pass("tma-descriptors")()
    result = p.optimize(ir, next(s for s in p.sites(ir) if not s.present))
    assert isinstance(result, Applied)
    assert "(tl.program_id(0).to(tl.int64) * BM).to(tl.int32)" in result.ir.unparse()


def test_an_unmasked_axis_from_zero_is_bounded_by_its_block() -> None:
    # an attention-style load: keys masked by sequence position, the head dimension read whole
    head = NAMED.replace("mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)",
                         "mask=rm[:, None] < M, other=0.0)").replace(
        "(k0 + rk)[None, :] * sak", "rk[None, :] * sak")
    mod = PyModule(kir.parse(head, language="triton"))
    box = _operand_boxes(mod, mod.kernels()[0])[0][1]
    assert not isinstance(box, str) and box.shape == ("M", "BK")


def test_a_k_loop_inside_a_loop_over_tiles_gets_its_descriptors_before_it(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # each program walks several column tiles: the K loop is nested, its boxes read the outer index
    nested = NAMED.replace(
        "    rn = tl.program_id(1) * BN + tl.arange(0, BN)\n", "").replace(
        "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n    for k0 in range(0, K, BK):\n",
        "    for j in range(0, tl.cdiv(N, BN)):\n        rn = j * BN + tl.arange(0, BN)\n"
        "        acc = tl.zeros((BM, BN), dtype=tl.float32)\n        for k0 in range(0, K, BK):\n")
    lines = nested.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if "for k0 in" in line) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("def run"))
    lines[start:end - 2] = ["    " + line if line.strip() else line for line in lines[start:end - 2]]
    nested = "".join(lines).replace("mm[(triton.cdiv(M, 16), triton.cdiv(N, 16))]", "mm[(triton.cdiv(M, 16), 1)]")
    text = _rewrite(nested)
    # built once per program, before the tile loop: nothing they read changes in it
    assert "\n    if TMA_OK:  # tensor descriptors (TMA)\n" in text
    assert text.index("if TMA_OK:  #") < text.index("for j in range(") < text.index("for k0 in")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    module = _load(text, tmp_path)
    g = torch.Generator().manual_seed(1)
    for m, n, k in ((48, 40, 64), (37, 21, 45)):
        a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
        assert torch.allclose(module.run(a, b), a @ b, atol=1e-3, rtol=1e-3), (m, n, k)


def test_a_pointer_advanced_in_the_loop_or_a_mask_of_another_form_is_not_a_box() -> None:
    advanced = NAMED.replace(
        "        a = tl.load(a_ptr + rm[:, None] * sam + (k0 + rk)[None, :] * sak,\n",
        "        a_ptr += BK * sak\n        a = tl.load(a_ptr + rm[:, None] * sam + (k0 + rk)[None, :] * sak,\n")
    mod = PyModule(kir.parse(advanced, language="triton"))
    why = [b for _, b, _ in _operand_boxes(mod, mod.kernels()[0])]
    assert isinstance(why[0], str) and "assigned more than once" in why[0]
    causal = NAMED.replace("mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K)",
                           "mask=(rm[:, None] < M) & ((k0 + rk)[None, :] <= rm[:, None])")
    mod = PyModule(kir.parse(causal, language="triton"))
    why = [b for _, b, _ in _operand_boxes(mod, mod.kernels()[0])]
    assert isinstance(why[0], str) and "bound" in why[0]
    assert not isinstance(why[1], str)


def test_the_rewrite_keeps_the_pointer_path_for_tensors_a_descriptor_cannot_read(tmp_path: Path) -> None:
    text = _rewrite(NAMED)
    # the operands' tiles and the output tile (the accumulator's store) through descriptors
    assert text.count("tl.make_tensor_descriptor(") == 3 and "triton.set_allocator(" in text
    assert "c_desc.store([tl.program_id(0) * BM, tl.program_id(1) * BN], acc.to(" in text
    # done: the rule sees its descriptor loads as present and offers no second rewrite
    sites = get_pass("tma-descriptors")().sites(kir.parse(text, language="triton"))
    assert [s.present for s in sites] == [True] and sites[0].detail["guarded"] == 2
    assert "if TMA_OK:" in text and "TMA_OK: tl.constexpr = False" in text
    assert "TMA_OK=_descriptors_fit(a, b, c, M, N, K)" in text
    module = _load(text, tmp_path)
    a = torch.zeros(40, 48, dtype=torch.float16)
    assert module._descriptors_fit(a, 3)
    assert not module._descriptors_fit(torch.zeros(40, 45, dtype=torch.float16))  # 90-byte rows
    assert not module._descriptors_fit(a[:, ::2])  # no axis dense
    assert not module._descriptors_fit(torch.zeros(64)[::8])  # a strided vector
    # a transposed view fits: the launch checks that its dense axis is the one each
    # descriptor reads last
    assert module._descriptors_fit(a.t())


@pytest.mark.parametrize("source", [NAMED, STYLED, FLIPPED, WALKED],
                         ids=["named", "styled", "flipped", "walked"])
def test_both_paths_match_torch_under_the_interpreter(source: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("interpreter not enabled")
    text = _rewrite(source)
    assert (source is FLIPPED) == ("tl.trans(b_desc.load([" in text)
    # the batched product reads its operands through rank-3 descriptors over the whole tensors
    # (the batch a program's id names first) and keeps its output a pointer store
    assert (source is STYLED) == ("block_shape=[1, " in text) == ("_desc.store([" not in text)
    module = _load(text, tmp_path)
    g = torch.Generator().manual_seed(0)
    for m, n, k in ((48, 32, 64), (40, 24, 64), (37, 21, 45)):  # aligned: descriptors (partial
        # tiles in m and n on the second); unaligned: pointers
        if source is NAMED or source is WALKED:
            a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
            ref = a @ b
        elif source is FLIPPED:
            a, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
            ref = a @ b.t()
        else:
            a, b = torch.randn(2, m, k, generator=g), torch.randn(2, n, k, generator=g)
            ref = a @ b.transpose(1, 2)
        assert module._descriptors_fit(a, b) == (k % 4 == 0)  # fp32 rows: 16 bytes = 4 elements
        out = module.run(a, b)
        assert torch.allclose(out, ref, atol=1e-3, rtol=1e-3), (m, n, k)


def test_a_base_offset_by_a_batch_of_known_extent_is_lifted_to_rank_three() -> None:
    """`ptr + index * stride` with the index a program id (extent `tl.num_programs`) or taken
    modulo a parameter (extent that parameter), through names assigned once; a base of two
    offsets, or an index of unknown extent, is not lifted."""
    import ast

    from passes.triton.affine import Scope
    from passes.triton.tma import _lift

    src = STYLED.replace("    z = tl.program_id(2)\n",
                         "    z = tl.program_id(axis=2)\n    h = tl.program_id(1) % N\n"
                         "    w = tl.program_id(1) // N\n")
    mod = PyModule(kir.parse(src, language="triton"))
    scope = Scope(mod, mod.kernels()[0])
    lift = _lift(scope, "xb")
    assert lift is not None and (lift.ptr, lift.index, lift.stride, lift.extent) == \
        ("x", "z", "sxb", "tl.num_programs(2)")
    assert lift.names == {"x", "sxb"}
    assert _lift(scope, "y + h * syb").extent == "N"
    assert _lift(scope, "y + w * syb") is None  # the extent of a quotient is not written
    assert _lift(scope, "x + z * sxb + h * syb") is None
    assert _lift(scope, "x") is None
    ast.parse(src)


def test_which_stride_is_unit_is_read_from_what_the_host_passes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """B stored N x K and read as a K x N tile through two stride parameters: the host passes
    `b.stride(1)` (1, dense rows) for the tile's first axis. The descriptor reads the transposed
    view, whose last stride is that one (a descriptor's last stride must be 1), and the host's
    flag checks each descriptor's last stride is 1 at every launch; the tile matches torch."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    source = NAMED.replace("N = b.shape[1]", "N = b.shape[0]").replace(
        "b.stride(0), b.stride(1)", "b.stride(1), b.stride(0)")
    assert source != NAMED
    text = _rewrite(source)
    assert "tl.trans(b_desc.load([" in text
    assert "strides=[sbn, sbk]" in text
    assert " and b.stride(1) == 1" in text and " and a.stride(1) == 1" in text
    module = _load(text, tmp_path)
    g = torch.Generator().manual_seed(0)
    for m, n, k in ((48, 32, 64), (37, 21, 45)):  # descriptors (aligned), then pointers
        a, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
        assert module._descriptors_fit(a, b) == (k % 4 == 0)
        assert torch.allclose(module.run(a, b), a @ b.t(), atol=1e-3, rtol=1e-3), (m, n, k)


# The reduction split in two loops (a full part read unmasked, a tail read masked), each binding
# its own `kk`: the name is rebound, yet each loop reads its own value.
SPLIT = '''
import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    full = K // BK * BK
    for k0 in range(0, full, BK):
        kk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :])
        b = tl.load(b_ptr + kk[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    for k0 in range(full, K, BK):
        kk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = a.new_empty((M, N))
    mm[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BM=32, BN=32, BK=32)
    return c
'''


def test_a_loop_split_in_two_reads_its_own_index_and_its_siblings_bounds() -> None:
    """Both loops' loads are boxes: each loop's `kk` is its own assignment, and the unmasked
    loads of the full part take the bounds of the same pointer's masked load in the tail (an
    unmasked load reads in bounds). One descriptor per operand serves both loops."""
    ir = kir.parse(SPLIT, "triton")
    mod = PyModule(ir)
    boxes = _operand_boxes(mod, mod.kernels()[0])
    assert len(boxes) == 4 and not any(isinstance(b, str) for _, b, _ in boxes), boxes
    step = get_pass("tma-descriptors")()
    site = next(s for s in step.sites(ir) if not s.present and "operands" in s.detail)
    made = step.optimize(ir, site)
    assert isinstance(made, Applied)
    text = made.ir.unparse()
    assert text.count("tl.make_tensor_descriptor(a_ptr") == 1
    assert text.count("a_desc.load(") == 2 and text.count("b_desc.load(") == 2
    compile(text, "split.py", "exec")
    # without the sibling's mask an unmasked load has no bounds: not a box
    alone = SPLIT[:SPLIT.index("    for k0 in range(full, K, BK):")]
    mod = PyModule(kir.parse(alone, "triton"))
    assert all(isinstance(b, str) for _, b, _ in _operand_boxes(mod, mod.kernels()[0]))


def test_a_rank_three_descriptor_load_read_as_a_tile_leaves_no_open_site() -> None:
    """A batched operand lifted to a rank-3 descriptor is read `desc.load([z, r, k]).reshape(...)`
    beside its pointer path: that pointer load is taken, so the rule offers no second
    descriptor for it (applied wherever it takes the kernel, it stops after one rewrite)."""
    rule = get_pass("tma-descriptors")()
    ir = kir.parse(STYLED, language="triton")
    taken = 0
    for _ in range(4):
        open_sites = [s for s in rule.sites(ir) if not s.present]
        made = next((r for s in open_sites for r in [rule.optimize(ir, s)] if isinstance(r, Applied)),
                    None)
        if made is None:
            break
        ir, taken = made.ir, taken + 1
    text = ir.unparse()
    assert taken == 1
    assert ".reshape(" in text and text.count("tl.make_tensor_descriptor(") == 2


# Pointers walked by a K loop split in two: whole tiles unmasked up to `full` (a multiple of the
# step), then the tail masked; each half advances both pointers once per iteration.
SPLIT_WALK = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm_split(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    pa = a_ptr + rm[:, None] * s_am + rk[None, :] * s_ak
    pb = b_ptr + rk[:, None] * s_bk + rn[None, :] * s_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    full = K // BK * BK
    for k0 in range(0, full, BK):
        a = tl.load(pa, mask=rm[:, None] < M, other=0.0)
        b = tl.load(pb, mask=rn[None, :] < N, other=0.0)
        acc = tl.dot(a, b, acc)
        pa += BK * s_ak
        pb += BK * s_bk
    for k0 in range(full, K, BK):
        kk = k0 + rk
        a = tl.load(pa, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(pb, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        pa += BK * s_ak
        pb += BK * s_bk
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = a.new_empty((M, N))
    mm_split[(triton.cdiv(M, 16), triton.cdiv(N, 16))](a, b, c, M, N, K, a.stride(0), a.stride(1),
                                                       b.stride(0), b.stride(1), BM=16, BN=16, BK=16)
    return c
'''


def test_a_pointer_walked_by_a_loop_split_in_two_is_a_box_in_both_halves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second half's counter starts where the first half stopped (a multiple of the step):
    in both halves the walked pointer is at the counter, so each load reads the box at `k0`
    (the first half's unmasked K axis bounded by the walk, the tail's by its mask), and the
    rewritten kernel matches torch under the interpreter. Where the second half's counter is
    not where the pointer stands, the loads are refused."""
    mod = PyModule(kir.parse(SPLIT_WALK, "triton"))
    boxes = _operand_boxes(mod, mod.kernels()[0])
    assert len(boxes) == 4 and not any(isinstance(b, str) for _, b, _ in boxes), boxes
    assert [(b.index[0].offset, b.index[1].offset) for _, b, _ in boxes] == \
        [("tl.program_id(0) * BM", "k0"), ("k0", "tl.program_id(1) * BN")] * 2
    assert [b.shape for _, b, _ in boxes] == [("M", "K // BK * BK"), ("K // BK * BK", "N"),
                                              ("M", "K"), ("K", "N")]
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    text = _rewrite(SPLIT_WALK)
    assert text.count("tl.make_tensor_descriptor(a_ptr") == 2
    assert text.count(".load([tl.program_id(0) * BM, k0]) if TMA_OK else tl.load(pa") == 2
    module = _load(text, tmp_path)
    g = torch.Generator().manual_seed(0)
    for m, n, k in ((32, 48, 64), (24, 40, 56), (20, 33, 45)):  # whole tiles, a tail, unaligned
        a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
        assert torch.allclose(module.run(a, b), a @ b, atol=1e-3, rtol=1e-3), (m, n, k)
    for old, new in (("full = K // BK * BK", "full = K // 2"),  # may stop inside a step
                     ("range(full, K, BK)", "range(full + BK, K, BK)"),  # not where it stopped
                     ("range(0, full, BK)", "range(BK, full, BK)"),  # not walked from 0
                     ("range(full, K, BK)", "range(full, K, 2 * BK)")):  # another step
        source = SPLIT_WALK.replace(old, new)
        assert source != SPLIT_WALK
        mod = PyModule(kir.parse(source, "triton"))
        boxes = _operand_boxes(mod, mod.kernels()[0])
        assert boxes and all(isinstance(b, str) for _, b, _ in boxes), (new, boxes)
    # counted in tiles (unit steps): the first half stops exactly at its bound, whatever it is,
    # unless the second half reads that bound after it was rebound
    tiles = SPLIT_WALK.replace("full = K // BK * BK", "tiles = K // BK").replace(
        "range(0, full, BK)", "range(0, tiles)").replace(
        "range(full, K, BK)", "range(tiles, tl.cdiv(K, BK))").replace(
        "kk = k0 + rk", "kk = k0 * BK + rk")
    for source, walks in ((tiles, True), (tiles.replace(
            "    for k0 in range(tiles,", "    tiles = tiles + 1\n    for k0 in range(tiles,"), False)):
        mod = PyModule(kir.parse(source, "triton"))
        boxes = _operand_boxes(mod, mod.kernels()[0])
        assert [isinstance(b, str) for _, b, _ in boxes] == [not walks] * 4, boxes
        assert not walks or boxes[2][1].index[1].offset == "k0 * BK"


WIDE_PIDS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def wide_mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1).to(tl.int64)
    row0 = i * BM
    rm = row0 + tl.arange(0, BM)
    rn = j * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float16, device=a.device)
    wide_mm[(triton.cdiv(M, 64), triton.cdiv(N, 64))](a, b, c, M, N, K, a.stride(0), a.stride(1),
                                                      b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                                                      BM=64, BN=64, BK=32)
    return c
'''


def test_descriptor_coordinates_read_from_64_bit_program_ids_are_cast_to_32_bits(tmp_path) -> None:
    """Program ids widened to int64 in a statement of their own (and a row base computed from
    one) give 64-bit tile coordinates, which a descriptor refuses at compile time ("Expected a
    32-bit integer"): each such coordinate is cast back, and the kernel compiles for sm_90."""
    from module_helpers import compiled_for_sm90

    ir = kir.parse(WIDE_PIDS, "triton")
    tma = get_pass("tma-descriptors")()
    site = next(s for s in tma.sites(ir) if not s.present)
    result = tma.optimize(ir, site)
    assert isinstance(result, Applied), result
    out = result.ir.unparse()
    assert "(row0).to(tl.int32)" in out and "(j * BN).to(tl.int32)" in out
    flag = re.search(r"\b(TMA_OK\w*): tl\.constexpr", out).group(1)
    tiles = {"BM": 64, "BN": 64, "BK": 32, flag: True, "sak": 1, "sbn": 1, "scn": 1}
    assert "cp.async.bulk.tensor" in compiled_for_sm90(out, tmp_path, "wide", "wide_mm", tiles)["ptx"]
