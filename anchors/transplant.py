"""Edit-script transplant: perform a recorded forward step on another kernel without a rewriter.

A forward transition is carried by its two states `before -> after`. To perform it on a
`target` whose code plays the same roles under other names or layout:

1. the step's edit is cut into *hunks*: runs of tokens of `before` replaced by tokens of
   `after` (whitespace-insensitive token diff; the text written keeps `after`'s formatting);
   the structured edit script `diff(before, after)` names the anchors the step touches;
2. `before` is matched onto the target with the same GumTree matcher as `diff` (structure
   hashes without labels, so renamed identifiers and reformatting still match); each hunk is
   anchored at the smallest node of `before` around it that has a counterpart in the target
   and whose tokens align with that counterpart's (identifiers the kernel names compared by
   position only; what it does not name is compared by its text: the language's keywords and
   built-ins, reserved `__` names and members after `.`, `->` or `::`, so `tl.max` never
   stands in for `tl.sum`, nor `__ldg` for another intrinsic);
3. the identifiers of `before` are renamed to the target's (from the aligned tokens), the hunk
   text is renamed the same way, and the hunks are applied to the target.

Where a touched anchor or a hunk has no counterpart, the transplant refuses and says which
anchor of the step did not map (where a rewriter with judgement has to take over). The result
is only a candidate: the caller gates it like any other.

A step is kept as data by `record` (the text of `before`, the hunks and the anchors its edit
script names; what a SkillCard's carrier stores as `"edit"`) and performed from there by
`transplant_record`.
"""
from __future__ import annotations

import difflib
import functools
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from anchors.index import build_index
from anchors.treediff import diff
from kir.errors import KLineageError
from kir.ir import Edit, KernelIR, Span
from kir.parse import parse

# string literals, comments and preprocessor lines are single tokens: an edit never cuts them;
# nor an operator of several characters (`==`, `->`, `<<=`): the space a hunk keeps from one
# state between two tokens would split it (`tid = = 0`)
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|//[^\n]*|/\*.*?\*/|#[^\n]*'
                    r"|[A-Za-z_]\w*|\d[\w.]*"
                    r"|<<=|>>=|->|::|\+\+|--|&&|\|\||<<|>>|\*\*|[=!<>+\-*/%&|^]=|\S", re.S)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_KEYWORDS = frozenset("""
if else for while do return break continue switch case default const constexpr static inline
void int float double bool char unsigned signed long short auto struct typedef template
typename sizeof true false nullptr def in not and or is None True False lambda with as pass
import from class yield global nonlocal assert del try except finally raise elif
threadIdx blockIdx blockDim gridDim warpSize range min max abs len print
""".split())
# a token after one of these names a member (an API's function, a field): compared by its text
_MEMBER_OF = frozenset({".", "->", "::"})


@dataclass(frozen=True, slots=True)
class _Tok:
    text: str
    start: int
    end: int


def _tokens(text: str, start: int = 0, end: int | None = None) -> list[_Tok]:
    end = len(text) if end is None else end
    return [_Tok(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text, start, end)]


def _shape(tok: str, after: str = "") -> str:
    """What must agree for two tokens to align: a name the kernel gives aligns with any such
    name (renaming), comments with any comment; everything else by its text. `after` is the
    text of what precedes the token (the last two tokens joined: `->` is two)."""
    if tok.startswith(("//", "/*")) or (tok.startswith("#") and not re.match(r"#[a-z]+\b", tok)):
        return "$comment"
    if not _IDENT.fullmatch(tok) or tok in _KEYWORDS or tok.startswith("__"):
        return tok
    if after[-1:] == "." or after[-2:] in _MEMBER_OF:
        return tok
    return "$id"


def _shapes(toks: list[_Tok]) -> list[str]:
    """`_shape` of each token in its context."""
    return [_shape(t.text, "".join(x.text for x in toks[max(0, i - 2):i]))
            for i, t in enumerate(toks)]


