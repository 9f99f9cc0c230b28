"""The anchor query language (grammar: grammars/anchor_query.lark) and its evaluation.

This module sits below `anchors.index`: it evaluates a query over anything shaped like an
`AnchorIndex` (`IndexView`), and the index's `query` method calls `run_query`.
"""
from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import Any, Protocol

import lark

from kir import kinds as K
from kir.errors import QueryError
from kir.ir import KernelIR

#: Attributes every anchor has (read from the anchor itself, not from the IR node).
ANCHOR_ATTRIBUTES = frozenset({"name", "id", "kind", "line", "step", "grammar_type"})


class Anchor(Protocol):
    """What the evaluation reads of an anchor (`anchors.index.Anchor`)."""

    id: str
    kind: str
    node: int
    step: str


class AnchorIndex(Protocol):
    """What the evaluation reads of an index (`anchors.index.AnchorIndex`)."""

    ir: KernelIR
    anchors: Sequence[Any]

    def children(self, anchor: Any) -> Sequence[Any]: ...
    def of_kind(self, kind: str) -> Sequence[Any]: ...
    def position(self, anchor_id: str) -> int: ...
    def subtree_ends(self) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class Predicate:
    attr: str
    op: str | None  # None: the attribute is present and non-empty
    value: str | None


@dataclass(frozen=True, slots=True)
class Step:
    combinator: str | None  # None for the first step, else ">" (child) or ">>" (descendant)
    kind: str  # a kir kind or "*"
    predicates: tuple[Predicate, ...]
    capture: str | None


@dataclass(frozen=True, slots=True)
class AnchorQuery:
    """A parsed anchor query: a path of steps."""

    text: str
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class Match:
    """One query result: the anchor matched by the last step and the labelled captures."""

    anchor: Anchor
    captures: Mapping[str, Anchor] = field(default_factory=lambda: MappingProxyType({}))


@functools.cache
def _parser() -> lark.Lark:
    grammar = resources.files("grammars").joinpath("anchor_query.lark").read_text()
    return lark.Lark(grammar, parser="lalr", start="start")


_SHOWN = 120  # characters of a query an error message quotes, at most


