"""Hypothesis properties of anchors over generated edits of the corpus kernels.

Edits are generated on real kernel text (insert a statement, change a literal, delete a
statement, rename a function) so every generated state parses. Properties: lossless round trip,
ids unique, an edit inside one container leaves every anchor outside it unchanged, and every
old anchor resolves in the new state (exact, else by structure hash) or is reported gone.
"""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import anchors
import kir
from kir import kinds as K
from test_kir_support import (CORPUS, HYPOTHESIS_SETTINGS as SETTINGS, container_of,
                              line_start, edit_sites, parsed_state, edits)


def _outside(index: anchors.AnchorIndex, container: anchors.Anchor) -> dict[str, tuple]:
    prefix = container.id + "/"
    return {a.id: (a.kind, a.name) for a in index
            if a.id != container.id and not a.id.startswith(prefix)}


@SETTINGS
@given(edits())
def test_edit_properties(case):
    path, gen = case
    old_ir, old_index = parsed_state(path)
    new_ir = old_ir.apply([gen.edit])
    new_index = anchors.build_index(new_ir)

    # lossless: the new state's text round-trips and is exactly the edited bytes
    assert new_ir.unparse() == new_ir.text
    assert kir.parse(new_ir.text, old_ir.language).unparse() == new_ir.text
    # unique ids in every state
    ids = [a.id for a in new_index]
    assert len(ids) == len(set(ids))

    container = container_of(old_index, gen.node)
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
    ir, index = parsed_state(str(path))
    cur = ir
    for k in range(n):
        sites = edit_sites(cur)["insert"]
        span = cur.span_of(sites[(k * 7919) % len(sites)])
        if cur.language is kir.Language.TRITON:
            indent = span.start - line_start(cur.source, span.start)
            edit = kir.Edit(kir.Span(span.start, span.start), f"tmp_{k} = {k}\n" + " " * indent)
        else:
            edit = kir.Edit(kir.Span(span.start + 1, span.start + 1), f" int tmp_{k} = {k};")
        cur = cur.apply([edit])
    new_index = anchors.build_index(cur)
    assert {a.id for a in index} <= {a.id for a in new_index}
    assert len(new_index) == len(index) + n  # one new assign anchor per insertion
