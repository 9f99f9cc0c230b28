"""Hypothesis properties of anchors.diff over generated edits of the corpus kernels."""
from __future__ import annotations

from hypothesis import given

import anchors
import kir
from test_kir_support import HYPOTHESIS_SETTINGS, edits, parsed_state


@HYPOTHESIS_SETTINGS
@given(edits())
def test_diff_of_an_edit_is_small_local_and_names_real_anchors(case):
    path, gen = case
    old, old_index = parsed_state(path)
    new = old.apply([gen.edit])
    new_index = anchors.build_index(new)
    script = anchors.diff(old, new)
    assert anchors.diff(old, old).actions == ()
    if new.text == old.text:
        assert script.actions == ()
        return
    assert script.actions, "a textual change inside code must show up in the diff"
    for act in script.actions:
        index = new_index if act.action == "insert" else old_index
        assert index.get(act.anchor) is not None, act
        if act.action in ("update", "move"):
            assert new_index.get(act.new_anchor) is not None, act
        # an action on the old side sits on or around the edited bytes, or is a move
        if act.action in ("delete", "update"):
            assert act.src.overlaps(gen.edit.span) or act.src.contains(gen.edit.span) or \
                gen.edit.span.contains(act.src), act
    if gen.kind == "literal":
        # one literal replaced by another: exactly one update of that literal
        (act,) = script.actions
        assert act.action == "update" and act.new_text == gen.edit.replacement
    if gen.kind == "insert":
        assert [a.action for a in script.actions] == ["insert"]
        assert script.actions[0].subtree
    # unchanged nodes before the edit map onto themselves
    before = [i for i in range(len(old)) if old.span_of(i).end <= gen.edit.span.start
              and not old.children_of(i)]
    assert all(script.mapping.get(i) == i for i in before)
