"""The immutable, lossless kernel IR shared by the CUDA and Triton back-ends.

A `KernelIR` keeps the exact source text plus a pre-order table of nodes. Node ids are pre-order
indices, so a node's descendants are the contiguous id range `(id, end_id)`. Nodes are stored
column-wise and materialized as `Node` values on first access: building the table is the hot
path of parsing, and most callers touch only a few nodes.

Positions are byte offsets into the UTF-8 source, `end` exclusive; lines are 1-indexed.
"""
from __future__ import annotations

import bisect
import enum
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, overload

from kir.columns import Columns
from kir.errors import BadInputError, ParseError
from kir.kinds import ANCHORED

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class Language(str, enum.Enum):
    """Surface language of a kernel file."""

    CUDA = "cuda"
    TRITON = "triton"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True, order=True)
class Span:
    """A half-open byte range `[start, end)` into the UTF-8 source."""

    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start

    def contains(self, other: Span) -> bool:
        """True when `other` lies inside this span (an empty span at the end counts)."""
        return self.start <= other.start and other.end <= self.end

    def overlaps(self, other: Span) -> bool:
        """True when the two spans share at least one byte."""
        return self.start < other.end and other.start < self.end


@dataclass(frozen=True, slots=True)
class Node:
    """One node of a `KernelIR`. `id` is its pre-order index; `parent` is None for the root."""

    id: int
    kind: str
    grammar_type: str
    name: str | None
    span: Span
    line: int
    parent: int | None
    children: tuple[int, ...]
    attrs: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace the bytes of `span` with `replacement` (an insertion when the span is empty)."""

    span: Span
    replacement: str


class _NodeView(Sequence[Node]):
    """Read-only sequence of a KernelIR's nodes, materialized lazily."""

    __slots__ = ("_ir",)

    def __init__(self, ir: KernelIR) -> None:
        self._ir = ir

    def __len__(self) -> int:
        return len(self._ir._cols.kinds)

    @overload
    def __getitem__(self, i: int) -> Node: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Node]: ...
    def __getitem__(self, i: int | slice) -> Node | Sequence[Node]:
        if isinstance(i, slice):
            return [self._ir.node(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        return self._ir.node(i)

    def __iter__(self) -> Iterator[Node]:
        node = self._ir.node
        for i in range(len(self)):
            yield node(i)


class KernelIR:
    """An immutable parse of one kernel source in one language.

    Callers may rely on: `unparse()` returns the input text byte for byte; node ids are
    pre-order indices (root is 0) and stay valid for the life of this object; `apply(edits)`
    returns a new KernelIR and leaves this one untouched; `error_nodes` counts tree-sitter
    ERROR/MISSING nodes (always 0 for Triton, which refuses to parse invalid Python).
    """

    __slots__ = (
        "language", "text", "source", "path", "error_nodes", "_cols", "_children", "_nodes",
        "_line_starts", "_subtree_end", "_cache",
    )

    def __init__(
        self,
        language: Language,
        text: str,
        source: bytes,
        path: str | None,
        cols: Columns,
        error_nodes: int = 0,
    ) -> None:
        n = len(cols.kinds)
        children: list[list[int]] = [[] for _ in range(n)]
        parents = cols.parents
        for i in range(1, n):
            children[parents[i]].append(i)
        init = object.__setattr__  # the public attributes are read-only after construction
        init(self, "language", language)
        init(self, "text", text)
        init(self, "source", source)
        init(self, "path", path)
        init(self, "error_nodes", error_nodes)
        init(self, "_cols", cols)
        init(self, "_children", children)
        init(self, "_nodes", [None] * n)
        init(self, "_line_starts", None)
        init(self, "_subtree_end", None)
        init(self, "_cache", {})  # lazily computed derived tables (hashes, labels)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"KernelIR is immutable (cannot set {name!r}); use apply(edits)")

    # -- whole-source views -------------------------------------------------------------
    def unparse(self) -> str:
        """The source text, exactly as parsed."""
        return self.text

    @property
    def nodes(self) -> Sequence[Node]:
        """All nodes in pre-order (`nodes[i].id == i`)."""
        return _NodeView(self)

    @property
    def root(self) -> Node:
        return self.node(0)

    def __len__(self) -> int:
        return len(self._cols.kinds)

    def __repr__(self) -> str:
        return f"KernelIR({self.language.value}, {self.path or '<string>'}, {len(self)} nodes)"

    # -- node access ----------------------------------------------------------------------
    def node(self, nid: int) -> Node:
        """The node with pre-order id `nid`."""
        got = self._nodes[nid]
        if got is None:
            c = self._cols
            parent = c.parents[nid]
            got = Node(
                nid,
                c.kinds[nid],
                c.gtypes[nid],
                c.names[nid],
                Span(c.starts[nid], c.ends[nid]),
                self.line_of(c.starts[nid]),
                None if parent < 0 else parent,
                tuple(self._children[nid]),
                c.attrs.get(nid, _EMPTY),
            )
            self._nodes[nid] = got
        return got

    def kind_of(self, nid: int) -> str:
        return self._cols.kinds[nid]

    def name_of(self, nid: int) -> str | None:
        return self._cols.names[nid]

    def grammar_type_of(self, nid: int) -> str:
        return self._cols.gtypes[nid]

    def span_of(self, nid: int) -> Span:
        return Span(self._cols.starts[nid], self._cols.ends[nid])

    def parent_of(self, nid: int) -> int | None:
        p = self._cols.parents[nid]
        return None if p < 0 else p

    def children_of(self, nid: int) -> Sequence[int]:
        return self._children[nid]

    def attrs_of(self, nid: int) -> Mapping[str, Any]:
        return self._cols.attrs.get(nid, _EMPTY)

    def subtree_end(self, nid: int) -> int:
        """One past the last pre-order id inside `nid`'s subtree."""
        ends = self._subtree_end
        if ends is None:
            n = len(self)
            ends = list(range(1, n + 1))
            parents = self._cols.parents
            for i in range(n - 1, 0, -1):
                p = parents[i]
                if ends[i] > ends[p]:
                    ends[p] = ends[i]
            object.__setattr__(self, "_subtree_end", ends)
        return ends[nid]

    def node_text(self, node: Node | int) -> str:
        """The exact source text of a node."""
        nid = node if isinstance(node, int) else node.id
        return self.source[self._cols.starts[nid] : self._cols.ends[nid]].decode("utf-8")

    def line_of(self, offset: int) -> int:
        """1-indexed line holding byte `offset`."""
        starts = self._line_starts
        if starts is None:
            starts = [0]
            src = self.source
            i = src.find(b"\n")
            while i >= 0:
                starts.append(i + 1)
                i = src.find(b"\n", i + 1)
            object.__setattr__(self, "_line_starts", starts)
        return bisect.bisect_right(starts, offset)

    def walk(self, start: Node | int = 0) -> Iterator[Node]:
        """Nodes of the subtree rooted at `start`, in pre-order."""
        sid = start if isinstance(start, int) else start.id
        for i in range(sid, self.subtree_end(sid)):
            yield self.node(i)

    def find(self, kind: str | Iterable[str] | None = None, name: str | None = None) -> list[Node]:
        """Nodes with the given kind (or any of several) and/or name, in pre-order."""
        kinds = {kind} if isinstance(kind, str) else (set(kind) if kind is not None else None)
        c = self._cols
        return [
            self.node(i)
            for i in range(len(c.kinds))
            if (kinds is None or c.kinds[i] in kinds) and (name is None or c.names[i] == name)
        ]

    def ancestors(self, node: Node | int) -> Iterator[int]:
        """Ids of the proper ancestors of a node, nearest first."""
        nid = node if isinstance(node, int) else node.id
        parents = self._cols.parents
        p = parents[nid]
        while p >= 0:
            yield p
            p = parents[p]

    # -- edits ----------------------------------------------------------------------------
    def apply(self, edits: Iterable[Edit]) -> KernelIR:
        """Apply span edits (reverse offset order) and parse the result in the same language.

        Raises `BadInputError` for overlapping or out-of-range edits and `ParseError` when the
        new text does not parse. This IR is not changed.
        """
        new_source = apply_edits(self.source, edits)
        return build(new_source.decode("utf-8"), new_source, self.language, self.path)


#: A CUDA parse is refused when ERROR nodes without recovered structure cover more than this
#: share of the bytes (real headers full of unknown macros reach 50%; noise goes past 90%).
MAX_ERROR_SHARE = 0.8


def build(text: str, data: bytes, language: Language, path: str | None) -> KernelIR:
    """The IR of `text` (`data` is its UTF-8 bytes) in `language`; the one place that calls
    the back-ends (`kir.parse.parse` checks the input first). Raises `BadInputError` for NUL
    bytes and `ParseError` for Triton syntax errors (`path:line: message`) or CUDA text that
    tree-sitter cannot recover."""
    if "\x00" in text:
        raise BadInputError(f"{path or 'source'}: binary data (NUL bytes) is not kernel source")
    # back-ends load on first use: tree-sitter's grammar takes a while to load, and
    # `kir.errors` (imported by every CLI command) must stay cheap; libcst loads only for the
    # rare Python construct `kir.triton` leaves to it. They import `kir.columns`, not this.
    if language is Language.CUDA:
        from kir import cuda

        cols, errors = cuda.build(data)
        _check_cuda_errors(cols, errors, data, path)
        return KernelIR(language, text, data, path, cols, errors)
    from kir import triton

    try:
        cols = triton.build(text, data)
    except ParseError as exc:  # name the file and the line: `path:line: message`
        if path is None and exc.line is None:
            raise
        place = ":".join(str(p) for p in (path or "source", exc.line) if p is not None)
        raise ParseError(f"{place}: {exc}", line=exc.line) from None
    return KernelIR(language, text, data, path, cols, 0)


def _check_cuda_errors(cols: Columns, errors: int, data: bytes, where: str | None) -> None:
    """Refuse CUDA text when most of it sits in ERROR nodes with no structure recovered.

    tree-sitter always returns *a* tree; an ERROR node that still holds functions, classes or
    declarations (e.g. a header whose top-level `#if` confused the grammar) is recovered code
    and stays; text with no anchored node at all, or mostly bare ERROR bytes, is refused.
    """
    if not errors:
        return
    lost = 0
    err_end = rec_end = -1
    kinds, gtypes, starts, ends = cols.kinds, cols.gtypes, cols.starts, cols.ends
    for i in range(1, len(kinds)):
        s, e = starts[i], ends[i]
        if s >= err_end:
            if gtypes[i] == "ERROR":
                lost += e - s
                err_end = e
        elif kinds[i] in ANCHORED and s >= rec_end:
            lost -= e - s
            rec_end = e
    recovered = any(k in ANCHORED for k in kinds[1:])
    if data.strip() and (lost > MAX_ERROR_SHARE * len(data) or not recovered):
        first = next(i for i, g in enumerate(gtypes) if g in ("ERROR", "MISSING") and i)
        line = data.count(b"\n", 0, starts[first]) + 1
        raise ParseError(f"{where or 'source'}: not CUDA C++ (syntax errors cover "
                         f"{lost * 100 // len(data)}% of it, first at line {line})")


def apply_edits(source: bytes, edits: Iterable[Edit]) -> bytes:
    """New source bytes with `edits` applied; edits must not overlap (insertions may touch)."""
    ordered = sorted(edits, key=lambda e: (e.span.start, e.span.end))
    prev_end = 0
    for e in ordered:
        if e.span.start < 0 or e.span.end > len(source) or e.span.start > e.span.end:
            raise BadInputError(f"edit span {e.span.start}..{e.span.end} is outside the source")
        if e.span.start < prev_end:
            raise BadInputError(f"edits overlap at byte {e.span.start}")
        prev_end = e.span.end
    # equivalent to splicing in reverse offset order (each edit's offsets stay valid), built
    # in one pass so many edits on a large file stay linear
    pieces: list[bytes] = []
    pos = 0
    for e in ordered:
        pieces.append(source[pos : e.span.start])
        pieces.append(e.replacement.encode("utf-8"))
        pos = e.span.end
    pieces.append(source[pos:])
    return b"".join(pieces)


def _type_code(gtype: str, _codes: dict[str, int] = {}) -> int:  # noqa: B006 - memo
    code = _codes.get(gtype)
    if code is None:
        code = _codes[gtype] = zlib.crc32(gtype.encode())
    return code


def structure_hashes(ir: KernelIR) -> list[int]:
    """Per node, a hash of the subtree's shape (grammar types only, labels excluded).

    Deterministic across processes (built from CRC32s and tuples of ints, which Python hashes
    without a per-process salt), so it can be stored.
    """
    got = ir._cache.get("shape")
    if got is None:
        gtypes = ir._cols.gtypes
        children = ir._children
        codes = {g: _type_code(g) for g in set(gtypes)}
        got = [0] * len(gtypes)
        for i in range(len(gtypes) - 1, -1, -1):
            ch = children[i]
            code = codes[gtypes[i]]
            got[i] = hash((code, *[got[k] for k in ch])) if ch else code
        ir._cache["shape"] = got
    return got


def label_hashes(ir: KernelIR) -> list[int]:
    """Per node, a hash of the subtree including labels (leaf text, operator names)."""
    got = ir._cache.get("label")
    if got is None:
        c = ir._cols
        src = ir.source
        children = ir._children
        codes = {g: _type_code(g) for g in set(c.gtypes)}
        got = [0] * len(c.gtypes)
        for i in range(len(c.gtypes) - 1, -1, -1):
            ch = children[i]
            code = codes[c.gtypes[i]]
            if ch:
                name = c.names[i]
                own = zlib.crc32(name.encode()) if name else 0
                got[i] = hash((code, own, *[got[k] for k in ch]))
            else:
                got[i] = hash((code, zlib.crc32(src[c.starts[i] : c.ends[i]])))
        ir._cache["label"] = got
    return got


def labels(ir: KernelIR) -> list[str]:
    """Per node, the label a diff compares: leaf text, else the node's name (or "")."""
    got = ir._cache.get("labels")
    if got is None:
        c = ir._cols
        src = ir.source
        children = ir._children
        got = [
            (src[c.starts[i]:c.ends[i]].decode("utf-8", "replace") if not children[i]
             else (c.names[i] or ""))
            for i in range(len(c.gtypes))
        ]
        ir._cache["labels"] = got
    return got
