"""Finding CUDA C++ constructs in source text.

The CUDA rules match on a *code view* of the text: comments and string/char literals are blanked
(same length, newlines kept) so a pattern never fires inside them, while offsets stay those of
the real text. Inline-asm strings are read from the real text where a rule needs them.
Offsets here are character offsets of `KernelIR.text`; `Offsets` turns them into byte offsets.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from passes._source import ByteEdit, Offsets

if TYPE_CHECKING:
    from kir import KernelIR

_PAIRS = {"(": ")", "[": "]", "{": "}"}
_BRACKET = re.compile(r"[()\[\]{}]")


@lru_cache(maxsize=64)
def code_view(text: str) -> str:
    """`text` with comments and string/char literals replaced by spaces (newlines kept).
    Remembered for the last texts seen: the rules view the same kernel text many times.

    A literal ends at its closing quote, at the end of its line (an unterminated one, whose
    last character is kept) or of the text; a backslash escapes the character after it. A
    quote whose literal would be longer than a character literal can be (a digit separator,
    `1'000'000`) is code."""
    pieces: list[str] = []
    done = i = 0
    n = len(text)
    while (m := _SKIPPED.search(text, i)) is not None:
        quote = m.group("quote")
        if quote is None:  # a comment: blanked whole
            start, end = m.start(), m.end()
        else:
            body = (_DOUBLE_BODY if quote == '"' else _SINGLE_BODY).match(text, m.end())
            stop = min(body.end() + 1, n)
            if quote == "'" and stop - m.start() > 8:
                i = m.start() + 1
                continue
            start, end = m.start() + 1, stop - 1
        if end > start:
            pieces += [text[done:start], _blank(text[start:end])]
            done = end
        i = max(end, m.start() + 1) if quote is None else stop
    pieces.append(text[done:])
    return "".join(pieces)


_SKIPPED = re.compile(r"//[^\n]*|/\*[\s\S]*?(?:\*/|\Z)|(?P<quote>[\"'])")
_DOUBLE_BODY = re.compile(r'(?:\\[\s\S]?|[^"\\\n])*')
_SINGLE_BODY = re.compile(r"(?:\\[\s\S]?|[^'\\\n])*")


_STRUCT = re.compile(r"\b(?:typedef\s+)?(?:struct|class)\s+(\w*)\s*\{([^{}]*)\}\s*(\w*)")
_QUALIFIERS = re.compile(r"\b(?:const|volatile|__restrict__|__restrict|restrict)\b")


@lru_cache(maxsize=64)
def pointer_fields(text: str) -> dict[str, dict[str, str]]:
    """The pointer fields of each structure `text` defines (`struct S {...};`, `typedef struct
    {...} S;`): structure name -> {field: the type it points to, qualifiers dropped}. Fields
    of a structure with a member function or a nested type are not read (its braces)."""
    out: dict[str, dict[str, str]] = {}
    for m in _STRUCT.finditer(code_view(text)):
        fields: dict[str, str] = {}
        for decl in m.group(2).split(";"):
            head, star, rest = decl.partition("*")
            kind = " ".join(_QUALIFIERS.sub(" ", head).split())
            if not star or not re.fullmatch(r"[\w:]+(?: [\w:]+)*", kind):
                continue
            for declarator in (star + rest).split(","):
                name = re.fullmatch(r"\s*\*\s*(?:(?:const|__restrict__|__restrict)\s+)*([A-Za-z_]\w*)\s*",
                                    declarator)
                if name is not None:
                    fields[name.group(1)] = kind
        for name in (m.group(1), m.group(3)):
            if name:
                out[name] = fields
    return out


def _blank(segment: str) -> str:
    return re.sub(r"[^\n]", " ", segment)


class CSource:
    """The text of a CUDA IR with its code view and byte-offset conversion."""

    def __init__(self, ir: KernelIR) -> None:
        self.ir = ir
        self.text: str = ir.text
        self.code = code_view(self.text)
        self.offsets = Offsets(self.text)

    @classmethod
    def of_text(cls, text: str) -> CSource:
        """A view of bare text (no IR behind it): for reading recorded fragments."""
        src = cls.__new__(cls)
        src.ir, src.text, src.code, src.offsets = None, text, code_view(text), Offsets(text)  # type: ignore[assignment]
        return src

    def b(self, char: int) -> int:
        return self.offsets.byte(char)

    def edit(self, start: int, end: int, text: str) -> ByteEdit:
        return ByteEdit(self.b(start), self.b(end), text)

    def bspan(self, start: int, end: int) -> tuple[int, int]:
        return self.b(start), self.b(end)

    def close(self, open_at: int) -> int:
        """Index just past the bracket matching the one at `open_at` (len(text) if none)."""
        if self.code[open_at] not in _PAIRS:
            raise KeyError(self.code[open_at])
        return _bracket_ends(self.code).get(open_at, len(self.code))

    def statement_end(self, start: int) -> int:
        """Index just past the `;` ending the statement that starts at `start` (brackets
        balanced)."""
        depth = 0
        for i in range(start, len(self.code)):
            ch = self.code[i]
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
                if depth < 0:
                    return i
            elif ch == ";" and depth == 0:
                return i + 1
        return len(self.code)

    def statement_start(self, pos: int) -> int:
        """Start of the statement holding `pos`: just after the previous `;`, `{` or `}` at
        the same nesting level, or after the `)` of a `for`/`if`/`while` header or an `else`
        whose unbraced body it is; preprocessor lines in front are not part of it."""
        depth = 0
        closing = -1
        i = pos - 1
        while i >= 0:
            ch = self.code[i]
            if ch in ")]":
                if depth == 0:
                    closing = i
                depth += 1
            elif ch in "([":
                if depth == 0:
                    break
                depth -= 1
                if depth == 0 and ch == "(" and re.search(r"\b(for|if|while|switch)\s*$",
                                                          self.code[max(0, i - 12):i]):
                    i = closing
                    break
            elif ch in ";{}" and depth == 0:
                break
            i -= 1
        j = i + 1
        while True:
            while j < pos and self.code[j].isspace():
                j += 1
            if self.code.startswith("#", j):  # a preprocessor line: skip it
                j = self.line_end(j)
                continue
            word = re.match(r"(else|do)\b", self.code[j:j + 5])
            if word:
                j += word.end()
                continue
            return j

    def line_start(self, pos: int) -> int:
        return self.text.rfind("\n", 0, pos) + 1

    def line_end(self, pos: int) -> int:
        nl = self.text.find("\n", pos)
        return len(self.text) if nl < 0 else nl + 1

    def indent(self, pos: int) -> str:
        start = self.line_start(pos)
        end = start
        while end < len(self.text) and self.text[end] in " \t":
            end += 1
        return self.text[start:end]

    def functions(self) -> list[Function]:
        """Function definitions (`__global__` / `__device__` ones and plain ones) with bodies."""
        return list(_function_table(self.text))

    def _scan_functions(self) -> list[Function]:
        out = []
        for m in _FUNC.finditer(self.code):
            name_start = m.start("name")
            paren = m.end() - 1
            params_end = self.close(paren)
            j = params_end
            while j < len(self.code) and (self.code[j].isspace()):
                j += 1
            # skip trailing qualifiers (const, noexcept) before the body
            tail = re.match(r"(?:\s*(?:const|noexcept|override)\b)*\s*", self.code[j:])
            j += tail.end() if tail else 0
            if j >= len(self.code) or self.code[j] != "{":
                continue
            body_end = self.close(j)
            head_start = self._template_start(self.line_start(m.start()))
            before = self.code[max(0, name_start - 400):name_start]
            head = re.split(r"[;{}]", before)[-1]
            out.append(Function(m.group("name"), head_start, name_start, paren, params_end, j,
                                body_end, "__global__" in head))
        return out

    def _template_start(self, line: int) -> int:
        """`line` (a function's first line), or the first of the `template <...>` lines right
        above it: a function template starts at its template head."""
        while line > 0:
            prev = line
            for _ in range(4):  # a head may span a few lines
                prev = self.line_start(prev - 1)
                if _TEMPLATE_HEAD.fullmatch(self.code[prev:line].strip()):
                    break
                if prev == 0:
                    return line
            else:
                return line
            line = prev
        return line

    def function_at(self, pos: int) -> Function | None:
        inside = [f for f in self.functions() if f.body_start <= pos < f.body_end]
        return min(inside, key=lambda f: f.body_end - f.body_start) if inside else None

    def args(self, open_at: int) -> list[tuple[int, int]]:
        """(start, end) of each top-level argument between the bracket at `open_at` and its
        match."""
        end = self.close(open_at) - 1
        out, depth, start = [], 0, open_at + 1
        for i in range(open_at + 1, end):
            ch = self.code[i]
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif ch == "," and depth == 0:
                out.append(_trim(self.text, start, i))
                start = i + 1
        if self.text[open_at + 1:end].strip():
            out.append(_trim(self.text, start, end))
        return out


@lru_cache(maxsize=64)
def _bracket_ends(code: str) -> dict[int, int]:
    """Each opening bracket's index in `code` -> the index just past its match (counting
    brackets of its own kind only); unmatched ones are left out."""
    ends: dict[int, int] = {}
    open_at: dict[str, list[int]] = {opener: [] for opener in _PAIRS}
    closes = {closer: opener for opener, closer in _PAIRS.items()}
    for m in _BRACKET.finditer(code):
        ch, i = m.group(), m.start()
        if ch in open_at:
            open_at[ch].append(i)
        elif open_at[closes[ch]]:
            ends[open_at[closes[ch]].pop()] = i + 1
    return ends


@lru_cache(maxsize=64)
def _function_table(text: str) -> tuple[Function, ...]:
    """`CSource.functions` of a text (a rule asks for them many times per kernel text)."""
    return tuple(CSource.of_text(text)._scan_functions())


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


@dataclass(frozen=True, slots=True)
class Function:
    """A function definition: positions of its name, parameter list and body braces."""

    name: str
    start: int        # start of the line holding the declaration's name
    name_start: int
    params_start: int  # the '('
    params_end: int    # just past the ')'
    body_start: int    # the '{'
    body_end: int      # just past the '}'
    is_kernel: bool


_TEMPLATE_HEAD = re.compile(r"template\s*<[^;{}]*>")
_FUNC = re.compile(r"(?<![\w.>])(?P<name>[A-Za-z_]\w*)\s*\(", re.M)
_KEYWORDS = frozenset({"if", "for", "while", "switch", "return", "sizeof", "catch", "decltype",
                       "static_assert", "alignof", "__launch_bounds__", "asm", "defined"})


def functions(src: CSource) -> list[Function]:
    return [f for f in src.functions() if f.name not in _KEYWORDS]


def find_iter(pattern: re.Pattern[str], src: CSource, start: int = 0, end: int | None = None
              ) -> Iterator[re.Match[str]]:
    """Matches of `pattern` on the code view (never inside comments or strings)."""
    return pattern.finditer(src.code, start, len(src.code) if end is None else end)


def tokens(text: str) -> list[str]:
    """Whitespace-insensitive tokens of C++ text (identifiers, numbers, punctuation)."""
    return re.findall(r"\w+|\S", text)


def asm_operands(src: CSource, open_at: int) -> list[str]:
    """The operand expressions of an inline asm statement, outputs first (PTX %N order)."""
    return [expr for _, expr in asm_constrained_operands(src, open_at)]


def asm_constrained_operands(src: CSource, open_at: int) -> list[tuple[str, str]]:
    """(constraint, expression) of each operand of the inline asm statement whose `(` is at
    `open_at`, outputs first (PTX %N order)."""
    end = src.close(open_at) - 1
    body = src.code[open_at + 1:end]
    sections, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == ":" and depth == 0 and body[i + 1:i + 2] != ":" and body[i - 1:i] != ":":
            sections.append((start, i))
            start = i + 1
        elif ch == ":" and depth == 0 and body[i + 1:i + 2] == ":":
            sections.append((start, i))
            start = i + 1
    sections.append((start, len(body)))
    operands = []
    for s, e in sections[1:3]:  # outputs, inputs
        chunk = src.text[open_at + 1 + s:open_at + 1 + e]
        for m in re.finditer(r'"([^"]*)"\s*\(', chunk):
            paren = open_at + 1 + s + m.end() - 1
            close = src.close(paren)
            operands.append((m.group(1), src.text[paren + 1:close - 1].strip()))
    return operands


def asm_template(src: CSource, open_at: int) -> str:
    """The instruction template of the inline asm statement whose `(` is at `open_at`: its
    string literals joined, with each identifier between them (a macro parameter pasted into
    the template) written `$$NAME$$`."""
    end = src.close(open_at) - 1
    out, i = [], open_at + 1
    while i < end:
        ch = src.text[i]
        if ch == '"':
            j = i + 1
            while j < end and src.text[j] != '"':
                j += 2 if src.text[j] == "\\" else 1
            out.append(src.text[i + 1:j].encode().decode("unicode_escape"))
            i = j + 1
        elif ch == ":":
            break
        elif ch.isalpha() or ch == "_":
            m = re.match(r"\w+", src.text[i:end])
            if src.code[i:i + 1].strip():  # not inside a comment
                out.append(f"$${m.group(0)}$$")
            i += m.end()
        else:
            i += 1
    return "".join(out)