@dataclass(frozen=True, slots=True)
class Hunk:
    """One piece of the step: `before[start:end]` became `text` (byte-free char offsets)."""

    start: int
    end: int
    text: str
    first: int  # index of the first token of `before` it replaces (insert: the token after)
    last: int   # one past the last replaced token (== first for an insertion)
    indent: str | None = None
    """For an insertion that starts a line of `after`: that line's indentation (the hunk's text
    begins at its first token)."""
    glued: bool = False
    """An insertion that continues the line of the token before it (`float*` + ` __restrict__`):
    it replaces the space between that token and the next one (which may be on the next line),
    so `text` holds the space around the inserted tokens as the step wrote it."""


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
    out = []
    for op, i1, i2, j1, j2 in _token_opcodes(before, ta, after, tb):
        if op == "insert":
            if i1 > 0 and j1 > 0 and "\n" not in after[tb[j1 - 1].end:tb[j1].start]:
                stop = tb[j2].start if j2 < len(tb) else len(after)
                gap_end = ta[i1].start if i1 < len(ta) else len(before)
                out.append(Hunk(ta[i1 - 1].end, gap_end, after[tb[j1 - 1].end:stop], i1, i1,
                                glued=True))
                continue
            at = ta[i1].start if i1 < len(ta) else len(before)
            stop = tb[j2].start if j2 < len(tb) else len(after)
            indent = after[after.rfind("\n", 0, tb[j1].start) + 1:tb[j1].start]
            out.append(Hunk(at, at, after[tb[j1].start:stop], i1, i1,
                            indent if not indent.strip() else None))
        elif op == "delete":
            out.append(Hunk(*_deletion(before, ta, i1, i2), "", i1, i2))
        else:
            out.append(Hunk(ta[i1].start, ta[i2 - 1].end, after[tb[j1].start:tb[j2 - 1].end], i1, i2))
    return out


def _deletion(text: str, toks: Sequence[_Tok], i1: int, i2: int) -> tuple[int, int]:
    """The characters to remove with tokens [i1, i2) of `text`: within a line, the space up to
    the next token goes too; whole lines go with their line break (the next line keeps its own
    indentation); a run that ends a line it does not begin takes the space before it and keeps
    the line break (lines are never joined: Python reads them)."""
    start, end = toks[i1].start, toks[i2 - 1].end
    nxt = m.start() if (m := _TOKEN.search(text, end)) else len(text)
    gap = text[end:nxt]
    if "\n" not in gap:
        return start, nxt
    line_start = text.rfind("\n", 0, start) + 1
    if not text[line_start:start].strip():
        return line_start, end + gap.index("\n") + 1
    prev = toks[i1 - 1].end if i1 > 0 else start
    return (prev if "\n" not in text[prev:start] else start), end


def _token_opcodes(before: str, ta: list[_Tok], after: str, tb: list[_Tok]
                   ) -> list[tuple[str, int, int, int, int]]:
    """The changed token runs (difflib opcodes, "equal" left out) of `ta -> tb`: lines are
    matched first by the tokens they start (a kernel of hundreds of lines diffs in
    milliseconds), then the tokens of each changed run of lines (so a line broken or joined
    differently changes nothing)."""
    la, lb = _line_groups(before, ta), _line_groups(after, tb)
    lines = difflib.SequenceMatcher(None, [g[0] for g in la], [g[0] for g in lb], autojunk=False)
    out = []
    for op, i1, i2, j1, j2 in lines.get_opcodes():
        if op == "equal":
            continue
        a1 = la[i1][1] if i1 < len(la) else len(ta)
        a2 = la[i2 - 1][2] if i2 > i1 else a1
        b1 = lb[j1][1] if j1 < len(lb) else len(tb)
        b2 = lb[j2 - 1][2] if j2 > j1 else b1
        sm = difflib.SequenceMatcher(None, [t.text for t in ta[a1:a2]],
                                     [t.text for t in tb[b1:b2]], autojunk=False)
        out += [(tag, a1 + k1, a1 + k2, b1 + m1, b1 + m2)
                for tag, k1, k2, m1, m2 in sm.get_opcodes() if tag != "equal"]
    return out


def _line_groups(text: str, toks: list[_Tok]) -> list[tuple[tuple[str, ...], int, int]]:
    """(token texts, first token, one past the last) of each line that starts a token."""
    groups: list[tuple[tuple[str, ...], int, int]] = []
    line, first = -1, 0
    at, count = 0, 0
    for i, t in enumerate(toks):
        count += text.count("\n", at, t.start)
        at = t.start
        if count != line:
            if i > first:
                groups.append((tuple(x.text for x in toks[first:i]), first, i))
            line, first = count, i
    if toks:
        groups.append((tuple(x.text for x in toks[first:]), first, len(toks)))
    return groups


