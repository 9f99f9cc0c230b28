"""Real-world source installed in the venv: Triton's own modules, torch inductor's Triton
templates and the CUDA/C++ headers shipped in PyPI wheels (ATen .cuh, nvidia-* includes).

Each file must parse, round-trip byte for byte and anchor with unique ids. Skips when the
packages are not installed.
"""
from __future__ import annotations

import collections

import pytest

import anchors
import kir
from test_kir_support import SITE, real_cuda_headers, real_triton_files

TRITON = real_triton_files()
CUDA = real_cuda_headers()


def _check(path):  # type: ignore[no-untyped-def]
    text = path.read_text(encoding="utf-8")
    ir = kir.parse_file(path)
    assert ir.unparse() == text
    index = anchors.build_index(ir)
    ids = [a.id for a in index]
    assert len(ids) == len(set(ids)), path
    for a in index:
        assert a.parent is None or index.get(a.parent) is not None
    return ir, index


@pytest.mark.skipif(not TRITON, reason="no Triton / torch inductor modules installed")
def test_real_triton_modules_parse_round_trip_and_anchor():
    kinds: collections.Counter[str] = collections.Counter()
    for path in TRITON:
        ir, index = _check(path)
        kinds.update(a.kind for a in index)
    assert kinds["function"] > 10 and kinds["loop"] > 10 and kinds["call"] > 100


@pytest.mark.skipif(not (SITE / "triton/language/standard.py").exists(),
                    reason="triton not installed")
def test_triton_standard_library_jit_functions_are_kernels():
    ir, index = _check(SITE / "triton/language/standard.py")
    kernels = ir.find("kernel")
    assert len(kernels) > 5  # @jit / @core._tensor_member_fn-wrapped @jit helpers
    assert all("jit" in k.attrs["decorators"] or "triton.jit" in k.attrs["decorators"]
               for k in kernels)


@pytest.mark.skipif(not CUDA, reason="no CUDA/C++ headers installed from PyPI")
def test_real_cuda_headers_parse_round_trip_and_anchor():
    kinds: collections.Counter[str] = collections.Counter()
    recovered = 0
    for path in CUDA:
        try:
            ir, index = _check(path)
        except kir.ParseError:
            continue  # macro-heavy headers tree-sitter cannot recover are reported, not crashed
        recovered += ir.error_nodes > 0
        kinds.update(a.kind for a in index)
    assert kinds["function"] > 20 and kinds["class"] > 5 and kinds["loop"] > 5
    assert kinds["kernel"] >= 5 and kinds["launch"] >= 5 and kinds["pragma"] >= 1


@pytest.mark.skipif(not CUDA, reason="no CUDA/C++ headers installed from PyPI")
def test_most_real_headers_parse():
    failures = []
    for path in CUDA:
        try:
            kir.parse_file(path)
        except kir.ParseError as exc:
            failures.append(str(exc))
    assert len(failures) <= len(CUDA) // 10, failures
