"""Edit-script transplant: perform a recorded forward step on another kernel without a rewriter.

A forward transition is carried by its two states `before -> after`. To perform it on a
`target` whose code plays the same roles under other names or layout:

1. the step's edit is cut into *hunks*: runs of tokens of `before` replaced by tokens of
   `after` (whitespace-insensitive token diff; the text written keeps `after`'s formatting);
   the structured edit script `diff(before, after)` names the anchors the step touches;
2. `before` is matched onto the target with the same GumTree matcher as `diff` (structure
   hashes without labels, so renamed identifiers and reformatting still match); each hunk is
   anchored at the smallest node of `before` around it that has a counterpart in the target
   and whose tokens align with that counterpart's (identifiers compared by position only);
3. the identifiers of `before` are renamed to the target's (from the aligned tokens), the hunk
   text is renamed the same way, and the hunks are applied to the target.

Where a touched anchor or a hunk has no counterpart, the transplant refuses and says which
anchor of the step did not map (where a rewriter with judgement has to take over). The result
is only a candidate: the caller gates it like any other.
"""
from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kir.ir import Edit, KernelIR, Span

# string literals, comments and preprocessor lines are single tokens: an edit never cuts them
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|//[^\n]*|/\*.*?\*/|#[^\n]*'
                    r"|[A-Za-z_]\w*|\d[\w.]*|\S", re.S)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_KEYWORDS = frozenset("""
if else for while do return break continue switch case default const constexpr static inline
void int float double bool char unsigned signed long short auto struct typedef template
typename sizeof true false nullptr def in not and or is None True False lambda with as pass
import from class yield global nonlocal assert del try except finally raise elif
""".split())


@dataclass(frozen=True, slots=True)
class _Tok:
    text: str
    start: int
    end: int


def _tokens(text: str, start: int = 0, end: int | None = None) -> list[_Tok]:
    end = len(text) if end is None else end
    return [_Tok(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text, start, end)]


def _shape(tok: str) -> str:
    """What must agree for two tokens to align: identifiers align with any identifier
    (renaming), comments with any comment; everything else by its text."""
    if tok.startswith(("//", "/*")) or (tok.startswith("#") and not re.match(r"#[a-z]+\b", tok)):
        return "$comment"
    return "$id" if _IDENT.fullmatch(tok) and tok not in _KEYWORDS else tok


@dataclass(frozen=True, slots=True)
class Hunk:
    """One piece of the step: `before[start:end]` became `text` (byte-free char offsets)."""

    start: int
    end: int
    text: str
    first: int  # index of the first token of `before` it replaces (insert: the token after)
    last: int   # one past the last replaced token (== first for an insertion)


@dataclass(frozen=True, slots=True)
class Placed:
    """Where a hunk landed: the anchor of `before` it hangs on and its counterpart."""

    anchor: str
    target_anchor: str
    start: int
    end: int
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"anchor": self.anchor, "target_anchor": self.target_anchor,
                "span": [self.start, self.end], "text": self.text}


@dataclass(frozen=True, slots=True)
class Transplant:
    """The outcome: `ok` with the transplanted `text`, or a `reason` naming what did not map.
    `renamed` is the identifier map applied (step name -> target name)."""

    ok: bool
    text: str | None
    reason: str = ""
    placed: tuple[Placed, ...] = ()
    renamed: dict[str, str] = field(default_factory=dict)
    unmapped: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "reason": self.reason, "placed": [p.to_json() for p in self.placed],
                "renamed": dict(self.renamed), "unmapped": list(self.unmapped)}


def hunks(before: str, after: str) -> list[Hunk]:
    """The step `before -> after` as token-run replacements on `before`."""
    ta, tb = _tokens(before), _tokens(after)
    sm = difflib.SequenceMatcher(None, [t.text for t in ta], [t.text for t in tb], autojunk=False)
    out = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            continue
        if op == "insert":
            at = ta[i1].start if i1 < len(ta) else len(before)
            stop = tb[j2].start if j2 < len(tb) else len(after)
            out.append(Hunk(at, at, after[tb[j1].start:stop], i1, i1))
        elif op == "delete":
            stop = ta[i2].start if i2 < len(ta) else len(before)
            out.append(Hunk(ta[i1].start, stop, "", i1, i2))
        else:
            out.append(Hunk(ta[i1].start, ta[i2 - 1].end, after[tb[j1].start:tb[j2 - 1].end], i1, i2))
    return out


class _Alignment:
    """Token positions of `before` -> `target` inside one matched pair of nodes."""

    def __init__(self, a: list[_Tok], b: list[_Tok]) -> None:
        self.a, self.b = a, b
        sm = difflib.SequenceMatcher(None, [_shape(t.text) for t in a], [_shape(t.text) for t in b],
                                     autojunk=False)
        self.map: dict[int, int] = {}
        for blk in sm.get_matching_blocks():
            for k in range(blk.size):
                self.map[blk.a + k] = blk.b + k

    def names(self) -> Counter[tuple[str, str]]:
        return Counter((self.a[i].text, self.b[j].text) for i, j in self.map.items()
                       if _shape(self.a[i].text) == "$id")

    def place(self, first: int, last: int) -> tuple[int, int] | None:
        """Target token range of `before` tokens [first, last) (an insertion when equal):
        every replaced token and the tokens on both sides must align, in order."""
        lo, hi = first - 1, last  # neighbours that pin the position
        inside = list(range(first, last))
        pins = [i for i in (lo, *inside, hi) if 0 <= i < len(self.a)]
        if not pins or any(i not in self.map for i in pins):
            return None
        mapped = [self.map[i] for i in pins]
        if mapped != list(range(mapped[0], mapped[0] + len(mapped))):
            return None
        start = self.map[first] if first < len(self.a) and inside else (
            self.map[lo] + 1 if lo >= 0 else self.map[hi])
        return start, start + len(inside)