class _Alignment:
    """Token positions of `before` -> `target` inside one matched pair of nodes."""

    def __init__(self, a: list[_Tok], b: list[_Tok]) -> None:
        self.a, self.b = a, b
        self.shapes = _shapes(a)
        sm = difflib.SequenceMatcher(None, self.shapes, _shapes(b), autojunk=False)
        self.map: dict[int, int] = {}
        for blk in sm.get_matching_blocks():
            for k in range(blk.size):
                self.map[blk.a + k] = blk.b + k

    def names(self) -> Counter[tuple[str, str]]:
        return Counter((self.a[i].text, self.b[j].text) for i, j in self.map.items()
                       if self.shapes[i] == "$id")

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
                start, end = (_deletion(target.text, b_toks, j1, j2) if not h.text
                              else (b_toks[j1].start, b_toks[j2 - 1].end))
            elif h.glued:
                start = b_toks[j1 - 1].end
                end = b_toks[j1].start if j1 < len(b_toks) else start
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
        text = _renamed(h.text, rename)
        if h.glued and "\n" in target.text[start:end]:  # the target breaks the line there
            text = text.rstrip() + target.text[start:end]
        elif start == end and "\n" in text:  # inserted lines take the target's indentation
            line = target.text[target.text.rfind("\n", 0, start) + 1:start]
            if not line.strip():
                body, tail = text[:text.rfind("\n") + 1], text[text.rfind("\n") + 1:]
                if h.indent is not None and not tail.strip():
                    # whole lines: shifted as far as the target indents the line they precede
                    # more than the step did (a line before a closing brace stays inside it)
                    text = _shifted(h.indent + body, len(line) - len(tail))
                    start = end = start - len(line)
                else:
                    text = body + line
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


def _shifted(block: str, shift: int) -> str:
    """`block` with every non-blank line's indentation made `shift` columns wider (narrower)."""
    if not shift:
        return block
    out = []
    for line in block.splitlines(keepends=True):
        body = line.lstrip(" \t")
        out.append(" " * max(0, len(line) - len(body) + shift) + body if body.strip() else line)
    return "".join(out)


def _renamed(text: str, rename: Mapping[str, str]) -> str:
    """`text` with the names the kernel gives renamed (members and built-ins left alone)."""
    toks = _tokens(text)
    out, at = [], 0
    for tok, shape in zip(toks, _shapes(toks)):
        if shape == "$id" and tok.text in rename:
            out += [text[at:tok.start], rename[tok.text]]
            at = tok.end
    return "".join(out) + text[at:]


def _rename_map(pairs: Counter[tuple[str, str]]) -> dict[str, str]:
    """Step identifier -> target identifier, the most frequent pairing of each name."""
    best: dict[str, tuple[int, str]] = {}
    for (a, b), n in pairs.items():
        if a not in best or n > best[a][0]:
            best[a] = (n, b)
    return {a: b for a, (_, b) in best.items() if a != b}


# -- a step as data -------------------------------------------------------------------------------
def record(before: str, after: str, language: str, anchors: Sequence[str] = ()) -> dict[str, Any]:
    """The step `before -> after` as JSON data: `{"language", "before": before's text,
    "hunks": [[start, end, text]] (the changed runs of lines: `before[start:end]` became `text`,
    char offsets), "anchors": the anchor ids its edit script names (as recorded;
    informative)}`. `replay` gives back both states exactly (a re-indented Python block
    included)."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    offsets = [0]
    for line in a:
        offsets.append(offsets[-1] + len(line))
    runs = [[offsets[i1], offsets[i2], "".join(b[j1:j2])] for op, i1, i2, j1, j2
            in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op != "equal"]
    return {"language": str(language), "before": before, "hunks": runs,
            "anchors": list(dict.fromkeys(str(x) for x in anchors if x))}


def replay(data: Mapping[str, Any]) -> tuple[KernelIR, KernelIR]:
    """The two states of a recorded step (see `record`); ValueError for a malformed record,
    `kir.errors.KLineageError` for one whose text does not parse."""
    try:
        language, before = str(data["language"]), str(data["before"])
        pieces = tuple((int(h[0]), int(h[1]), str(h[2])) for h in data["hunks"])
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"not a recorded step: {exc!r}") from None
    return _replayed(language, before, pieces)


@functools.lru_cache(maxsize=64)
def _replayed(language: str, before: str, pieces: tuple[tuple[int, int, str], ...]
              ) -> tuple[KernelIR, KernelIR]:
    text, last = before, len(before)
    for start, end, new in sorted(pieces, reverse=True):
        if not 0 <= start <= end <= last:
            raise ValueError(f"a recorded hunk [{start}, {end}) lies outside the step's text "
                             "or overlaps the next")
        text, last = text[:start] + new + text[end:], start
    return parse(before, language), parse(text, language)


def transplant_record(data: Mapping[str, Any], target: KernelIR) -> Transplant:
    """`transplant` of a recorded step (see `record`) onto `target`; a record that is malformed,
    does not parse, or is of another language is a refusal."""
    language = str(getattr(target.language, "value", target.language))
    if str(data.get("language", "")) != language:
        return Transplant(False, None, f"the step is {data.get('language') or 'of no language'}, "
                          f"the target {language}")
    try:
        before, after = replay(data)
    except (ValueError, KLineageError) as exc:
        return Transplant(False, None, f"the recorded step cannot be replayed: {exc}")
    return transplant(before, after, target)