def _shown(text: str, column: object = None) -> str:
    """The query as an error message quotes it: whole when short, else the stretch around
    `column` (1-based, where the parser stopped) with the characters left out counted."""
    if len(text) <= _SHOWN:
        return repr(text)
    at = column - 1 if isinstance(column, int) and 0 < column <= len(text) else 0
    start = max(0, min(at - _SHOWN // 2, len(text) - _SHOWN))
    part = text[start:start + _SHOWN]
    return (f"{'...' if start else ''}{part!r}{'...' if start + _SHOWN < len(text) else ''} "
            f"({len(text)} characters)")


@functools.lru_cache(maxsize=256)
def parse_query(text: str) -> AnchorQuery:
    """Parse a query; raises `QueryError` (a `BadInputError`) with the offending column."""
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedInput as exc:
        col = getattr(exc, "column", "?")
        raise QueryError(f"bad anchor query {_shown(text, col)} at column {col}") from None
    steps: list[Step] = []
    combinator: str | None = None
    for item in tree.children:
        if isinstance(item, lark.Token):
            combinator = str(item)
            continue
        kind = str(item.children[0])
        if kind != "*" and kind not in K.ALL:
            raise QueryError(f"bad anchor query {_shown(text)}: unknown kind '{kind}' "
                             f"(kinds: {', '.join(sorted(K.ALL))})")
        preds: list[Predicate] = []
        capture: str | None = None
        for part in item.children[1:]:
            if part.data == "capture":
                capture = str(part.children[0])
                continue
            attr = str(part.children[0])
            if attr not in ANCHOR_ATTRIBUTES and attr not in K.ATTRIBUTES:
                known = ", ".join(sorted(ANCHOR_ATTRIBUTES | K.ATTRIBUTES))
                raise QueryError(f"bad anchor query {_shown(text)}: unknown attribute '{attr}' "
                                 f"(attributes: {known})")
            if len(part.children) == 1:
                preds.append(Predicate(attr, None, None))
                continue
            op = str(part.children[1])
            vnode = part.children[2]
            raw = str(vnode.children[0])
            value = ast.literal_eval(raw) if vnode.data == "quoted" else raw
            if op == "~=":
                try:
                    re.compile(value)
                except re.error as exc:
                    raise QueryError(f"bad regex {value!r} in anchor query: {exc}") from None
            preds.append(Predicate(attr, op, value))
        steps.append(Step(combinator, kind, tuple(preds), capture))
        combinator = None
    return AnchorQuery(text, tuple(steps))


def _attr(index: AnchorIndex, a: Anchor, attr: str) -> Any:
    if attr in ("name", "id", "kind", "line", "step"):
        return getattr(a, attr)
    if attr == "grammar_type":
        return index.ir.grammar_type_of(a.node)
    return index.ir.attrs_of(a.node).get(attr)


_OPS: dict[str, Callable[[str, str], bool]] = {
    "=": lambda v, x: v == x,
    "!=": lambda v, x: v != x,
    "^=": lambda v, x: v.startswith(x),
    "$=": lambda v, x: v.endswith(x),
    "*=": lambda v, x: x in v,
    "~=": lambda v, x: re.search(x, v) is not None,
}


def _pred_ok(index: AnchorIndex, a: Anchor, p: Predicate) -> bool:
    v = _attr(index, a, p.attr)
    if p.op is None:
        return bool(v)
    assert p.value is not None
    values = v if isinstance(v, (tuple, list)) else (v,)
    if p.op == "!=":
        return all(x is None or str(x) != p.value for x in values)
    fn = _OPS[p.op]
    return any(x is not None and fn(str(x), p.value) for x in values)


def _kind_ok(a: Anchor, kind: str) -> bool:
    # `call` also matches call-like nodes with a sharper kind (tl.dot is a `dot`, tl.load a
    # `load`): their anchor step is `call:<callee>` either way
    return kind == "*" or a.kind == kind or (kind == "call" and a.step.startswith("call"))


def _step_ok(index: AnchorIndex, a: Anchor, s: Step) -> bool:
    if not _kind_ok(a, s.kind):
        return False
    return all(_pred_ok(index, a, p) for p in s.predicates)


def run_query(index: AnchorIndex, q: str | AnchorQuery) -> list[Match]:
    """Evaluate a query; results are in pre-order, each anchor at most once (first captures)."""
    query = parse_query(q) if isinstance(q, str) else q
    anchors = index.anchors
    ends = index.subtree_ends()
    first = query.steps[0]
    pool = index.of_kind(first.kind) if first.kind not in ("*", "call") else anchors
    frontier: list[tuple[int, dict[str, Anchor]]] = [
        (index.position(a.id), {first.capture: a} if first.capture else {})
        for a in pool if _step_ok(index, a, first)
    ]
    for s in query.steps[1:]:
        nxt: list[tuple[int, dict[str, Anchor]]] = []
        seen: set[int] = set()
        covered = -1  # with `>>`, a frontier anchor inside an expanded one adds nothing new
        for pos, caps in frontier:
            if s.combinator == ">>":
                if pos < covered:
                    continue
                covered = ends[pos]
                cands = range(pos + 1, ends[pos])
            else:
                cands = (index.position(c.id) for c in index.children(anchors[pos]))
            for cpos in cands:
                if cpos in seen:
                    continue
                c = anchors[cpos]
                if _step_ok(index, c, s):
                    seen.add(cpos)
                    nxt.append((cpos, {**caps, s.capture: c} if s.capture else caps))
        nxt.sort(key=lambda t: t[0])
        frontier = nxt
    return [Match(anchors[pos], MappingProxyType(caps)) for pos, caps in frontier]
