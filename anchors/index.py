"""Stable anchor ids over a `KernelIR`, and resolving an anchor in a later state.

Anchor id grammar (see docs/INTERFACES.md):

    <lang>:<scope>[/<step>[<i>]]...

`<scope>` is the qualified name of a top-level function, kernel, class or namespace (`::` joins
C++ scopes, `.` Python ones; a repeated name gets `[k]`, k >= 1, in source order), or `@module`
for code outside any of them. A step is the node's kind-derived label: `for`, `while`, `if`,
`call:<callee>`, `launch:<kernel>`, `assign:<target>`, `decl:<name>`, `shared:<name>`,
`param:<name>`, `decorator:<name>`, `pragma:<name>`, `def:<name>` (nested function),
`return`, `asm`. The parent of an anchor is the nearest enclosing *container* anchor
(module, namespace, class, function, kernel, loop, branch): a call inside an assignment is a
sibling of that assignment, not its child. `<i>` counts earlier siblings *with the same step* under the same parent
anchor, so an edit only renumbers anchors inside the subtree it touches.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NewType

from anchors.query import AnchorQuery, Match, run_query
from kir import kinds as K
from kir.ir import KernelIR, Language, Span, structure_hashes

AnchorId = NewType("AnchorId", str)

MODULE_SCOPE = "@module"
_UNSAFE = re.compile(r"[\s/\[\]]+")
_CALL_GTYPES = frozenset({"Call", "call_expression"})
_ASM_GTYPES = frozenset({"gnu_asm_expression", "asm_statement"})


@dataclass(frozen=True, slots=True)
class Anchor:
    """One anchored node. `node` is the node id in the IR the index was built from."""

    id: AnchorId
    node: int
    kind: str
    name: str | None
    span: Span
    parent: AnchorId | None
    structure_hash: str
    line: int
    step: str


@dataclass(frozen=True, slots=True)
class Resolution:
    """Where an anchor of an older state lives now.

    `status` is "exact" (same id, same kind), "hash" (same kind and structure hash, nearest
    position) or "gone" (`anchor` is None).
    """

    status: str
    old: AnchorId
    anchor: Anchor | None


def _clean(name: str | None) -> str | None:
    # `/` and `[..]` delimit id steps and indices; `operator[]` keeps a readable name
    if not name:
        return name
    return _UNSAFE.sub("_", name.replace("operator[]", "operator_subscript"))


def step_of(ir: KernelIR, nid: int) -> str:
    """The id step of an anchored node (without its index)."""
    kind = ir.kind_of(nid)
    name = _clean(ir.name_of(nid))
    gtype = ir.grammar_type_of(nid)
    if kind == K.LOOP or kind == K.BRANCH:
        return str(ir.attrs_of(nid).get("flavor", kind))
    if gtype in _ASM_GTYPES:
        return "asm"
    if kind == K.LAUNCH:
        return f"launch:{name}" if name else "launch"
    if gtype in _CALL_GTYPES:
        return f"call:{name}" if name else "call"
    if kind == K.SHARED_DECL:
        return f"shared:{name}" if name else "shared"
    if kind == K.CONSTEXPR_PARAM:
        return f"param:{name}" if name else "param"
    if kind in (K.KERNEL, K.FUNCTION):
        return f"def:{name}" if name else "def"
    if kind == K.RETURN or kind == K.MODULE:
        return kind
    return f"{kind}:{name}" if name else kind


class AnchorIndex:
    """All anchors of one `KernelIR`, in pre-order of their nodes.

    Callers may rely on: ids are unique within the index; `get` is O(1); the index never
    changes after construction; `anchors[i].parent` names an anchor earlier in the list.
    """

    __slots__ = ("ir", "anchors", "_by_id", "_by_node", "_children", "_by_kind", "_order",
                 "_ends")

    def __init__(self, ir: KernelIR, anchors: list[Anchor]) -> None:
        self.ir = ir
        self.anchors: Sequence[Anchor] = tuple(anchors)
        self._by_id: dict[AnchorId, Anchor] = {a.id: a for a in anchors}
        self._by_node: dict[int, Anchor] = {a.node: a for a in anchors}
        self._order: dict[AnchorId, int] = {a.id: i for i, a in enumerate(anchors)}
        self._children: dict[AnchorId | None, list[Anchor]] = {}
        self._by_kind: dict[str, list[Anchor]] = {}
        for a in anchors:
            self._children.setdefault(a.parent, []).append(a)
            self._by_kind.setdefault(a.kind, []).append(a)
        self._ends: list[int] | None = None

    def __len__(self) -> int:
        return len(self.anchors)

    def __iter__(self) -> Iterator[Anchor]:
        return iter(self.anchors)

    def __contains__(self, anchor_id: object) -> bool:
        return anchor_id in self._by_id

    def get(self, anchor_id: str) -> Anchor | None:
        """The anchor with this id, or None."""
        return self._by_id.get(AnchorId(anchor_id))

    def of_node(self, nid: int) -> Anchor | None:
        """The anchor placed on IR node `nid`, if any."""
        return self._by_node.get(nid)

    def enclosing(self, nid: int) -> Anchor:
        """The anchor of `nid` or of its nearest anchored ancestor (the module at worst)."""
        a = self._by_node.get(nid)
        parents = self.ir.ancestors(nid)
        while a is None:
            a = self._by_node.get(next(parents))
        return a

    def children(self, anchor: Anchor | None) -> Sequence[Anchor]:
        """Anchors whose parent is `anchor` (roots when None)."""
        return self._children.get(anchor.id if anchor is not None else None, ())

    def descendants(self, anchor: Anchor) -> Iterator[Anchor]:
        """Anchors below `anchor`, in pre-order."""
        stack = list(reversed(self.children(anchor)))
        while stack:
            a = stack.pop()
            yield a
            stack.extend(reversed(self.children(a)))

    def subtree_ends(self) -> list[int]:
        """Per anchor position, one past the position of its last descendant anchor."""
        if self._ends is None:
            ends = list(range(1, len(self.anchors) + 1))
            order = self._order
            for i in range(len(self.anchors) - 1, 0, -1):
                parent = self.anchors[i].parent
                if parent is not None:
                    p = order[parent]
                    if ends[i] > ends[p]:
                        ends[p] = ends[i]
            self._ends = ends
        return self._ends

    def of_kind(self, kind: str) -> Sequence[Anchor]:
        return self._by_kind.get(kind, ())

    def position(self, anchor_id: str) -> int:
        """Rank of the anchor in the index (pre-order)."""
        return self._order[AnchorId(anchor_id)]

    def query(self, q: str | AnchorQuery) -> list[Match]:
        """Anchors matching an anchor query (grammar: grammars/anchor_query.lark), in
        pre-order, each at most once. Raises `QueryError` for a bad query."""
        return run_query(self, q)

    def resolve(self, anchor: Anchor | str, old_index: AnchorIndex | None = None) -> Resolution:
        """Find an anchor of an older state in this one.

        `anchor` is an `Anchor` of the old index or an id (then `old_index` supplies its kind,
        hash and position; without it only an exact id match can be found). Exact id with the
        same kind wins; else a same-kind anchor with the same structure hash that does not
        already resolve exactly to an old anchor; among those, one with the same path below
        its scope (a renamed function), else the same step, else the same scope, else the
        nearest relative rank; else gone.
        """
        if isinstance(anchor, str):
            aid = AnchorId(anchor)
            old = old_index.get(aid) if old_index is not None else None
        else:
            aid, old = anchor.id, anchor
        got = self._by_id.get(aid)
        if got is not None and (old is None or got.kind == old.kind):
            return Resolution("exact", aid, got)
        if old is None:
            return Resolution("gone", aid, None)
        cands = [a for a in self.of_kind(old.kind) if a.structure_hash == old.structure_hash]
        if old_index is not None:
            cands = [a for a in cands
                     if (o := old_index.get(a.id)) is None or o.kind != a.kind]
        if not cands:
            return Resolution("gone", aid, None)
        old_scope, _, old_path = aid.partition("/")
        old_n = len(old_index) if old_index is not None else len(self)
        old_pos = old_index._order.get(aid, 0) if old_index is not None else 0
        old_rank = old_pos / max(1, old_n)
        n = max(1, len(self))

        def closeness(a: Anchor) -> tuple[bool, bool, bool, float]:
            # same path below the scope (a renamed function), same step (a moved statement),
            # same scope, then nearest relative rank in pre-order
            scope, _, path = a.id.partition("/")
            return (path != old_path, a.step != old.step, scope != old_scope,
                    abs(self._order[a.id] / n - old_rank))

        best = min(cands, key=closeness)
        return Resolution("hash", aid, best)

    def to_json(self, anchors: Sequence[Anchor] | None = None) -> list[dict[str, object]]:
        """The `klineage anchors --json` objects for `anchors` (default: all)."""
        ir = self.ir
        return [
            {"id": a.id, "kind": a.kind, "grammar_type": ir.grammar_type_of(a.node),
             "name": a.name, "span": [a.span.start, a.span.end], "line": a.line,
             "parent": a.parent}
            for a in (self.anchors if anchors is None else anchors)
        ]


def build_index(ir: KernelIR) -> AnchorIndex:
    """Anchor every node whose kind is in `kir.kinds.ANCHORED`."""
    lang = ir.language.value
    sep = "::" if ir.language is Language.CUDA else "."
    n = len(ir)
    kinds = ir._cols.kinds
    parents = ir._cols.parents
    starts, ends = ir._cols.starts, ir._cols.ends
    shapes = structure_hashes(ir)
    anchored = K.ANCHORED
    scopes = K.SCOPES
    containers = K.CONTAINERS
    near: list[int] = [-1] * n  # index into `out` of the nearest anchored ancestor-or-self
    qual: list[str] = []  # per anchor: qualified scope name ("" = module, None-ish = in a body)
    in_body: list[bool] = []  # per anchor: inside a function body (steps, not scope names)
    out: list[Anchor] = []
    counts: dict[tuple[int, str], int] = {}
    scope_counts: dict[str, int] = {}
    early: set[int] = set()  # function/class nodes anchored at their template declaration

    def new_anchor(nid: int, parent_a: int) -> int:
        kind = kinds[nid]
        name = ir.name_of(nid)
        if parent_a < 0:
            aid, q, body, step = f"{lang}:{MODULE_SCOPE}", "", False, K.MODULE
        elif kind in scopes and not in_body[parent_a]:
            q = f"{qual[parent_a]}{sep}{name}" if qual[parent_a] else (name or "(anonymous)")
            q = _clean(q) or "(anonymous)"
            k = scope_counts.get(q, 0)
            scope_counts[q] = k + 1
            aid = f"{lang}:{q}" if k == 0 else f"{lang}:{q}[{k}]"
            body = kind in (K.KERNEL, K.FUNCTION)
            step = aid.split(":", 1)[1]
        else:
            step = step_of(ir, nid)
            key = (parent_a, step)
            k = counts.get(key, 0)
            counts[key] = k + 1
            aid, q, body = f"{out[parent_a].id}/{step}[{k}]", qual[parent_a], True
        start = starts[nid]
        out.append(Anchor(AnchorId(aid), nid, kind, name, Span(start, ends[nid]),
                          out[parent_a].id if parent_a >= 0 else None,
                          f"{shapes[nid] & 0xFFFFFFFFFFFFFFFF:016x}", ir.line_of(start), step))
        qual.append(q)
        in_body.append(body)
        return len(out) - 1

    for nid in range(n):
        p = parents[nid]
        parent_a = near[p] if p >= 0 else -1
        kind = kinds[nid]
        if nid in early:
            continue  # anchored at its template declaration
        if kind == K.TEMPLATE:
            target = next((c for c in ir.children_of(nid) if kinds[c] in scopes), None)
            if target is not None:
                a = new_anchor(target, parent_a)
                early.add(target)
                near[nid] = near[target] = a
                # the template's own subtree (params) hangs under the function/class anchor
                continue
            near[nid] = parent_a
        elif kind in anchored or p < 0:
            a = new_anchor(nid, parent_a)
            # expressions and statements hang on the enclosing block-level anchor, so a call
            # inside `acc += tl.dot(a, b)` is `.../for[0]/call:tl.dot[0]`
            near[nid] = a if kind in containers or p < 0 else parent_a
        else:
            near[nid] = parent_a
    return AnchorIndex(ir, out)

