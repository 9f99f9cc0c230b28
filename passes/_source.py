"""Shared plumbing of the rewrite rules: byte offsets, anchors of sites, applying span edits.

Rules find constructs on the source text (Python `ast` for Triton, a token-aware scanner for
CUDA) and express rewrites as byte-span edits on the IR's source (positions: see
docs/INTERFACES.md). `finish` turns those edits into an `Applied` result — refusing edits that
leave the site's region, and reporting a result that no longer parses as `Failed`.
"""
from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kir.errors import KLineageError
from passes.base import Applied, Failed, Site

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

    from passes.precondition import PreconditionResult


@dataclass(frozen=True, slots=True)
class ByteEdit:
    """Replace source bytes `[start, end)` with `text`."""

    start: int
    end: int
    text: str


class Offsets:
    """Converts character offsets of `text` to byte offsets of its UTF-8 encoding."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.ascii = text.isascii()
        self._marks: list[int] = []
        self._bytes: list[int] = []
        if not self.ascii:
            total = 0
            for i, ch in enumerate(text):
                size = len(ch.encode("utf-8"))
                if size > 1:
                    self._marks.append(i)
                    total += size - 1
                    self._bytes.append(total)

    def byte(self, char: int) -> int:
        if self.ascii:
            return char
        k = bisect.bisect_left(self._marks, char)
        return char + (self._bytes[k - 1] if k else 0)


def anchor_for(ir: KernelIR, index: AnchorIndex | None, start: int, end: int) -> str:
    """The id of the smallest anchor whose span contains bytes `[start, end)` (the root
    anchor when none does)."""
    if index is None:
        import anchors  # noqa: PLC0415 — anchors imports kir; only needed when a site is built

        index = anchors.build_index(ir)
    best = None
    best_len = None
    for anchor in index.anchors:
        span = anchor.span
        if span.start <= start and end <= span.end:
            length = span.end - span.start
            if best_len is None or length < best_len or (length == best_len and best is None):
                best, best_len = anchor, length
    if best is None:
        best = index.anchors[0] if index.anchors else None
    return str(best.id) if best is not None else f"{ir.language}:root"


def make_site(pass_name: str, ir: KernelIR, index: AnchorIndex | None, span: tuple[int, int],
              present: bool, detail: Mapping[str, Any] | None = None,
              locus: tuple[int, int] | None = None) -> Site:
    """A site whose rewrite may touch bytes `span`; its anchor is the one containing `locus`
    (the construct itself; defaults to `span`)."""
    where = locus or span
    return Site(pass_name, anchor_for(ir, index, *where), present, dict(detail or {}), span)


def finish(ir: KernelIR, site: Site, edits: Sequence[ByteEdit], *,
           options: Mapping[str, Any] | None = None,
           preconditions: Iterable[PreconditionResult] = ()) -> Applied | Failed:
    """Apply `edits` (all inside `site.span`) and return `Applied`, or `Failed` when an edit
    leaves the region, the edits overlap or the new source does not parse cleanly."""
    from kir import Edit, Span  # noqa: PLC0415

    lo, hi = site.span
    for e in edits:
        if e.start < lo or e.end > hi:
            return Failed(f"edit {e.start}..{e.end} leaves the site's region {lo}..{hi}")
    if not edits:
        return Failed("the rule produced no edit")
    kedits = tuple(Edit(Span(e.start, e.end), e.text) for e in edits)
    try:
        new_ir = ir.apply(kedits)
    except KLineageError as exc:
        return Failed(f"the rewritten kernel does not parse: {exc}")
    grown = _hard_errors(new_ir) - _hard_errors(ir)
    if grown > 0:
        return Failed(f"the rewritten kernel has {grown} new syntax error(s)")
    return Applied(kedits, new_ir, dict(options or {}), tuple(preconditions))


def _hard_errors(ir: KernelIR) -> int:
    """Tree-sitter ERROR nodes that cover text. Zero-width MISSING nodes are left out: the CUDA
    grammar reports them around preprocessor lines inside statements (e.g. a `#pragma unroll`
    in an unbraced loop body), which compilers accept."""
    if not ir.error_nodes:
        return 0
    from kir import kinds  # noqa: PLC0415

    return sum(1 for node in ir.find(kind=kinds.ERROR) if node.span.end > node.span.start)


def line_start(source: bytes, pos: int) -> int:
    """Byte offset of the start of the line holding `pos`."""
    return source.rfind(b"\n", 0, pos) + 1


def line_end(source: bytes, pos: int) -> int:
    """Byte offset just past the newline ending the line holding `pos` (or the end)."""
    nl = source.find(b"\n", pos)
    return len(source) if nl < 0 else nl + 1


def indent_of(source: bytes, pos: int) -> str:
    """The leading whitespace of the line holding `pos`."""
    start = line_start(source, pos)
    end = start
    while end < len(source) and source[end:end + 1] in (b" ", b"\t"):
        end += 1
    return source[start:end].decode("utf-8")


def restore_recorded(ir: KernelIR, site: Site, before: str, after: str) -> Applied | Failed | None:
    """Replace the one occurrence of `after` (what a de-optimization wrote) inside the site's
    region with `before` (what it replaced). None when `after` is not there exactly once."""
    region = ir.source[site.span[0]:site.span[1]]
    needle = after.encode("utf-8")
    if not needle or region.count(needle) != 1:
        return None
    at = site.span[0] + region.find(needle)
    return finish(ir, site, [ByteEdit(at, at + len(needle), before)])
