"""GumTree-style structured diff between two `KernelIR`s of one language.

Three steps, as in GumTree: (1) top-down matching of isomorphic subtrees by label-free
structure hash (largest first; among several candidates the pair with the most equal labels
wins, then the same enclosing anchor step, matched parents, nearest position; subtrees of
height <= 2 need equal text or the same enclosing anchor step), (2) bottom-up matching of containers whose descendants are mostly
matched (Dice >= 0.5), with a recovery pass over their unmatched children (same grammar type
and label, or the only child of that type), (3) an edit script: update (a matched node whose
label changed), move (a matched node under a different parent or out of order among its
siblings), delete / insert, simplified to one action per maximal unmatched subtree. Every
action names the anchor it touches: the node's own anchor, else the first anchor inside the
node, else the anchor enclosing it (for an update, always the enclosing one).
"""
from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from anchors.index import build_index
from kir import kinds as K
from kir.errors import BadInputError
from kir.ir import KernelIR, Span, label_hashes, labels, structure_hashes

MIN_HEIGHT = 2  # GumTree's default: single leaves are matched only bottom-up
MIN_DICE = 0.5
CONTEXT_PENALTY = 0.25  # Dice handicap when the enclosing anchor steps differ
SMALL_HEIGHT = 2  # subtrees this low are matched top-down only with equal text or context


