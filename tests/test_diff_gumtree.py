"""anchors.diff: GumTree-style structured diff, simplified to subtree actions naming anchors."""
from __future__ import annotations

import pytest

import anchors
import kir
from kir.errors import BadInputError
from test_kir_support import EXAMPLES, KERNELS

BASE = """import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = x * 2
    tl.store(y_ptr + offs, y, mask=mask)
"""


def _diff(new_text: str, old_text: str = BASE, lang: str = "triton"):
    return anchors.diff(kir.parse(old_text, lang), kir.parse(new_text, lang))


def _summary(script) -> list[tuple[str, str]]:
    return [(a.action, a.anchor) for a in script.actions]


def test_identical_kernels_have_no_actions():
    assert _diff(BASE).actions == ()
    tiled = kir.parse_file(EXAMPLES / "matmul_tiled.py")
    assert anchors.diff(tiled, kir.parse_file(EXAMPLES / "matmul_tiled.py")).actions == ()


def test_literal_change_is_one_update():
    script = _diff(BASE.replace("y = x * 2", "y = x * 3"))
    (act,) = script.actions
    assert (act.action, act.anchor, act.old_text, act.new_text) == (
        "update", "triton:k/assign:y[0]", "2", "3")
    assert isinstance(act, anchors.Update) and act.src_line == act.dst_line == 11


def test_operator_change_is_an_update_of_the_operation():
    (act,) = _diff(BASE.replace("x * 2", "x + 2")).actions
    assert (act.action, act.grammar_type, act.old_text, act.new_text) == (
        "update", "BinaryOperation", "Multiply", "Add")
    (cact,) = _diff("int f(int a){ return a * 2; }\n".replace("*", "+"),
                    "int f(int a){ return a * 2; }\n", "cuda").actions
    assert (cact.action, cact.old_text, cact.new_text) == ("update", "*", "+")


def test_inserted_statement_is_one_subtree_insert_naming_its_anchor():
    script = _diff(BASE.replace("    y = x * 2\n", "    y = x * 2\n    y = tl.maximum(y, 0)\n"))
    (act,) = script.actions
    assert act.action == "insert" and act.subtree
    assert act.anchor == "triton:k/assign:y[1]"  # in the new state
    assert act.new_anchor == "triton:k"  # where it lands in the old state
    assert act.new_text == "y = tl.maximum(y, 0)"


def test_deleted_statement_is_one_subtree_delete():
    (act,) = _diff(BASE.replace("    mask = offs < n\n", "")).actions
    assert (act.action, act.anchor, act.subtree) == ("delete", "triton:k/assign:mask[0]", True)
    assert act.old_text == "mask = offs < n" and act.dst is None


def test_wrapping_in_a_branch_is_insert_plus_move():
    new = BASE.replace("    tl.store(y_ptr + offs, y, mask=mask)\n",
                       "    if pid < n:\n        tl.store(y_ptr + offs, y, mask=mask)\n")
    script = _diff(new)
    assert _summary(script) == [("insert", "triton:k/if[0]"),
                                ("move", "triton:k/call:tl.store[0]")]
    move = script.actions[1]
    assert move.new_anchor == "triton:k/if[0]/call:tl.store[0]"
    assert not script.actions[0].subtree  # the if is new, its body was moved in


def test_reordered_statements_are_a_move():
    new = BASE.replace("    x = tl.load(x_ptr + offs, mask=mask)\n    y = x * 2\n",
                       "    y = x * 2\n    x = tl.load(x_ptr + offs, mask=mask)\n")
    script = _diff(new)
    assert [a.action for a in script.actions] == ["move"]
    assert script.actions[0].anchor in ("triton:k/assign:x[0]", "triton:k/assign:y[0]")


def test_cuda_diff_names_cuda_anchors():
    old = kir.parse_file(KERNELS / "softmax_rows.cu")
    new_text = old.text.replace("  s = warp_sum(s);\n", "  s = warp_sum(s);\n  __syncwarp();\n")
    script = anchors.diff(old, kir.parse(new_text, "cuda"))
    (act,) = script.actions
    assert (act.action, act.anchor, act.kind) == (
        "insert", "cuda:softmax_rows/call:__syncwarp[0]", "other")
    assert act.new_text == "__syncwarp();"


def test_every_action_names_an_existing_anchor():
    old = kir.parse_file(EXAMPLES / "matmul_naive.py")
    new = kir.parse_file(EXAMPLES / "matmul_tiled.py")
    ia, ib = anchors.build_index(old), anchors.build_index(new)
    script = anchors.diff(old, new)
    assert len(script.actions) > 5
    kinds = {a.action for a in script.actions}
    assert {"insert", "delete", "update"} <= kinds
    for act in script.actions:
        where = ib if act.action == "insert" else ia
        assert where.get(act.anchor) is not None, act
        if act.action in ("update", "move"):
            assert ib.get(act.new_anchor) is not None
    # the new parameter and the new pointer increments are named by their anchors
    inserted = {a.anchor for a in script.actions if a.action == "insert"}
    assert "triton:matmul_kernel/param:GROUP_M[0]" in inserted
    assert "triton:matmul_kernel/for[0]/assign:a_ptrs[0]" in inserted


def test_json_shape():
    data = _diff(BASE.replace("y = x * 2", "y = x * 3")).to_json()
    assert list(data) == ["actions"]
    (row,) = data["actions"]
    assert {"action", "anchor", "kind", "grammar_type", "name", "new_anchor", "subtree",
            "src_span", "dst_span", "src_line", "dst_line", "old", "new"} == set(row)
    assert row["action"] == "update" and row["src_span"][1] - row["src_span"][0] == 1


def test_mapping_covers_unchanged_nodes():
    old = kir.parse(BASE, "triton")
    script = anchors.diff(old, kir.parse(BASE.replace("y = x * 2", "y = x * 3"), "triton"))
    assert len(script.mapping) == len(old)  # every node matched, one label changed


def test_cross_language_diff_is_bad_input():
    with pytest.raises(BadInputError, match="cannot diff"):
        anchors.diff(kir.parse(BASE, "triton"), kir.parse("int x;\n", "cuda"))
