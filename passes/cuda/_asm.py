"""Rules that rewrite inline-PTX statements into calls of inserted helper functions.

A rule of this kind matches each `asm(...)` statement of a translation unit by its instruction
template (`AsmRule.match`), replaces the ones it handles with a helper call, inserts its helpers
once after the file's leading comments and includes, and records `[original, replacement]`
pairs (the inserted helpers first) so that `optimize` restores them exactly. Without a record
there is no forward rule: which staging and layout feed an instruction is kernel-specific.
A statement the rule finds but cannot rewrite refuses the whole de-optimization with its reason
(the helpers are per file, so the rule applies to all of a file's instructions or none).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, make_site
from passes.base import Pass, PassContext, PassResult, Site, Skipped
from passes.cuda._c import CSource, Function, asm_template, find_iter, functions

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

ASM = re.compile(r"\basm\s*(?:volatile\s*|__volatile__\s*)?\(")
# what an asynchronous operation's fence/commit/wait becomes once the operation is synchronous
COMPILER_BARRIER = 'asm volatile("" ::: "memory")'


@dataclass(frozen=True, slots=True)
class AsmRewrite:
    """One matched asm statement: `[start, end)` (character offsets) and what replaces it."""

    start: int
    end: int
    replacement: str | None  # None: a form the rule cannot rewrite
    why: str = ""


def helper_insert_at(src: CSource) -> int:
    """Where inserted helpers go: after the file's leading comments, blank lines, includes and
    `#pragma once`, at the start of the first other line."""
    pos = 0
    while pos < len(src.text):
        end = src.line_end(pos)
        line = src.code[pos:end].strip()
        if line and not re.match(r"#\s*(include|pragma\s+once)\b", line):
            return pos
        pos = end
    return len(src.text)


class AsmRule(Pass):
    """Shared mechanics: rewrite inline-asm statements into helper calls, insert the helpers
    once, record `[original, replacement]` pairs and restore them forward. Subclasses are
    dataclasses with a `pairs: str` option and implement `match`."""

    __slots__ = ()
    helpers: ClassVar[str] = ""
    marker: ClassVar[str] = ""
    """A name the helpers define: its presence marks an applicable (de-optimized) site."""
    forward_needs: ClassVar[str] = "the operand staging is kernel-specific"
    """Why the forward rule needs the record (the end of the refusal's reason)."""

    def rewrites(self, src: CSource) -> list[AsmRewrite]:
        """The asm statements this rule matches, in source order."""
        out = []
        for m in find_iter(ASM, src):
            open_at = m.end() - 1
            end = src.close(open_at)
            template = asm_template(src, open_at)
            result = self.match(src, open_at, template)
            if result is None:
                continue
            replacement, why = result
            out.append(AsmRewrite(m.start(), end, replacement, why))
        return out

    def match(self, src: CSource, open_at: int, template: str) -> tuple[str | None, str] | None:
        """(replacement, "") for a statement the rule rewrites, (None, reason) for one it finds
        and refuses, None for one that is not its own. `open_at` is the statement's `(`."""
        raise NotImplementedError

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        src = CSource(ir)
        found = self.rewrites(src)
        out = []
        if found:
            start = min(helper_insert_at(src), found[0].start)
            out.append(make_site(self.name, ir, index, src.bspan(start, found[-1].end), True,
                                 {"instructions": len(found),
                                  "refused": sum(r.replacement is None for r in found)},
                                 src.bspan(found[0].start, found[0].end)))
        at = src.code.find(self.marker + "(") if self.marker else -1
        if at >= 0 and not found:
            out.append(make_site(self.name, ir, index, (0, len(ir.source)), False,
                                 {"calls": len(re.findall(rf"\b{self.marker}\b", src.code)) - 1},
                                 src.bspan(at, at + len(self.marker))))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        src = CSource(ir)
        found = self.rewrites(src)
        if not found or src.bspan(found[0].start, found[-1].end)[1] != site.span[1]:
            return Skipped(f"no {self.name} instructions at the site", {"site": site.anchor})
        bad = [r for r in found if r.replacement is None]
        if bad:
            return Skipped(bad[0].why, {"line": src.text.count("\n", 0, bad[0].start) + 1})
        insert = helper_insert_at(src)
        pairs = [["", self.helpers]] + [[src.text[r.start:r.end], r.replacement] for r in found]
        edits = [src.edit(insert, insert, self.helpers)]
        edits += [src.edit(r.start, r.end, r.replacement) for r in found]
        return finish(ir, site, edits, options={"pairs": json.dumps(pairs)})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        if not self.pairs:  # type: ignore[attr-defined]
            return Skipped(f"re-deriving {self.name} needs the recorded instructions "
                           f"({self.forward_needs})", {})
        results, skip = self.check(ctx)
        if skip:
            return skip
        text = ir.source
        pos, edits = site.span[0], []
        for before, after in json.loads(self.pairs):  # type: ignore[attr-defined]
            needle = after.encode("utf-8")
            at = text.find(needle, pos, site.span[1])
            if at < 0 and not before:
                found = _inserted_functions(CSource(ir), after, pos, site.span[1])
                if isinstance(found, str):
                    return Skipped(f"the recorded {self.name} helpers are not in the kernel: "
                                   f"{found}", {})
                edits += found
                pos = max(e.end for e in found)
                continue
            if at < 0:
                return Skipped(f"the recorded {self.name} replacement is not in the kernel", {})
            edits.append(ByteEdit(at, at + len(needle), before))
            pos = at + len(needle)
        return finish(ir, site, edits, preconditions=results)


def _inserted_functions(src: CSource, helpers: str, lo: int, hi: int) -> list[ByteEdit] | str:
    """Edits deleting the functions that the recorded `helpers` text defines, found in `src` by
    name (byte range `[lo, hi)`), or why they cannot be.

    Restoring an instruction removes the helpers its de-optimization inserted; what those
    helpers' bodies hold does not matter for that. Later de-optimizations may have rewritten
    inside them (the warp shuffles of the scalar mma emulation became shared-memory exchanges),
    and a forward step that restored only some of those leaves the bodies different from the
    record; the functions are still the rule's own, named as recorded."""
    names = [f.name for f in functions(CSource.of_text(helpers))]
    if not names:
        return "the record defines no function"
    defs: dict[str, list[Function]] = {}
    for f in functions(src):
        if f.name in names and not src.function_at(f.start):
            defs.setdefault(f.name, []).append(f)
    edits = []
    for name in names:
        found = defs.get(name, [])
        if len(found) != 1:
            return f"{name} is defined {len(found)} times"
        f = found[0]
        start, end = src.bspan(f.start, src.line_end(f.body_end - 1))
        if start < lo or end > hi:
            return f"{name} lies outside the site"
        edits.append(ByteEdit(start, end, ""))
    edits.sort(key=lambda e: e.start)
    if any(a.end > b.start for a, b in zip(edits, edits[1:])):
        return "the recorded functions overlap"
    return edits
