"""Hypothesis properties of anchors over generated edits of the corpus kernels.

Edits are generated on real kernel text (insert a statement, change a literal, delete a
statement, rename a function) so every generated state parses. Properties: lossless round trip,
ids unique, an edit inside one container leaves every anchor outside it unchanged, and every
old anchor resolves in the new state (exact, else by structure hash) or is reported gone.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import anchors
import kir
from kir import kinds as K
from test_kir_support import CORPUS

SETTINGS = settings(max_examples=int(os.environ.get("KLINEAGE_HYPOTHESIS_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def _state(path: str) -> tuple[kir.KernelIR, anchors.AnchorIndex]:
    ir = kir.parse_file(path)
    return ir, anchors.build_index(ir)


@dataclass(frozen=True)
class GeneratedEdit:
    edit: kir.Edit
    node: int  # IR node the edit sits in (old state)
    kind: str  # insert | literal | delete | rename
    new_name: str | None = None


def _container(index: anchors.AnchorIndex, nid: int) -> anchors.Anchor:
    a = index.enclosing(nid)
    while a.kind not in K.CONTAINERS:
        a = index.get(a.parent)
    return a


def _line_start(src: bytes, offset: int) -> int:
    return src.rfind(b"\n", 0, offset) + 1


def _sites(ir: kir.KernelIR) -> dict[str, list[int]]:
    """Node ids where each edit kind can be made without breaking the syntax."""
    in_body = {n.id for f in ir.find([K.KERNEL, K.FUNCTION]) for n in ir.walk(f)}
    if ir.language is kir.Language.TRITON:
        stmts = [n.id for n in ir.nodes if n.grammar_type == "SimpleStatementLine"
                 and n.id in in_body]
        deletable = [s for s in stmts
                     if len(ir.children_of(ir.parent_of(s))) > 1
                     and ir.source[_line_start(ir.source, ir.span_of(s).start):
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
    ir, _ = _state(path)
    sites = _sites(ir)
    kind = draw(st.sampled_from([k for k, v in sites.items() if v]))
    nid = draw(st.sampled_from(sites[kind]))
    span = ir.span_of(nid)
    value = draw(st.integers(0, 999))
    if kind == "insert" and ir.language is kir.Language.TRITON:
        indent = span.start - _line_start(ir.source, span.start)
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
            start = _line_start(ir.source, span.start)
            end = ir.source.index(b"\n", span.end - 1) + 1 if b"\n" in ir.source[span.end - 1:] \
                else span.end
            return path, GeneratedEdit(kir.Edit(kir.Span(start, end), ""), nid, kind)
        return path, GeneratedEdit(kir.Edit(span, ";"), nid, kind)
    name_node = next(c for c in ir.children_of(nid) if ir.grammar_type_of(c) == "Name")
    new_name = f"renamed_{value}"
    return path, GeneratedEdit(kir.Edit(ir.span_of(name_node), new_name), nid, kind, new_name)


def _outside(index: anchors.AnchorIndex, container: anchors.Anchor) -> dict[str, tuple]:
    prefix = container.id + "/"
    return {a.id: (a.kind, a.name) for a in index
            if a.id != container.id and not a.id.startswith(prefix)}


@SETTINGS
@given(edits())
def test_edit_properties(case):
    path, gen = case
    old_ir, old_index = _state(path)
    new_ir = old_ir.apply([gen.edit])
    new_index = anchors.build_index(new_ir)

    # lossless: the new state's text round-trips and is exactly the edited bytes
    assert new_ir.unparse() == new_ir.text
    assert kir.parse(new_ir.text, old_ir.language).unparse() == new_ir.text
    # unique ids in every state
    ids = [a.id for a in new_index]
    assert len(ids) == len(set(ids))

    container = _container(old_index, gen.node)
    if gen.kind == "rename":  # the edit touches the function's own id: its parent is the scope
        container = old_index.get(container.parent)
    old_out, new_out = _outside(old_index, container), _outside(new_index, container)
    if container.kind != K.MODULE:
        # every anchor outside the edited container keeps its id, kind and name
        assert {k: v for k, v in new_out.items() if k in old_out} == old_out
        assert set(old_out) <= set(new_out)

    for a in old_index:
        r = new_index.resolve(a, old_index)
        assert r.status in ("exact", "hash", "gone") and r.old == a.id
        if r.status == "gone":
            assert r.anchor is None
            continue
        assert r.anchor is not None and r.anchor.kind == a.kind
        if r.status == "exact":
            assert r.anchor.id == a.id
        else:
            assert r.anchor.structure_hash == a.structure_hash
        if a.id in old_out and container.kind != K.MODULE:
            assert r.status == "exact"
            assert new_ir.node_text(r.anchor.node) == old_ir.node_text(a.node) or \
                gen.edit.span.overlaps(a.span) or a.span.contains(gen.edit.span)
    if gen.kind in ("insert", "literal"):
        # ids do not depend on literal values, and indices count same-step siblings only
        assert all(new_index.resolve(a, old_index).status == "exact" for a in old_index)
    if gen.kind == "rename":
        old_fn = old_index.of_node(gen.node)
        moved = [a for a in old_index if a.id == old_fn.id or a.id.startswith(old_fn.id + "/")]
        for a in moved:
            r = new_index.resolve(a, old_index)
            assert r.status == "hash", a.id
            assert r.anchor.name == (gen.new_name if a is old_fn else a.name)
            assert r.anchor.id.split("/", 1)[0].endswith(gen.new_name)


@SETTINGS
@given(st.sampled_from(CORPUS), st.integers(1, 3))
def test_sequences_of_insertions_keep_all_ids(path, n):
    ir, index = _state(str(path))
    cur = ir
    for k in range(n):
        sites = _sites(cur)["insert"]
        span = cur.span_of(sites[(k * 7919) % len(sites)])
        if cur.language is kir.Language.TRITON:
            indent = span.start - _line_start(cur.source, span.start)
            edit = kir.Edit(kir.Span(span.start, span.start), f"tmp_{k} = {k}\n" + " " * indent)
        else:
            edit = kir.Edit(kir.Span(span.start + 1, span.start + 1), f" int tmp_{k} = {k};")
        cur = cur.apply([edit])
    new_index = anchors.build_index(cur)
    assert {a.id for a in index} <= {a.id for a in new_index}
    assert len(new_index) == len(index) + n  # one new assign anchor per insertion
