"""Shared helpers for the kir / anchors / diff tests (no tests of its own).

Imported as `test_kir_support` (pytest puts tests/ on sys.path).
"""
from __future__ import annotations

import functools
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import anchors
import kir
from kir import kinds as K

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "tests" / "data" / "kernels"
EXAMPLES = ROOT / "experts" / "examples"
SITE = Path(sysconfig.get_paths()["purelib"])

CORPUS = sorted(KERNELS.glob("*")) + sorted(EXAMPLES.glob("*.py"))
TRITON_CORPUS = [p for p in CORPUS if p.suffix == ".py"]
CUDA_CORPUS = [p for p in CORPUS if p.suffix in (".cu", ".cuh")]


def real_triton_files(limit: int = 40) -> list[Path]:
    """Triton modules installed in the venv: Triton's own language and inductor templates."""
    found: list[Path] = []
    for rel in ("torch/_inductor/kernel", "triton/language", "triton/ops", "triton/tools"):
        d = SITE / rel
        if d.is_dir():
            found += sorted(p for p in d.rglob("*.py") if p.stat().st_size > 200)
    return found[:limit]


def real_cuda_headers(per_dir: int = 25) -> list[Path]:
    """CUDA/C++ headers installed from PyPI (ATen .cuh, nvidia-* include dirs), at most
    `per_dir` from each folder, `.cuh` (device code) first."""
    found: list[Path] = []
    for rel in ("torch/include/ATen/native/cuda", "torch/include/ATen/cuda",
                "torch/include/c10/cuda", "nvidia/cuda_nvrtc/include", "nvidia/cu13/include"):
        d = SITE / rel
        if d.is_dir():
            files = sorted((p for p in d.rglob("*") if p.suffix in (".cuh", ".h", ".hpp")
                            and p.stat().st_size > 200), key=lambda p: (p.suffix != ".cuh", p))
            found += files[:per_dir]
    return found


#: Shared hypothesis settings; KLINEAGE_HYPOTHESIS_EXAMPLES raises the count for a deep run.
HYPOTHESIS_SETTINGS = settings(
    max_examples=int(os.environ.get("KLINEAGE_HYPOTHESIS_EXAMPLES", "60")), deadline=None,
    suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def parsed_state(path: str) -> tuple[kir.KernelIR, anchors.AnchorIndex]:
    ir = kir.parse_file(path)
    return ir, anchors.build_index(ir)


@dataclass(frozen=True)
class GeneratedEdit:
    edit: kir.Edit
    node: int  # IR node the edit sits in (old state)
    kind: str  # insert | literal | delete | rename
    new_name: str | None = None


def container_of(index: anchors.AnchorIndex, nid: int) -> anchors.Anchor:
    a = index.enclosing(nid)
    while a.kind not in K.CONTAINERS:
        a = index.get(a.parent)
    return a


def line_start(src: bytes, offset: int) -> int:
    return src.rfind(b"\n", 0, offset) + 1


def edit_sites(ir: kir.KernelIR) -> dict[str, list[int]]:
    """Node ids where each edit kind can be made without breaking the syntax."""
    in_body = {n.id for f in ir.find([K.KERNEL, K.FUNCTION]) for n in ir.walk(f)}
    if ir.language is kir.Language.TRITON:
        stmts = [n.id for n in ir.nodes if n.grammar_type == "SimpleStatementLine"
                 and n.id in in_body]
        deletable = [s for s in stmts
                     if len(ir.children_of(ir.parent_of(s))) > 1
                     and ir.source[line_start(ir.source, ir.span_of(s).start):
                                   ir.span_of(s).start].strip() == b""]
        literals = [n.id for n in ir.nodes if n.grammar_type == "Integer"]
        funcs = [n.id for n in ir.find([K.KERNEL, K.FUNCTION])
                 if ir.kind_of(ir.parent_of(n.id)) == K.MODULE]
        return {"insert": stmts, "literal": literals, "delete": deletable, "rename": funcs}
    blocks = [n.id for n in ir.nodes if n.grammar_type == "compound_statement"
              and n.id in in_body]
    literals = [n.id for n in ir.nodes if n.grammar_type == "number_literal"
                and n.id in in_body]
    stmts = [n.id for n in ir.nodes if n.grammar_type == "expression_statement"
             and ir.grammar_type_of(ir.parent_of(n.id)) == "compound_statement"]
    return {"insert": blocks, "literal": literals, "delete": stmts, "rename": []}


@st.composite
def edits(draw) -> tuple[str, GeneratedEdit]:  # type: ignore[no-untyped-def]
    path = str(draw(st.sampled_from(CORPUS)))
    ir, _ = parsed_state(path)
    sites = edit_sites(ir)
    kind = draw(st.sampled_from([k for k, v in sites.items() if v]))
    nid = draw(st.sampled_from(sites[kind]))
    span = ir.span_of(nid)
    value = draw(st.integers(0, 999))
    if kind == "insert" and ir.language is kir.Language.TRITON:
        indent = span.start - line_start(ir.source, span.start)
        text = f"tmp_{value} = {value}\n" + " " * indent
        return path, GeneratedEdit(kir.Edit(kir.Span(span.start, span.start), text), nid, kind)
    if kind == "insert":  # right after the `{` of a CUDA block
        at = span.start + 1
        return path, GeneratedEdit(kir.Edit(kir.Span(at, at), f" int tmp_{value} = {value};"),
                                   nid, kind)
    if kind == "literal":
        return path, GeneratedEdit(kir.Edit(span, str(value)), nid, kind)
    if kind == "delete":
        if ir.language is kir.Language.TRITON:  # the whole line, newline included
            start = line_start(ir.source, span.start)
            end = ir.source.index(b"\n", span.end - 1) + 1 if b"\n" in ir.source[span.end - 1:] \
                else span.end
            return path, GeneratedEdit(kir.Edit(kir.Span(start, end), ""), nid, kind)
        return path, GeneratedEdit(kir.Edit(span, ";"), nid, kind)
    name_node = next(c for c in ir.children_of(nid) if ir.grammar_type_of(c) == "Name")
    new_name = f"renamed_{value}"
    return path, GeneratedEdit(kir.Edit(ir.span_of(name_node), new_name), nid, kind, new_name)