def _smallest_nodes(ir: KernelIR, start: int, end: int) -> list[int]:
    """Nodes whose span holds [start, end) (strictly around an insertion point), innermost
    first."""
    out = []
    for nid in range(len(ir)):
        s = ir.span_of(nid)
        if (s.start <= start and end <= s.end) if end > start else (s.start < start < s.end):
            out.append(nid)
    return sorted(out, key=lambda n: ir.span_of(n).end - ir.span_of(n).start)


def transplant(before: KernelIR, after: KernelIR, target: KernelIR) -> Transplant:
    """Perform the step `before -> after` on `target` (all of one language); see the module
    docstring. Never raises for a step that does not fit: the result says why."""
    from anchors import build_index  # anchors builds on kir; imported lazily as in `diff`
    from kir.treediff import diff  # noqa: PLC0415

    if len({before.language, after.language, target.language}) != 1:
        return Transplant(False, None, "the step and the target are in different languages")
    pieces = hunks(before.text, after.text)
    if not pieces:
        return Transplant(False, None, "the step changes nothing")
    match = diff(before, target).mapping
    ib, it = build_index(before), build_index(target)
    # the anchors the step touches must have counterparts in the target
    step = diff(before, after)
    unmapped = []
    for action in step.actions:
        anchor = action.anchor if action.src is not None else (action.new_anchor or action.anchor)
        a = next((x for x in ib.anchors if str(x.id) == anchor), None)
        if a is not None and a.node not in match and a.node != 0:
            unmapped.append(anchor)
    if unmapped:
        uniq = tuple(dict.fromkeys(unmapped))
        return Transplant(False, None, f"anchor {uniq[0]} of the step has no counterpart in the "
                          "target", unmapped=uniq)

    ta = _tokens(before.text)
    placed: list[tuple[int, int, Hunk, int, int]] = []
    names: Counter[tuple[str, str]] = Counter()
    for h in pieces:
        at = None
        for nid in _smallest_nodes(before, h.start, h.end):
            if nid not in match:
                continue
            s, d = before.span_of(nid), target.span_of(match[nid])
            a_toks = [t for t in ta if s.start <= t.start and t.end <= s.end]
            offset = next(i for i, t in enumerate(ta) if t.start >= s.start) if a_toks else 0
            b_toks = _tokens(target.text, d.start, d.end)
            align = _Alignment(a_toks, b_toks)
            where = align.place(h.first - offset, h.last - offset)
            if where is None:
                continue
            names.update(align.names())
            j1, j2 = where
            if j1 < j2:
                start, end = b_toks[j1].start, b_toks[j2 - 1].end
                if not h.text:  # a deletion also takes the space up to the next token
                    end = b_toks[j2].start if j2 < len(b_toks) else end
            else:
                start = end = b_toks[j1].start if j1 < len(b_toks) else d.end
            at = (start, end, h, nid, match[nid])
            break
        if at is None:
            anchor = ib.enclosing(_smallest_nodes(before, h.start, h.end)[0]).id \
                if _smallest_nodes(before, h.start, h.end) else "root"
            return Transplant(False, None, f"the edit at anchor {anchor} (line "
                              f"{before.text.count(chr(10), 0, h.start) + 1}) has no aligned "
                              "counterpart in the target", unmapped=(str(anchor),))
        placed.append(at)
    rename = _rename_map(names)
    edits, records = [], []
    for start, end, h, nid, tid in sorted(placed, key=lambda p: p[0]):
        text = _TOKEN.sub(lambda m: rename.get(m.group(0), m.group(0)), h.text)
        if start == end and "\n" in text:  # inserted lines take the target's indentation
            line = target.text[target.text.rfind("\n", 0, start) + 1:start]
            if not line.strip():
                text = text[:text.rfind("\n") + 1] + line
        edits.append(Edit(Span(len(target.text[:start].encode()), len(target.text[:end].encode())), text))
        records.append(Placed(str(ib.enclosing(nid).id), str(it.enclosing(tid).id), start, end, text))
    for x, y in zip(edits, edits[1:]):
        if x.span.end > y.span.start:
            return Transplant(False, None, "two edits of the step land on overlapping target text")
    try:
        new = target.apply(tuple(edits))
    except Exception as exc:  # noqa: BLE001 — a transplant that does not parse is a refusal
        return Transplant(False, None, f"the transplanted kernel does not parse: {exc}")
    return Transplant(True, new.text, "", tuple(records), rename)


def _rename_map(pairs: Counter[tuple[str, str]]) -> dict[str, str]:
    """Step identifier -> target identifier, the most frequent pairing of each name."""
    best: dict[str, tuple[int, str]] = {}
    for (a, b), n in pairs.items():
        if a not in best or n > best[a][0]:
            best[a] = (n, b)
    return {a: b for a, (_, b) in best.items() if a != b}