@dataclass(frozen=True, slots=True)
class Action:
    """One diff action. `anchor` is in the old state (for `Insert`, in the new state);
    `new_anchor` is the anchor in the new state for updates and moves, and for inserts the
    old-state anchor the new code lands in."""

    action: ClassVar[str] = "action"
    anchor: str
    kind: str
    grammar_type: str
    name: str | None
    src: Span | None
    dst: Span | None
    src_line: int | None
    dst_line: int | None
    new_anchor: str | None = None
    subtree: bool = True
    old_text: str | None = None
    new_text: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The `klineage diff --json` object of this action."""
        return {
            "action": self.action, "anchor": self.anchor, "kind": self.kind,
            "grammar_type": self.grammar_type, "name": self.name,
            "new_anchor": self.new_anchor, "subtree": self.subtree,
            "src_span": [self.src.start, self.src.end] if self.src else None,
            "dst_span": [self.dst.start, self.dst.end] if self.dst else None,
            "src_line": self.src_line, "dst_line": self.dst_line,
            "old": self.old_text, "new": self.new_text,
        }


@dataclass(frozen=True, slots=True)
class Insert(Action):
    action: ClassVar[str] = "insert"


@dataclass(frozen=True, slots=True)
class Delete(Action):
    action: ClassVar[str] = "delete"


@dataclass(frozen=True, slots=True)
class Update(Action):
    action: ClassVar[str] = "update"


@dataclass(frozen=True, slots=True)
class Move(Action):
    action: ClassVar[str] = "move"


@dataclass(frozen=True, slots=True)
class EditScript:
    """The actions turning `old` into `new`, in source order; `mapping` is old id -> new id."""

    actions: tuple[Action, ...]
    mapping: dict[int, int]

    def __len__(self) -> int:
        return len(self.actions)

    def to_json(self) -> dict[str, Any]:
        return {"actions": [a.to_json() for a in self.actions]}


def _heights(ir: KernelIR) -> list[int]:
    n = len(ir)
    h = [1] * n
    parent_of = ir._cols.parents
    for i in range(n - 1, 0, -1):
        p = parent_of[i]
        if h[i] + 1 > h[p]:
            h[p] = h[i] + 1
    return h


def _contexts(ir: KernelIR, index: Any) -> list[str]:
    """Per node, the step of its own or nearest enclosing anchor (`assign:acc`, `for`...)."""
    parents = ir._cols.parents
    ctx = [""] * len(ir)
    for i in range(len(ir)):
        a = index.of_node(i)
        ctx[i] = a.step if a is not None else (ctx[parents[i]] if i else "")
    return ctx


class _Matcher:
    def __init__(self, a: KernelIR, b: KernelIR, ctx_a: list[str], ctx_b: list[str]) -> None:
        self.a, self.b = a, b
        self.na, self.nb = len(a), len(b)
        self.m: dict[int, int] = {}
        self.rm: dict[int, int] = {}
        self.sha, self.shb = structure_hashes(a), structure_hashes(b)
        self.lha, self.lhb = label_hashes(a), label_hashes(b)
        self.ha, self.hb = _heights(a), _heights(b)
        self.ga, self.gb = a._cols.gtypes, b._cols.gtypes
        self.pa, self.pb = a._cols.parents, b._cols.parents
        self.ca, self.cb = ctx_a, ctx_b
        self.la, self.lb = labels(a), labels(b)

    def link(self, s: int, d: int) -> None:
        self.m[s] = d
        self.rm[d] = s

    def link_subtree(self, s: int, d: int) -> None:
        # equal shape hashes mean equal pre-order layouts: ids correspond by offset
        for k in range(self.a.subtree_end(s) - s):
            if s + k not in self.m and d + k not in self.rm:
                self.link(s + k, d + k)

    # -- step 1 ---------------------------------------------------------------------------
    def top_down(self) -> None:
        by_h_a: dict[int, list[int]] = {}
        by_h_b: dict[int, list[int]] = {}
        for i, h in enumerate(self.ha):
            if h >= MIN_HEIGHT:
                by_h_a.setdefault(h, []).append(i)
        for i, h in enumerate(self.hb):
            if h >= MIN_HEIGHT:
                by_h_b.setdefault(h, []).append(i)
        # largest subtrees first; a node is a candidate only while its parent is unmatched
        for h in sorted(set(by_h_a) & set(by_h_b), reverse=True):
            groups: dict[int, tuple[list[int], list[int]]] = {}
            for s in by_h_a[h]:
                if s not in self.m:
                    groups.setdefault(self.sha[s], ([], []))[0].append(s)
            for d in by_h_b[h]:
                if d not in self.rm:
                    g = groups.get(self.shb[d])
                    if g is not None:
                        g[1].append(d)
            for srcs, dsts in groups.values():
                if not dsts:
                    continue
                pairs = []
                for s in srcs:
                    for d in dsts:
                        same = self.same_labels(s, d)
                        size = self.a.subtree_end(s) - s
                        if h <= SMALL_HEIGHT and same < size and self.ca[s] != self.cb[d]:
                            # a tiny shape like `name=name` matches all over the file; only
                            # trust it with equal text or within the same anchor
                            continue
                        ps, pd = self.pa[s], self.pb[d]
                        parents_linked = ps >= 0 and self.m.get(ps) == pd
                        # nodes before an edit keep their ids, nodes after it keep their
                        # distance to the end: the smaller of the two offsets is the distance
                        offset = min(abs(s - d), abs((self.na - s) - (self.nb - d)))
                        pairs.append((-same / size, self.ca[s] != self.cb[d],
                                      not parents_linked, offset, s, d))
                pairs.sort()
                for *_, s, d in pairs:
                    if s not in self.m and d not in self.rm:
                        self.link_subtree(s, d)

    def same_labels(self, s: int, d: int) -> int:
        """Equal labels between two same-shape subtrees (their pre-orders line up)."""
        if self.lha[s] == self.lhb[d]:
            return self.a.subtree_end(s) - s
        n = self.a.subtree_end(s) - s
        return sum(map(operator.eq, self.la[s:s + n], self.lb[d:d + n]))

    # -- step 2 ---------------------------------------------------------------------------
    def bottom_up(self) -> None:
        a, b = self.a, self.b
        if 0 not in self.m and self.ga[0] == self.gb[0]:
            self.link(0, 0)
        for s in range(self.na - 1, -1, -1):
            if s in self.m or not a.children_of(s):
                continue
            end = a.subtree_end(s)
            mapped = [self.m[x] for x in range(s + 1, end) if x in self.m]
            if not mapped:
                continue
            gtype = self.ga[s]
            seen: set[int] = set()
            best, best_dice = -1, MIN_DICE
            for d0 in mapped[:64]:  # candidates: ancestors of where s's descendants went
                d = self.pb[d0]
                while d >= 0 and d not in seen:
                    seen.add(d)
                    if d not in self.rm and self.gb[d] == gtype:
                        dend = b.subtree_end(d)
                        common = sum(1 for x in mapped if d < x < dend)
                        dice = 2.0 * common / ((end - s - 1) + (dend - d - 1))
                        if self.ca[s] != self.cb[d]:
                            # a statement about another variable must look much more alike
                            dice -= CONTEXT_PENALTY
                        if dice > best_dice:
                            best, best_dice = d, dice
                    d = self.pb[d]
            if best >= 0:
                self.link(s, best)
        # recovery walks parents before children so newly matched children recurse
        for s in range(self.na):
            d = self.m.get(s)
            if d is not None:
                self.recover(s, d)

    def recover(self, s: int, d: int) -> None:
        sa = [c for c in self.a.children_of(s) if c not in self.m]
        if not sa:
            return
        sb = [c for c in self.b.children_of(d) if c not in self.rm]
        if not sb:
            return
        la, lb = labels(self.a), labels(self.b)
        for c in sa:  # same type and label, in order
            for k, e in enumerate(sb):
                if self.ga[c] == self.gb[e] and la[c] == lb[e]:
                    self.link(c, e)
                    del sb[k]
                    break
        left = [c for c in sa if c not in self.m]
        for c in left:
            # the only unmatched child of its type on both sides, when one of the two is a
            # leaf: a renamed identifier, or an empty block `{}` that gained statements
            ta = [x for x in left if self.ga[x] == self.ga[c] and x not in self.m]
            tb = [e for e in sb if self.gb[e] == self.ga[c] and e not in self.rm]
            if len(ta) == 1 and len(tb) == 1 and (
                    not self.a.children_of(c) or not self.b.children_of(tb[0])):
                self.link(c, tb[0])


def _drop_orphan_moves(mt: _Matcher) -> None:
    """Unmatch pieces that would move from deleted code straight into inserted code.

    A small subtree shared by a deleted statement and an inserted one (`k + offs_k`) is a
    GumTree move, but for a reader it is part of the delete and the insert: dropping such
    mappings (pre-order, so whole pieces go) simplifies the script to subtree actions.
    """
    pa, pb, m, rm = mt.pa, mt.pb, mt.m, mt.rm
    for s in range(1, mt.na):
        d = m.get(s)
        if d is not None and d > 0 and pa[s] not in m and pb[d] not in rm:
            del m[s]
            del rm[d]


def _lis_keep(seq: Sequence[int]) -> set[int]:
    """Indices of one longest increasing subsequence of `seq`."""
    import bisect

    tails: list[int] = []
    tails_idx: list[int] = []
    prev = [-1] * len(seq)
    for i, v in enumerate(seq):
        k = bisect.bisect_left(tails, v)
        if k == len(tails):
            tails.append(v)
            tails_idx.append(i)
        else:
            tails[k] = v
            tails_idx[k] = i
        prev[i] = tails_idx[k - 1] if k else -1
    keep: set[int] = set()
    i = tails_idx[-1] if tails_idx else -1
    while i >= 0:
        keep.add(i)
        i = prev[i]
    return keep


def diff(old: KernelIR, new: KernelIR) -> EditScript:
    """Edit script from `old` to `new` (same language). Actions are in source order."""
    if old.language is not new.language:
        raise BadInputError(f"cannot diff {old.language.value} against {new.language.value}")
    ia, ib = build_index(old), build_index(new)
    mt = _Matcher(old, new, _contexts(old, ia), _contexts(new, ib))
    mt.top_down()
    mt.bottom_up()
    _drop_orphan_moves(mt)
    m, rm = mt.m, mt.rm
    la, lb = labels(old), labels(new)

    def touched(index: Any, ir: KernelIR, nid: int) -> str:
        # the node's own anchor, else the first anchored node inside it (a statement line
        # holding `y = ...` touches `assign:y`), else the anchor enclosing it
        for x in range(nid, ir.subtree_end(nid)):
            a = index.of_node(x)
            if a is not None:
                return a.id
        return index.enclosing(nid).id

    def make(cls: type[Action], s: int | None, d: int | None, **kw: Any) -> Action:
        ir, nid = (old, s) if s is not None else (new, d)
        assert nid is not None
        index = ia if s is not None else ib
        anchor = touched(index, ir, nid) if cls is not Update else index.enclosing(nid).id
        return cls(
            anchor, ir.kind_of(nid), ir.grammar_type_of(nid), ir.name_of(nid),
            old.span_of(s) if s is not None else None, new.span_of(d) if d is not None else None,
            old.line_of(old.span_of(s).start) if s is not None else None,
            new.line_of(new.span_of(d).start) if d is not None else None, **kw)

    out: list[tuple[int, int, Action]] = []
    for s in range(len(old)):
        d = m.get(s)
        ps = mt.pa[s]
        if d is None:
            if ps >= 0 and ps not in m:
                continue  # inside a deleted ancestor: covered by its action
            whole = all(x not in m for x in range(s, old.subtree_end(s)))
            out.append((old.span_of(s).start, 0, make(
                Delete, s, None, subtree=whole, old_text=old.node_text(s))))
            continue
        leaf_s, leaf_d = not old.children_of(s), not new.children_of(d)
        if leaf_s and leaf_d:
            changed = la[s] != lb[d]
        elif leaf_s or leaf_d:  # `{}` <-> `{...}`: the inserted/deleted children say it all
            changed = False
        else:  # containers carry a label only when it is their own operator
            changed = old.kind_of(s) == K.OTHER and la[s] != lb[d]
        if changed:
            out.append((old.span_of(s).start, 1, make(
                Update, s, d, new_anchor=ib.enclosing(d).id, old_text=la[s], new_text=lb[d])))
        if ps >= 0 and m.get(ps) != mt.pb[d]:
            out.append((old.span_of(s).start, 2, make(
                Move, s, d, new_anchor=touched(ib, new, d), old_text=old.node_text(s),
                new_text=new.node_text(d))))
    # moves among siblings of one matched parent: keep the longest run already in order
    for s, d in m.items():
        kids = [c for c in old.children_of(s) if c in m and mt.pb[m[c]] == d]
        if len(kids) < 2:
            continue
        keep = _lis_keep([m[c] for c in kids])
        for i, c in enumerate(kids):
            if i not in keep:
                out.append((old.span_of(c).start, 2, make(
                    Move, c, m[c], new_anchor=touched(ib, new, m[c]),
                    old_text=old.node_text(c), new_text=new.node_text(m[c]))))
    for d in range(len(new)):
        if d in rm:
            continue
        pd = mt.pb[d]
        if pd >= 0 and pd not in rm:
            continue
        whole = all(x not in rm for x in range(d, new.subtree_end(d)))
        landing = ia.enclosing(rm[pd]).id if pd >= 0 else None
        # place inserts after the old node their parent matches, for a readable order
        pos = old.span_of(rm[pd]).start if pd >= 0 else 0
        out.append((pos, 3, make(Insert, None, d, new_anchor=landing, subtree=whole,
                                 new_text=new.node_text(d))))
    out.sort(key=lambda t: (t[0], t[1]))
    return EditScript(tuple(a for *_, a in out), dict(m))
