"""The expert GEMM's structure rebuilt on held-out start kernels by the project's rewrites
(grouped order -> persistent grid -> descriptors): the output tile is stored through a
descriptor on the flagged fast path (the epilogue kept), and both paths match the case's
reference under the interpreter; found by role, not by name. The tile loop is flattened into
the K loop only where that loop already loads through descriptors, as in the expert the
flattened loop was recorded from."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import gate
import kir
from module_helpers import load_module
from test_passes_persist import _apply

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
HELDOUT = REPO / "bench" / "heldout"
STEPS = (("grouped-ordering", "kernel"), ("persistent-grid", "role"), ("tma-descriptors", "operands"))

# mm1024's start kernel with every name a rewrite could key on changed: kernel, parameters,
# constexprs, index vectors, the accumulator, the stored value and the K loop's variable.
RENAMES = {"matmul_kernel": "prod", "a_ptr": "lhs", "b_ptr": "rhs", "c_ptr": "dst", "BM": "TR",
           "BN": "TC", "BK": "DEPTH", "rm": "r", "rn": "q", "rk": "d", "acc": "total", "c": "y",
           "k0": "kk", "pid_m": "i", "pid_n": "j"}


def _persistent(source: str) -> str:
    ir = kir.parse(source, language="triton")
    for name, key in STEPS:
        ir = _apply(ir, name, key)
    return ir.text


def _aligned(shape: dict) -> dict:
    """The shape with K and N rounded up to 16 elements: rows a descriptor can address (M and
    the tiles' edges stay ragged)."""
    return {**shape, **{d: -(-shape[d] // 16) * 16 for d in ("K", "N") if d in shape}}


def _check_against_reference(text: str, case: gate.Case, tmp_path: Path) -> None:
    module, ops = load_module(text, tmp_path), case.module()
    shape = dict(next(iter(case.small_shapes.values())))
    for s, descriptors in ((shape, None), (_aligned(shape), True)):
        inputs = ops.make_inputs(s, 7, "cpu")
        if descriptors is not None:
            assert module._descriptors_fit(*inputs) is descriptors
        out, ref = module.run(*inputs).float(), ops.reference(*inputs).float()
        tol = case.tolerance_for(s["dtype"])
        assert out.shape == ref.shape
        assert float((out - ref).abs().max()) <= tol * max(1.0, float(ref.abs().max())), (case.name, s)


@pytest.mark.parametrize("op", ["bmm", "addmm", "mm1024"])
def test_heldout_start_kernels_rebuilt_persistent_with_a_descriptor_store(
        op: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    case = gate.load_case(HELDOUT / op)
    text = _persistent(case.start_path().read_text())
    # made persistent over pointer loads (descriptors came after): a plain loop
    assert re.search(r"for \w+ in range\(tl\.program_id\(0\), .*, tl\.num_programs\(0\)\):", text)
    assert re.search(r"if TMA_OK:  # the output tile through a tensor descriptor \(TMA\)\n"
                     r"(\s+\w+ = tl\.make_tensor_descriptor\(.*\)\n)?\s+\w+_desc\.store\(\[", text)
    assert re.search(r"else:\n\s+tl\.store\(", text)  # the pointer store kept for the slow path
    if op == "addmm":  # the epilogue between the dot loop and the store stays
        assert text.index("acc = acc + bias_row[None, :]") < text.index("out_desc.store([")
    _check_against_reference(text, case, tmp_path)


def test_the_output_tile_is_found_by_role_under_other_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    case = gate.load_case(HELDOUT / "mm1024")
    source = case.start_path().read_text()
    for old, new in RENAMES.items():
        source = re.sub(rf"\b{old}\b", new, source)
    assert "acc" not in source and "BM" not in source and "c_ptr" not in source
    text = _persistent(source)
    assert "tl.num_programs(0)):" in text
    assert "dst_desc.store([i * TR, j * TC], y)" in text
    _check_against_reference(text, case, tmp_path)


def test_a_recorded_loop_header_sets_the_keywords_over_descriptor_loads_only() -> None:
    from passes import get_pass
    from passes.base import Applied

    # grouped first: its grid reads the tiles from `meta`, as a persistent grid needs
    grouped = _apply(kir.parse((HELDOUT / "mm1024" / "mm_naive.py").read_text(), language="triton"),
                     "grouped-ordering", "kernel")
    described = _apply(grouped, "tma-descriptors", "operands")
    header = "    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True, num_stages=2):\n"
    for ir, options, loop in (
            (described, {"header": header}, "tl.num_programs(0), flatten=True, num_stages=2):"),
            (described, {}, "tl.num_programs(0), flatten=True):"),
            (described, {"header": "    for t in range(s, n, p):\n"}, "tl.num_programs(0)):"),
            (described, {"flatten": False}, "tl.num_programs(0)):"),
            (grouped, {"header": header}, "tl.num_programs(0)):"),  # pointer loads: no keyword
            (grouped, {}, "tl.num_programs(0)):")):
        p = get_pass("persistent-grid")(**options)
        site = next(s for s in p.sites(ir) if not s.present and "role" in s.detail)
        made = p.optimize(ir, site)
        assert isinstance(made, Applied) and loop in made.ir.text, options
        assert ("tl.range(tl.program_id(0)" in made.ir.text) == ("flatten" in loop)


def test_the_probe_writes_the_persistent_variants_on_a_cpu() -> None:
    spec = importlib.util.spec_from_file_location("gemm_probe", REPO / "bench" / "gemm_probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    made = probe.variants((HELDOUT / "mm1024" / "mm_naive.py").read_text(), 2,
                          ["persistent-flat", "persistent"])
    flat, plain = made["persistent-flat"], made["persistent"]
    assert not isinstance(flat, str) and not isinstance(plain, str), made
    assert "flatten=True" in flat[0] and "flatten" not in plain[0]
    assert all("c_desc.store([" in t and "@triton.autotune" in t for t, _ in (flat, plain))


@pytest.mark.parametrize("op", ["mm1024", "addmm", "bmm"])
def test_descriptors_first_then_persistent_declares_them_once_per_program(
        op: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other order (descriptors, then the persistent grid): declarations that read nothing
    the tile body computes stay before the loop (built once per program, as in the expert; the
    output tile's joins the operands'), and the loop over descriptor loads is flattened. bmm's
    operands start at the batch a program's id names: each is read through one rank-3
    descriptor over the whole tensor, whose batch extent (`tl.num_programs(2)`) the persistent
    grid reads as its batch axis's count; its output tile stays a pointer store."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    case = gate.load_case(HELDOUT / op)
    ir = kir.parse(case.start_path().read_text(), language="triton")
    for name, key in (STEPS[0], STEPS[2], STEPS[1]):
        ir = _apply(ir, name, key)
    text = ir.text
    loop = re.search(r"\n(\s+)for \w+ in tl\.range\(tl\.program_id\(0\), .*, tl\.num_programs\(0\), "
                     r"flatten=True\):", text)
    assert loop, text
    # the operands' and the output tile's descriptors: all before the loop
    decls = [m.start() for m in re.finditer(r"tl\.make_tensor_descriptor\(", text)]
    assert len(decls) == (2 if op == "bmm" else 3)
    assert all(at < loop.start() for at in decls)
    if op == "bmm":
        assert "block_shape=[1, " in text and "tl.num_programs(2)" not in text
        assert ".reshape(" in text and "_desc.store([" not in text
    _check_against_reference(text, case, tmp_path)


def test_a_product_named_before_it_is_accumulated_and_a_body_that_uses_tile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tile = tl.dot(a, b)` then `acc += tile`: the accumulator is found through the name the
    product is given (grouped order, descriptors and the persistent grid all apply), and the
    persistent loop's index takes a name the body does not use."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    case = gate.load_case(HELDOUT / "bmm")
    source = case.start_path().read_text()
    named = source.replace("        acc += tl.dot(a_tile, b_tile)",
                           "        tile = tl.dot(a_tile, b_tile)\n        acc += tile")
    assert named != source
    ir = kir.parse(named, language="triton")
    for name, key in (STEPS[0], STEPS[2], STEPS[1]):
        ir = _apply(ir, name, key)
    text = ir.text
    assert re.search(r"for tile_2 in tl\.range\(tl\.program_id\(0\), .*flatten=True\):", text), text
    assert "tile = tl.dot(" in text and "acc += tile\n" in text
    _check_against_reference(text, case, tmp_path)
