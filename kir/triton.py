"""Triton / Python back-end: Python's `ast` plus the source bytes -> `Columns`.

The node table is libcst's concrete syntax tree (the IR was first built with libcst, and
anchors, diffs and stored lineages depend on its node set): every libcst node except
whitespace, comments and operator tokens, with libcst's class name as `grammar_type` and
libcst's byte span (syntactic position: the node's own parentheses excluded). Python's C
parser gives the structure and most positions (UTF-8 byte columns); what `ast` leaves out
(keyword positions, parentheses, `else`/`finally` clauses, f-string parts, implicit string
concatenation) is read from the source bytes. An operator is kept as the `name` of its
expression so that a diff still sees `a + b` -> `a * b`. A function's span starts at its first
decorator, so deleting or moving the node moves its decorators with it.

Constructs libcst's tree shapes differently from `ast` are rebuilt here: `a and b and c` is
two nested `BooleanOperation`s, `"a" "b"` a `ConcatenatedString`, `elif` a nested `If`,
`del a, b` a `Tuple`, `True` a `Name`.
"""
from __future__ import annotations

import ast
import gc
import re
from collections.abc import Callable, Sequence
from typing import Any

from kir import kinds as K
from kir.columns import Columns
from kir.errors import ParseError
from kir.triton_names import _CONSTEXPR, KERNEL_DECORATORS, call_kind, widen_to_children

# libcst's operator class names, which the IR keeps as expression names
_BINOPS: dict[type, str] = {
    ast.Add: "Add", ast.Sub: "Subtract", ast.Mult: "Multiply", ast.Div: "Divide",
    ast.FloorDiv: "FloorDivide", ast.Mod: "Modulo", ast.Pow: "Power", ast.LShift: "LeftShift",
    ast.RShift: "RightShift", ast.BitOr: "BitOr", ast.BitAnd: "BitAnd", ast.BitXor: "BitXor",
    ast.MatMult: "MatrixMultiply",
}
_UNARY: dict[type, str] = {ast.UAdd: "Plus", ast.USub: "Minus", ast.Invert: "BitInvert",
                           ast.Not: "Not"}
_BOOL: dict[type, str] = {ast.And: "And", ast.Or: "Or"}
_CMP: dict[type, str] = {
    ast.Lt: "LessThan", ast.LtE: "LessThanEqual", ast.Gt: "GreaterThan",
    ast.GtE: "GreaterThanEqual", ast.Eq: "Equal", ast.NotEq: "NotEqual", ast.In: "In",
    ast.NotIn: "NotIn", ast.Is: "Is", ast.IsNot: "IsNot",
}

# one pass over the source: comments, string literals (skipped) and parentheses (matched)
_STRING = (rb"[A-Za-z]{0,3}(?:'''(?:[^'\\]|\\.|'(?!''))*'''|\"\"\"(?:[^\"\\]|\\.|\"(?!\"\"))*\"\"\""
           rb"|'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\")")
# (a string's prefix letters need no skipping: outside strings only parentheses count)
_SCAN = re.compile(rb"(#[^\r\n]*)|" + _STRING.removeprefix(rb"[A-Za-z]{0,3}") + rb"|([()])",
                   re.S)
_STRING_AT = re.compile(_STRING, re.S)
_NEWLINE = re.compile(rb"\r\n?|\n")
_IDENT_END = re.compile(rb"[\w\x80-\xff]*")
_WS = frozenset(b" \t\f\r\n\\")
_HSPACE = frozenset(b" \t\f\\")
_OPEN, _COMMA = ord("("), ord(",")

#: statements libcst puts in a SimpleStatementLine
_SIMPLE = frozenset({
    ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Raise, ast.Assert,
    ast.Delete, ast.Pass, ast.Break, ast.Continue, ast.Global, ast.Nonlocal, ast.Import,
    ast.ImportFrom,
})

#: compound statements whose last clause is their body
_BLOCK_ONLY = frozenset({ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.With,
                         ast.AsyncWith, ast.ExceptHandler})
_IF = {"flavor": "if"}
_WHILE = {"flavor": "while"}
_ASSIGN_OP = {"op": "="}


class _Builder:
    """Builds the node table of one module; one instance per parse."""

    def __init__(self, text: str, src: bytes) -> None:
        self.src = src
        self.ascii = len(src) == len(text)  # identifiers are then exactly as ast has them
        self.cols = Columns()
        self.add = self.cols.add
        ls = [3 if text.startswith("\ufeff") else 0]  # ast columns start after a BOM
        if b"\r" in src:  # Python also breaks lines at a lone carriage return
            ls += [m.end() for m in _NEWLINE.finditer(src)]
        else:
            find = src.find
            i = find(b"\n")
            while i >= 0:
                ls.append(i + 1)
                i = find(b"\n", i + 1)
        self.ls = ls  # byte offset of each line's start (ast lines are 1-based)
        self.match: dict[int, int] = {}  # parenthesis position -> its partner's position
        self.comment_end: dict[int, int] = {}  # end of a comment -> its start
        self._scan(0, len(src))
        self.expr_table: dict[type, Callable[[Any, int], None]] = {
            ast.Name: self._name, ast.Constant: self._constant, ast.JoinedStr: self._strings,
            ast.Attribute: self._attribute, ast.Call: self._call, ast.Subscript: self._subscript,
            ast.BinOp: self._binop, ast.UnaryOp: self._unary, ast.BoolOp: self._boolop,
            ast.Compare: self._compare, ast.IfExp: self._ifexp, ast.Lambda: self._lambda,
            ast.NamedExpr: self._named, ast.Starred: self._starred, ast.Tuple: self._tuple,
            ast.List: self._list_or_set, ast.Set: self._list_or_set, ast.Dict: self._dict,
            ast.ListComp: self._comp, ast.SetComp: self._comp, ast.GeneratorExp: self._comp,
            ast.DictComp: self._dictcomp, ast.Await: self._await, ast.Yield: self._yield,
            ast.YieldFrom: self._yield,
        }
        self.stmt_table: dict[type, Callable[[Any, int], None]] = {
            ast.FunctionDef: self._funcdef, ast.AsyncFunctionDef: self._funcdef,
            ast.ClassDef: self._classdef, ast.If: self._if, ast.For: self._for,
            ast.AsyncFor: self._for, ast.While: self._while, ast.With: self._with,
            ast.AsyncWith: self._with, ast.Try: self._try, ast.Match: self._match,
            ast.Expr: self._expr_stmt, ast.Assign: self._assign, ast.AugAssign: self._augassign,
            ast.AnnAssign: self._annassign, ast.Return: self._return, ast.Raise: self._raise,
            ast.Assert: self._assert, ast.Delete: self._delete, ast.Pass: self._keyword_stmt,
            ast.Break: self._keyword_stmt, ast.Continue: self._keyword_stmt,
            ast.Global: self._global, ast.Nonlocal: self._global, ast.Import: self._import,
            ast.ImportFrom: self._importfrom,
        }

    # -- source scanning -------------------------------------------------------------------
    def _scan(self, start: int, end: int) -> None:
        """Match the parentheses of `src[start:end]` outside strings; note comment spans."""
        stack: list[int] = []
        match, comment_end = self.match, self.comment_end
        for m in _SCAN.finditer(self.src, start, end):
            if m.lastindex == 2:
                p = m.start()
                if m.group(2) == b"(":
                    stack.append(p)
                elif stack:
                    o = stack.pop()
                    match[o] = p
                    match[p] = o
            elif m.lastindex == 1:
                comment_end[m.end()] = m.start()

    def next_sig(self, i: int) -> int:
        """First byte at or after `i` that is not whitespace, a line continuation or comment."""
        src = self.src
        n = len(src)
        while i < n:
            b = src[i]
            if b in _WS:
                i += 1
            elif b == 35:  # '#'
                j = src.find(b"\n", i)
                i = n if j < 0 else j
            else:
                return i
        return n

    def prev_sig(self, i: int) -> int:
        """Last byte before `i` that is not whitespace, a line continuation or comment (-1)."""
        src = self.src
        comment_end = self.comment_end
        i -= 1
        while i >= 0:
            if i + 1 in comment_end:  # before the whitespace test: `# x  ` ends in spaces
                i = comment_end[i + 1] - 1
            elif src[i] in _WS:
                i -= 1
            else:
                return i
        return -1

    def pos(self, line: int, col: int) -> int:
        return self.ls[line - 1] + col

    def span(self, n: Any) -> tuple[int, int]:
        ls = self.ls
        return ls[n.lineno - 1] + n.col_offset, ls[n.end_lineno - 1] + n.end_col_offset

    def full(self, n: Any, own: int = -1) -> tuple[int, int]:
        """Span of expression `n` with its own parentheses (not the parent's at `own`)."""
        s, e = self.syntactic(n)
        src, match = self.src, self.match
        while True:
            if s and src[s - 1] not in _WS and src[s - 1] != _OPEN:
                return s, e
            p = self.prev_sig(s)
            if p < 0 or src[p] != _OPEN or p == own:
                return s, e
            q = match.get(p)
            if q is None or self.next_sig(e) != q:
                return s, e
            s, e = p, q + 1

    def syntactic(self, n: Any) -> tuple[int, int]:
        """libcst's span of an expression: without the parentheses that wrap it."""
        s, e = self.span(n)
        t = type(n)
        if t is ast.GeneratorExp or (t is ast.Tuple and self.src[s] == _OPEN
                                     and self.match.get(s) == e - 1):
            return self.inside(s, e)
        return s, e

    def inside(self, s: int, e: int) -> tuple[int, int]:
        """The content of the bracket pair at `s`, `e - 1`, without surrounding whitespace."""
        a = self.next_sig(s + 1)
        return a, max(a, self.prev_sig(e - 1) + 1)

    def keyword_at(self, i: int, kw: bytes) -> int:
        """Position of keyword `kw`, the first token at or after `i` (semicolons skipped)."""
        src = self.src
        while True:
            i = self.next_sig(i)
            if src[i] == 59:  # ';'
                i += 1
                continue
            if not src.startswith(kw, i):
                raise _Unsupported(f"expected {kw.decode()} at byte {i}")
            return i

    def ident_end(self, i: int) -> int:
        m = _IDENT_END.match(self.src, i)
        return m.end() if m else i

    def text(self, s: int, e: int) -> str:
        return self.src[s:e].decode("utf-8")

    def ident(self, name: str, start: int) -> str:
        """An identifier as written (ast normalizes non-ASCII identifiers to NFKC, and an
        NFKC form can be ASCII: `𝔘𝔫𝔦` is `Uni`)."""
        if self.ascii:
            return name
        return self.text(start, self.ident_end(start))

    # -- expressions -----------------------------------------------------------------------
    def expr(self, n: Any, parent: int) -> None:
        fn = self.expr_table.get(type(n))
        if fn is None:
            raise _Unsupported(type(n).__name__)
        fn(n, parent)

    def dotted(self, n: Any) -> str | None:
        """`a.b.c` for a Name/Attribute chain, else None."""
        parts: list[str] = []
        while type(n) is ast.Attribute:
            parts.append(n.attr if self.ascii else self._attr_text(n))
            n = n.value
        if type(n) is ast.Name:
            parts.append(n.id if self.ascii else self.ident(n.id, self.span(n)[0]))
            return ".".join(reversed(parts))
        if type(n) is ast.Constant and (n.value is None or type(n.value) is bool):
            parts.append(repr(n.value))  # a Name to libcst
            return ".".join(reversed(parts))
        return None

    def _attr_text(self, n: ast.Attribute) -> str:
        return self.name_before(self.span(n)[1], n.attr)[1]

    def name_before(self, e: int, name: str) -> tuple[int, str]:
        """Start and text of identifier `name` (as ast has it) ending at byte `e`."""
        if self.ascii:
            return e - len(name), name
        s = e
        src = self.src
        while s and (src[s - 1] >= 0x80 or chr(src[s - 1]).isalnum() or src[s - 1] == 95):
            s -= 1
        return s, self.text(s, e)

    def target_name(self, n: Any) -> str | None:
        """What an assignment writes: `acc`, `self.x`, `a,b`, `buf` for `buf[i]`."""
        t = type(n)
        if t is ast.Tuple or t is ast.List:
            names = [self.target_name(e.value if type(e) is ast.Starred else e)
                     for e in n.elts]
            return ",".join(x or "?" for x in names)
        while type(n) is ast.Subscript:
            n = n.value
        return self.dotted(n)

    def _name(self, n: ast.Name, parent: int) -> None:
        s, e = self.span(n)
        name = n.id if self.ascii else self.text(s, e)
        self.add(K.NAME, "Name", name, s, e, parent)

    def _constant(self, n: ast.Constant, parent: int) -> None:
        v = n.value
        t = type(v)
        if t is str or t is bytes:
            self._strings(n, parent)
            return
        s, e = self.span(n)
        if t is int:
            self.add(K.LITERAL, "Integer", None, s, e, parent)
        elif t is float:
            self.add(K.LITERAL, "Float", None, s, e, parent)
        elif t is complex:
            self.add(K.LITERAL, "Imaginary", None, s, e, parent)
        elif v is Ellipsis:
            self.add(K.OTHER, "Ellipsis", None, s, e, parent)
        else:  # True, False, None are names to libcst
            self.add(K.NAME, "Name", repr(v), s, e, parent)

    def _attribute(self, n: ast.Attribute, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.OTHER, "Attribute", None, s, e, parent)
        self.expr(n.value, nid)
        if self.ascii:
            self.add(K.NAME, "Name", n.attr, e - len(n.attr), e, nid)
        else:
            name = self._attr_text(n)
            self.add(K.NAME, "Name", name, e - len(name.encode()), e, nid)

    def _call(self, n: ast.Call, parent: int) -> None:
        s, e = self.span(n)
        func = n.func
        kw = tuple(self.ident(k.arg, self.span(k)[0]) for k in n.keywords if k.arg is not None)
        if type(func) is ast.Subscript and (target := self.dotted(func.value)) is not None:
            nid = self.add(K.LAUNCH, "Call", target, s, e, parent,
                           {"callee": target, "keywords": kw})
        else:
            callee = self.dotted(func)
            if callee is None:
                nid = self.add(K.CALL, "Call", None, s, e, parent,
                               {"callee": None, "keywords": kw})
            else:
                nid = self.add(call_kind(callee), "Call", callee, s, e, parent,
                               {"callee": callee, "keywords": kw})
        self.expr(func, nid)
        self.args(n.args, n.keywords, self.match.get(e - 1, -1), nid)

    def args(self, args: Sequence[Any], keywords: Sequence[ast.keyword], own: int,
             parent: int) -> None:
        """`Arg` nodes of a call or class header, in source order."""
        items: list[tuple[int, int, Any]] = []
        for a in args:
            if type(a) is ast.Starred:
                items.append((self.span(a)[0], 0, a))
            else:
                items.append((self.full(a, own)[0], 1, a))
        for k in keywords:
            items.append((self.span(k)[0], 2, k))
        if len(items) > 1:
            items.sort(key=lambda it: it[0])
        add = self.add
        for start, what, a in items:
            if what == 1:
                nid = add(K.OTHER, "Arg", None, start, self.full(a, own)[1], parent)
                self.expr(a, nid)
            elif what == 0:
                nid = add(K.OTHER, "Arg", None, start, self.full(a.value)[1], parent)
                self.expr(a.value, nid)
            else:
                nid = add(K.OTHER, "Arg", None, start, self.full(a.value)[1], parent)
                if a.arg is not None:
                    name = self.ident(a.arg, start)
                    add(K.NAME, "Name", name, start, start + len(name.encode()), nid)
                self.expr(a.value, nid)

    def _subscript(self, n: ast.Subscript, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.OTHER, "Subscript", None, s, e, parent)
        self.expr(n.value, nid)
        sl = n.slice
        if type(sl) is ast.Tuple:
            ts, te = self.span(sl)
            elts = [sl] if self.src[ts] == _OPEN and self.match.get(ts) == te - 1 else sl.elts
        else:
            elts = [sl]
        add = self.add
        for el in elts:
            if type(el) is ast.Slice:
                a, b = self.span(el)
                if self.src[b - 1] == 58:  # a trailing `:` owns the whitespace after it
                    b = self.next_sig(b)
                se = add(K.OTHER, "SubscriptElement", None, a, b, nid)
                sn = add(K.OTHER, "Slice", None, a, b, se)
                for part in (el.lower, el.upper, el.step):
                    if part is not None:
                        self.expr(part, sn)
            else:
                if type(el) is ast.Starred:
                    raise _Unsupported("starred subscript")
                a, b = self.full(el)
                se = add(K.OTHER, "SubscriptElement", None, a, b, nid)
                self.expr(el, add(K.OTHER, "Index", None, a, b, se))

    def _binop(self, n: ast.BinOp, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.OTHER, "BinaryOperation", _BINOPS[type(n.op)], s, e, parent)
        self.expr(n.left, nid)
        self.expr(n.right, nid)

    def _unary(self, n: ast.UnaryOp, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.OTHER, "UnaryOperation", _UNARY[type(n.op)], s, e, parent)
        self.expr(n.operand, nid)

    def _boolop(self, n: ast.BoolOp, parent: int) -> None:
        # libcst nests `a and b and c` to the left: ((a and b) and c)
        s, e = self.span(n)
        self._boolop_part(n.values, len(n.values), _BOOL[type(n.op)], s, e, parent)

    def _boolop_part(self, values: list[Any], k: int, op: str, s: int, e: int,
                     parent: int) -> None:
        nid = self.add(K.OTHER, "BooleanOperation", op, s, e, parent)
        if k == 2:
            self.expr(values[0], nid)
        else:
            self._boolop_part(values, k - 1, op, s, self.full(values[k - 2])[1], nid)
        self.expr(values[k - 1], nid)

    def _compare(self, n: ast.Compare, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.OTHER, "Comparison", None, s, e, parent)
        self.expr(n.left, nid)
        prev = self.full(n.left)[1]
        for op, comp in zip(n.ops, n.comparators):
            end = self.full(comp)[1]
            # the target owns the whitespace before its operator
            tid = self.add(K.OTHER, "ComparisonTarget", _CMP[type(op)], prev, end, nid)
            self.expr(comp, tid)
            prev = end

    def _ifexp(self, n: ast.IfExp, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.OTHER, "IfExp", None, s, e, parent)
        self.expr(n.body, nid)
        self.expr(n.test, nid)
        self.expr(n.orelse, nid)

    def _lambda(self, n: ast.Lambda, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.OTHER, "Lambda", None, s, e, parent)
        self.parameters(n.args, s + 6, -1, nid)
        self.expr(n.body, nid)

    def _named(self, n: ast.NamedExpr, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.OTHER, "NamedExpr", None, s, e, parent)
        self.expr(n.target, nid)
        self.expr(n.value, nid)

    def _starred(self, n: ast.Starred, parent: int) -> None:
        s, e = self.span(n)
        self.expr(n.value, self.add(K.OTHER, "StarredElement", None, s, e, parent))

    def elements(self, elts: Sequence[Any], parent: int) -> None:
        add = self.add
        for el in elts:
            if type(el) is ast.Starred:
                self._starred(el, parent)
            else:
                a, b = self.full(el)
                self.expr(el, add(K.OTHER, "Element", None, a, b, parent))

    def _tuple(self, n: ast.Tuple, parent: int) -> None:
        s, e = self.syntactic(n)
        self.elements(n.elts, self.add(K.OTHER, "Tuple", None, s, e, parent))

    def _list_or_set(self, n: ast.List | ast.Set, parent: int) -> None:
        s, e = self.span(n)
        self.elements(n.elts, self.add(K.OTHER, type(n).__name__, None, s, e, parent))

    def _dict(self, n: ast.Dict, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.OTHER, "Dict", None, s, e, parent)
        add = self.add
        for k, v in zip(n.keys, n.values):
            vs, ve = self.full(v)
            if k is None:
                star = self.prev_sig(vs) - 1  # the first `*` of `**`
                self.expr(v, add(K.OTHER, "StarredDictElement", None, star, ve, nid))
            else:
                el = add(K.OTHER, "DictElement", None, self.full(k)[0], ve, nid)
                self.expr(k, el)
                self.expr(v, el)

    def _comp(self, n: Any, parent: int) -> None:
        s, e = self.syntactic(n)
        nid = self.add(K.OTHER, type(n).__name__, None, s, e, parent)
        self.expr(n.elt, nid)
        self.comp_for(n.generators, 0, self.full(n.elt)[1], nid)

    def _dictcomp(self, n: ast.DictComp, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.OTHER, "DictComp", None, s, e, parent)
        self.expr(n.key, nid)
        self.expr(n.value, nid)
        self.comp_for(n.generators, 0, self.full(n.value)[1], nid)

    def comp_for(self, gens: list[ast.comprehension], i: int, start: int, parent: int) -> int:
        """One `CompFor` (owning the whitespace before its `for`) and its nested clauses;
        returns its end."""
        g = gens[i]
        nid = self.add(K.OTHER, "CompFor", None, start, start, parent)
        if g.is_async:
            kw = self.keyword_at(start, b"async")
            self.add(K.OTHER, "Asynchronous", None, kw, kw + 5, nid)
        self.expr(g.target, nid)
        self.expr(g.iter, nid)
        end = self.full(g.iter)[1]
        for cond in g.ifs:
            ce = self.full(cond)[1]
            self.expr(cond, self.add(K.OTHER, "CompIf", None, end, ce, nid))
            end = ce
        if i + 1 < len(gens):
            end = self.comp_for(gens, i + 1, end, nid)
        self.cols.ends[nid] = end
        return end

    def _await(self, n: ast.Await, parent: int) -> None:
        s, e = self.span(n)
        self.expr(n.value, self.add(K.OTHER, "Await", None, s, e, parent))

    def _yield(self, n: ast.Yield | ast.YieldFrom, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.OTHER, "Yield", None, s, e, parent)
        if type(n) is ast.YieldFrom:
            kw = self.keyword_at(s + 5, b"from")
            self.expr(n.value, self.add(K.OTHER, "From", None, kw, self.full(n.value)[1], nid))
        elif n.value is not None:
            self.expr(n.value, nid)

    # -- strings ---------------------------------------------------------------------------
    def _strings(self, n: Any, parent: int) -> None:
        s, e = self.span(n)
        pieces: list[tuple[int, int]] = []
        i = s
        while i < e:
            m = _STRING_AT.match(self.src, i)
            if m is None:
                raise _Unsupported(f"string literal at byte {i}")
            pieces.append((m.start(), m.end()))
            i = self.next_sig(m.end())
        if pieces[-1][1] != e:  # e.g. a Python 3.12 f-string reusing its quotes inside
            raise _Unsupported(f"string literal at byte {s}")
        self._concat(pieces, 0, parent)

    def _concat(self, pieces: list[tuple[int, int]], i: int, parent: int) -> None:
        # libcst nests implicit concatenation to the right: "a" ("b" "c")
        if i == len(pieces) - 1:
            self._piece(*pieces[i], parent)
            return
        nid = self.add(K.LITERAL, "ConcatenatedString", None, pieces[i][0], pieces[-1][1],
                       parent)
        self._piece(*pieces[i], nid)
        self._concat(pieces, i + 1, nid)

    def _piece(self, s: int, e: int, parent: int) -> None:
        src = self.src
        q = s
        while src[q] not in b"'\"":
            q += 1
        prefix = src[s:q].lower()
        if b"f" not in prefix:
            self.add(K.LITERAL, "SimpleString", None, s, e, parent)
            return
        nid = self.add(K.LITERAL, "FormattedString", None, s, e, parent)
        quote = 3 if src.startswith(src[q:q + 1] * 3, q) and e - q >= 6 else 1
        self._fparts(q + quote, e - quote, b"r" in prefix, nid, False)

    def _fparts(self, i: int, end: int, raw: bool, parent: int, spec: bool) -> int:
        """Text and `{...}` parts of f-string content from `i`; in a format spec, stops at the
        closing `}` and returns its position."""
        src = self.src
        text_start = i
        while i < end:
            b = src[i]
            if b == 123:  # '{'
                if not spec and src[i + 1] == 123:
                    i += 2
                    continue
                if i > text_start:
                    self.add(K.OTHER, "FormattedStringText", None, text_start, i, parent)
                i = text_start = self._fexpr(i, end, raw, parent)
            elif b == 125:  # '}'
                if spec:
                    break
                i += 2
            elif b == 92 and not raw:  # backslash escape, `\N{NAME}` included
                if src[i + 1] == 78 and src[i + 2] == 123:  # \N{
                    i = src.index(b"}", i) + 1
                else:
                    i += 2
            else:
                i += 1
        if i > text_start:
            self.add(K.OTHER, "FormattedStringText", None, text_start, i, parent)
        return i

    def _fexpr(self, i: int, end: int, raw: bool, parent: int) -> int:
        """A `{expr!c:spec}` part starting at `i`; returns the position after its `}`."""
        src = self.src
        j = i + 1
        depth = 0
        while True:  # the expression ends at `=`, `!`, `:` or `}` outside brackets
            b = src[j]
            if b in b"([{":
                depth += 1
            elif b in b")]}":
                if depth == 0:
                    break
                depth -= 1
            elif b in b"'\"":
                m = _STRING_AT.match(src, j)
                if m is None:
                    raise _Unsupported(f"f-string at byte {i}")
                j = m.end()
                continue
            elif depth == 0:
                nb = src[j + 1]
                if b == 33 and nb != 61:  # '!' not '!='
                    break
                if b == 58:  # ':'
                    break
                if b == 61 and nb != 61 and src[j - 1] not in b"=!<>":  # debug '='
                    break
            j += 1
        nid = self.add(K.OTHER, "FormattedStringExpression", None, i, i, parent)
        self._sub_expr(i, j, nid)
        k = j
        if src[k] == 61:  # '='
            k = self.next_sig(k + 1)
        if src[k] == 33:  # '!r'
            k = self.next_sig(k + 2)
        if src[k] == 58:  # ':' format spec
            k = self._fparts(k + 1, end, raw, nid, True)
        # k is at the closing brace
        self.cols.ends[nid] = k + 1
        return k + 1

    def _sub_expr(self, brace: int, j: int, parent: int) -> None:
        """Parse the expression `src[brace+1:j]` of an f-string with positions in this file."""
        body = self.src[brace + 1:j]
        try:
            tree = ast.parse(b"(" + body + b")", mode="eval")
        except SyntaxError as exc:
            raise _Unsupported(f"f-string expression: {exc.msg}") from None
        self._scan(brace + 1, j)
        ls = self.ls
        sub = [brace]
        k = body.find(b"\n")
        while k >= 0:
            sub.append(brace + 1 + k + 1)
            k = body.find(b"\n", k + 1)
        self.ls = sub
        try:
            top = tree.body
            if type(top) is ast.Tuple and top.lineno == 1 and top.col_offset == 0:
                # `{a, b}`: the tuple's parentheses are the ones added above
                a, b = self.inside(brace, j + 1)
                self.elements(top.elts, self.add(K.OTHER, "Tuple", None, a, b, parent))
            else:
                self.expr(top, parent)
        finally:
            self.ls = ls

    # -- parameters ------------------------------------------------------------------------
    def parameters(self, a: ast.arguments, after: int, close: int, parent: int) -> None:
        """`Parameters` of a def (`close` = its `)`) or lambda (`close` = -1); `after` is
        the position after the opening `(` or `lambda`."""
        nid = self.add(K.OTHER, "Parameters", None, 0, 0, parent)
        cols = self.cols
        src = self.src
        positional = [*a.posonlyargs, *a.args]
        defaults: list[Any] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
        cursor = after  # end of the previous element
        first = -1

        def mark(start: int) -> None:
            nonlocal first
            if first < 0:
                first = start

        for i, arg in enumerate(positional):
            start, cursor = self.param(arg, defaults[i], "", nid)
            mark(start)
            if a.posonlyargs and i == len(a.posonlyargs) - 1:
                slash = self.next_sig(self.next_sig(cursor) + 1)
                mark(slash)
                nxt = self.next_sig(slash + 1)
                # the slash owns the whitespace up to the next parameter, or up to `)`
                end = self.next_sig(nxt + 1) if src[nxt] == _COMMA else nxt
                self.add(K.OTHER, "ParamSlash", None, slash, end, nid)
                cursor = slash + 1
        if a.vararg is not None:
            start, cursor = self.param(a.vararg, None, "*", nid)
            mark(start)
        elif a.kwonlyargs:
            star = self.next_sig(cursor)
            if src[star] == _COMMA:
                star = self.next_sig(star + 1)
            mark(star)
            comma = self.next_sig(star + 1)
            self.add(K.OTHER, "ParamStar", None, star, self.next_sig(comma + 1), nid)
            cursor = comma + 1
        for arg, default in zip(a.kwonlyargs, a.kw_defaults):
            start, cursor = self.param(arg, default, "", nid)
            mark(start)
        if a.kwarg is not None:
            start, cursor = self.param(a.kwarg, None, "**", nid)
            mark(start)
        # the last parameter owns the whitespace (and a trailing comma) before `)` or `:`;
        # empty parameters sit after the def's `(` whitespace, or right after `lambda`
        if close < 0 and first >= 0:
            close = self.next_sig(cursor)
            if src[close] == _COMMA:
                close = self.next_sig(close + 1)
        if first < 0:
            first = cursor = self.next_sig(after) if close >= 0 else after
        else:
            cursor = close
        cols.starts[nid] = first
        cols.ends[nid] = cursor

    def param(self, arg: ast.arg, default: Any, star: str, parent: int) -> tuple[int, int]:
        """One `Param`; returns its start and the end of its code (default included)."""
        s = self.pos(arg.lineno, arg.col_offset)
        name = self.ident(arg.arg, s)
        ne = s + len(name.encode())
        start = s
        if star:
            start = self.prev_sig(s) + 1 - len(star)
        ann = arg.annotation
        ann_name = self.dotted(ann) if ann is not None else None
        kind = K.CONSTEXPR_PARAM if ann_name in _CONSTEXPR else K.PARAM
        nid = self.add(kind, "Param", name, start, ne, parent, {"annotation": ann_name})
        self.add(K.NAME, "Name", name, s, ne, nid)
        end = ne
        if ann is not None:
            a, end = self.full(ann)
            self.expr(ann, self.add(K.OTHER, "Annotation", None, a, end, nid))
        if default is not None:
            end = self.full(default)[1]
            self.expr(default, nid)
        return start, end

    # -- statements ------------------------------------------------------------------------
    def stmt(self, n: Any, parent: int) -> None:
        fn = self.stmt_table.get(type(n))
        if fn is None:
            raise _Unsupported(type(n).__name__)
        fn(n, parent)

    def statements(self, body: list[Any], parent: int) -> None:
        """Statements of a module or block: compound ones, and simple ones grouped into
        `SimpleStatementLine`s (several when joined by `;`)."""
        i, n = 0, len(body)
        simple = _SIMPLE
        while i < n:
            st = body[i]
            if type(st) not in simple:
                self.stmt(st, parent)
                i += 1
                continue
            j = i
            while j + 1 < n and type(body[j + 1]) in simple and self.same_line(body[j]):
                j += 1
            s = self.span(st)[0]
            e = self.span(body[j])[1]
            line = self.add(K.OTHER, "SimpleStatementLine", None, s, e, parent)
            for k in range(i, j + 1):
                self.stmt(body[k], line)
            i = j + 1

    def same_line(self, st: Any) -> bool:
        """Whether a `;` joins the next statement to `st` on its line."""
        src = self.src
        i = self.span(st)[1]
        n = len(src)
        while i < n and src[i] in _HSPACE:
            i += 1
        if i >= n or src[i] != 59:
            return False
        i += 1
        while i < n and src[i] in _HSPACE:
            i += 1
        return i < n and src[i] not in b"\r\n#"

    def end_of(self, st: Any) -> int:
        """Where a statement ends for libcst: a compound statement at the end of its last
        simple statement (ast's own end of an `except` clause can run one byte long)."""
        while True:
            t = type(st)
            if t is ast.If or t is ast.For or t is ast.AsyncFor or t is ast.While:
                st = (st.orelse or st.body)[-1]
            elif t is ast.Try:
                last = st.finalbody or st.orelse or (st.handlers[-1].body if st.handlers
                                                     else st.body)
                st = last[-1]
            elif t is ast.Match:
                st = st.cases[-1].body[-1]
            elif t in _BLOCK_ONLY:
                st = st.body[-1]
            else:
                return self.span(st)[1]

    def block(self, body: list[Any], parent: int) -> int:
        """An `IndentedBlock`, or a `SimpleStatementSuite` after `:` on the header line;
        returns its end."""
        s = self.span(body[0])[0]
        e = self.end_of(body[-1])
        src = self.src
        i = s - 1
        while i >= 0 and src[i] in _HSPACE:
            i -= 1
        if src[i] == 58:  # ':' on the same line
            nid = self.add(K.OTHER, "SimpleStatementSuite", None, s, e, parent)
            for st in body:
                self.stmt(st, nid)
        else:
            self.statements(body, self.add(K.OTHER, "IndentedBlock", None, s, e, parent))
        return e

    def orelse(self, body: list[Any], after: int, parent: int) -> None:
        """An `Else` clause whose `else` keyword follows byte `after`."""
        kw = self.keyword_at(after, b"else")
        nid = self.add(K.OTHER, "Else", None, kw, self.end_of(body[-1]), parent)
        self.block(body, nid)

    def decorators(self, decos: list[Any], parent: int) -> None:
        for d in decos:
            s, e = self.full(d)
            at = self.prev_sig(s)
            target = d.func if type(d) is ast.Call else d
            nid = self.add(K.DECORATOR, "Decorator", self.dotted(target), at, e, parent)
            self.expr(d, nid)

    def asynchronous(self, s: int, parent: int) -> int:
        """The `async` keyword at `s` as a node; returns the position after it."""
        self.add(K.OTHER, "Asynchronous", None, s, s + 5, parent)
        return s + 5

    def _funcdef(self, n: ast.FunctionDef | ast.AsyncFunctionDef, parent: int) -> None:
        s, e = self.span(n)[0], self.end_of(n)
        decos = tuple(self.dotted(d.func if type(d) is ast.Call else d) or "?"
                      for d in n.decorator_list)
        kind = K.KERNEL if any(d in KERNEL_DECORATORS for d in decos) else K.FUNCTION
        start = self.prev_sig(self.full(n.decorator_list[0])[0]) if n.decorator_list else s
        if getattr(n, "type_params", None):
            raise _Unsupported("type parameters")
        kw = s
        if type(n) is ast.AsyncFunctionDef:
            kw = self.keyword_at(s + 5, b"def")
        name_at = self.next_sig(kw + 3)
        name = self.ident(n.name, name_at)
        ne = name_at + len(name.encode())
        nid = self.add(kind, "FunctionDef", name, start, e, parent, {"decorators": decos})
        self.decorators(n.decorator_list, nid)
        if type(n) is ast.AsyncFunctionDef:
            self.asynchronous(s, nid)
        self.add(K.NAME, "Name", name, name_at, ne, nid)
        lp = self.next_sig(ne)
        if self.src[lp] != _OPEN:
            raise _Unsupported("function header")
        self.parameters(n.args, lp + 1, self.match[lp], nid)
        if n.returns is not None:
            a, b = self.full(n.returns)
            self.expr(n.returns, self.add(K.OTHER, "Annotation", None, a, b, nid))
        self.block(n.body, nid)

    def _classdef(self, n: ast.ClassDef, parent: int) -> None:
        s, e = self.span(n)[0], self.end_of(n)
        if getattr(n, "type_params", None):
            raise _Unsupported("type parameters")
        start = self.prev_sig(self.full(n.decorator_list[0])[0]) if n.decorator_list else s
        name_at = self.next_sig(s + 5)
        name = self.ident(n.name, name_at)
        nid = self.add(K.CLASS, "ClassDef", name, start, e, parent)
        self.decorators(n.decorator_list, nid)
        ne = name_at + len(name.encode())
        self.add(K.NAME, "Name", name, name_at, ne, nid)
        lp = self.next_sig(ne)
        own = lp if self.src[lp] == _OPEN else -1
        self.args(n.bases, n.keywords, own, nid)
        self.block(n.body, nid)

    def _if(self, n: ast.If, parent: int) -> None:
        s, e = self.span(n)[0], self.end_of(n)
        nid = self.add(K.BRANCH, "If", None, s, e, parent, _IF)
        self.expr(n.test, nid)
        end = self.block(n.body, nid)
        if n.orelse:
            first = n.orelse[0]
            if (len(n.orelse) == 1 and type(first) is ast.If
                    and self.src.startswith(b"elif", self.span(first)[0])):
                self._if(first, nid)
            else:
                self.orelse(n.orelse, end, nid)

    def _for(self, n: ast.For | ast.AsyncFor, parent: int) -> None:
        s, e = self.span(n)[0], self.end_of(n)
        it = n.iter
        attrs = {"flavor": "for",
                 "iterator": self.dotted(it.func) if type(it) is ast.Call else None,
                 "target": self.target_name(n.target)}
        nid = self.add(K.LOOP, "For", None, s, e, parent, attrs)
        if type(n) is ast.AsyncFor:
            self.asynchronous(s, nid)
        self.expr(n.target, nid)
        self.expr(it, nid)
        end = self.block(n.body, nid)
        if n.orelse:
            self.orelse(n.orelse, end, nid)

    def _while(self, n: ast.While, parent: int) -> None:
        s, e = self.span(n)[0], self.end_of(n)
        nid = self.add(K.LOOP, "While", None, s, e, parent, _WHILE)
        self.expr(n.test, nid)
        end = self.block(n.body, nid)
        if n.orelse:
            self.orelse(n.orelse, end, nid)

    def _with(self, n: ast.With | ast.AsyncWith, parent: int) -> None:
        s, e = self.span(n)[0], self.end_of(n)
        nid = self.add(K.OTHER, "With", None, s, e, parent)
        kw = s
        if type(n) is ast.AsyncWith:
            kw = self.keyword_at(self.asynchronous(s, nid), b"with")
        lp = self.next_sig(kw + 4)
        own = -1
        if self.src[lp] == _OPEN:
            rp = self.match.get(lp, -1)
            if rp >= 0 and self.src[self.next_sig(rp + 1)] == 58:  # `with (...):`
                own = lp
        add = self.add
        for item in n.items:
            a, b = self.full(item.context_expr, own)
            v = item.optional_vars
            if v is None:
                self.expr(item.context_expr, add(K.OTHER, "WithItem", None, a, b, nid))
            else:
                ve = self.full(v, own)[1]
                wid = add(K.OTHER, "WithItem", None, a, ve, nid)
                self.expr(item.context_expr, wid)
                self.expr(v, add(K.OTHER, "AsName", None, b, ve, wid))
        self.block(n.body, nid)

    def _try(self, n: ast.Try, parent: int) -> None:
        s, e = self.span(n)[0], self.end_of(n)
        nid = self.add(K.OTHER, "Try", None, s, e, parent)
        end = self.block(n.body, nid)
        add = self.add
        for h in n.handlers:
            hid = add(K.OTHER, "ExceptHandler", None, self.span(h)[0], self.end_of(h), nid)
            if h.type is not None:
                self.expr(h.type, hid)
                if h.name is not None:
                    te = self.full(h.type)[1]
                    at = self.next_sig(self.keyword_at(te, b"as") + 2)
                    name = self.ident(h.name, at)
                    ne = at + len(name.encode())
                    add(K.NAME, "Name", name, at, ne, add(K.OTHER, "AsName", None, te, ne, hid))
            end = self.block(h.body, hid)
        if n.orelse:
            self.orelse(n.orelse, end, nid)
            end = self.end_of(n.orelse[-1])
        if n.finalbody:
            kw = self.keyword_at(end, b"finally")
            fid = add(K.OTHER, "Finally", None, kw, self.end_of(n.finalbody[-1]), nid)
            self.block(n.finalbody, fid)

    # -- match statements ------------------------------------------------------------------
    def _match(self, n: ast.Match, parent: int) -> None:
        s, e = self.span(n)[0], self.end_of(n)
        nid = self.add(K.OTHER, "Match", None, s, e, parent)
        self.expr(n.subject, nid)
        end = self.next_sig(self.full(n.subject)[1]) + 1  # after the `:`
        for case in n.cases:
            kw = self.keyword_at(end, b"case")
            cid = self.add(K.OTHER, "MatchCase", None, kw, self.end_of(case.body[-1]), nid)
            self.pattern(case.pattern, cid)
            if case.guard is not None:
                self.expr(case.guard, cid)
            end = self.block(case.body, cid)

    def pattern(self, p: Any, parent: int) -> None:
        s, e = self.span(p)
        t = type(p)
        add = self.add
        if t is ast.MatchValue or t is ast.MatchSingleton:
            a, b = self.full(p)
            nid = add(K.OTHER, t.__name__, None, a, b, parent)
            if t is ast.MatchValue:
                self.expr(p.value, nid)
            else:
                add(K.NAME, "Name", repr(p.value), s, e, nid)
        elif t is ast.MatchAs:
            nid = add(K.OTHER, "MatchAs", None, s, e, parent)
            if p.pattern is not None:
                self.pattern(p.pattern, nid)
            if p.name is not None:
                at, name = self.name_before(e, p.name)
                add(K.NAME, "Name", name, at, e, nid)
        elif t is ast.MatchOr:
            nid = add(K.OTHER, "MatchOr", None, s, e, parent)
            pats = p.patterns
            for i, sub in enumerate(pats):
                a, b = self.full(sub)
                if i + 1 < len(pats):  # the element owns the `|` after it
                    b = self.full(pats[i + 1])[0]
                self.pattern(sub, add(K.OTHER, "MatchOrElement", None, a, b, nid))
        elif t is ast.MatchSequence:
            if self.src[s] == _OPEN and self.match.get(s) == e - 1:
                s, e = self.inside(s, e)
                nid = add(K.OTHER, "MatchTuple", None, s, e, parent)
            else:  # `[a, b]`, and `a, b` without brackets
                nid = add(K.OTHER, "MatchList", None, s, e, parent)
            self.sequence_elements(p.patterns, nid)
        elif t is ast.MatchClass:
            nid = add(K.OTHER, "MatchClass", None, s, e, parent)
            self.expr(p.cls, nid)
            kws = p.kwd_patterns
            keys: list[tuple[int, int, str]] = []
            for key, sub in zip(p.kwd_attrs, kws):
                ke = self.prev_sig(self.prev_sig(self.full(sub)[0])) + 1  # before `=`
                ks, name = self.name_before(ke, key)
                keys.append((ks, ke, name))
            own = self.next_sig(self.full(p.cls)[1])  # the class pattern's `(`
            self.sequence_elements(p.patterns, nid, keys[0][0] if keys else -1, own)
            for i, ((ks, ke, name), sub) in enumerate(zip(keys, kws)):
                nxt = keys[i + 1][0] if i + 1 < len(keys) else -1
                el = add(K.OTHER, "MatchKeywordElement", None, ks,
                         self.comma_end(self.full(sub, own)[1], nxt), nid)
                add(K.NAME, "Name", name, ks, ke, el)
                self.pattern(sub, el)
        elif t is ast.MatchMapping:
            nid = add(K.OTHER, "MatchMapping", None, s, e, parent)
            rest_at = -1
            if p.rest is not None:
                rest_at = self.name_before(self.prev_sig(e - 1) + 1, p.rest)[0]
            for i, (key, sub) in enumerate(zip(p.keys, p.patterns)):
                b = self.full(sub)[1]
                nxt = self.full(p.keys[i + 1])[0] if i + 1 < len(p.keys) else (
                    self.prev_sig(rest_at) - 1 if rest_at >= 0 else -1)
                el = add(K.OTHER, "MatchMappingElement", None, self.full(key)[0],
                         self.comma_end(b, nxt), nid)
                self.expr(key, el)
                self.pattern(sub, el)
            if p.rest is not None:
                name = self.ident(p.rest, rest_at)
                add(K.NAME, "Name", name, rest_at, rest_at + len(name.encode()), nid)
        else:
            raise _Unsupported(t.__name__)

    def sequence_elements(self, pats: list[Any], parent: int, then: int = -1,
                          own: int = -1) -> None:
        """`MatchSequenceElement`s (and `MatchStar`s), each owning the comma after it;
        `then` is where the node after the last one starts (-1: none), `own` the parent's
        `(`."""
        for i, sub in enumerate(pats):
            nxt = self.full(pats[i + 1], own)[0] if i + 1 < len(pats) else then
            if type(sub) is ast.MatchStar:
                s, e = self.span(sub)
                nid = self.add(K.OTHER, "MatchStar", None, s, self.comma_end(e, nxt), parent)
                if sub.name is not None:
                    at, name = self.name_before(e, sub.name)
                    self.add(K.NAME, "Name", name, at, e, nid)
                continue
            a, b = self.full(sub, own)
            el = self.add(K.OTHER, "MatchSequenceElement", None, a, self.comma_end(b, nxt),
                          parent)
            self.pattern(sub, el)

    def comma_end(self, end: int, nxt: int) -> int:
        """End of an element that owns the comma after it (and the whitespace up to the next
        element `nxt`, -1 for none)."""
        c = self.next_sig(end)
        if c < len(self.src) and self.src[c] == _COMMA:
            return nxt if nxt >= 0 else c + 1
        return end

    def _expr_stmt(self, n: ast.Expr, parent: int) -> None:
        s, e = self.span(n)
        self.expr(n.value, self.add(K.OTHER, "Expr", None, s, e, parent))

    def _assign(self, n: ast.Assign, parent: int) -> None:
        s, e = self.span(n)
        names = [self.target_name(t) for t in n.targets]
        nid = self.add(K.ASSIGN, "Assign", ",".join(x or "?" for x in names), s, e, parent,
                       _ASSIGN_OP)
        add = self.add
        for t in n.targets:
            a, b = self.full(t)
            self.expr(t, add(K.OTHER, "AssignTarget", None, a, b, nid))
        self.expr(n.value, nid)

    def _augassign(self, n: ast.AugAssign, parent: int) -> None:
        s, e = self.span(n)
        op = _BINOPS[type(n.op)] + "Assign"
        nid = self.add(K.ASSIGN, "AugAssign", self.target_name(n.target), s, e, parent,
                       {"op": op})
        self.expr(n.target, nid)
        self.expr(n.value, nid)

    def _annassign(self, n: ast.AnnAssign, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.ASSIGN, "AnnAssign", self.target_name(n.target), s, e, parent,
                       _ASSIGN_OP)
        self.expr(n.target, nid)
        a, b = self.full(n.annotation)
        self.expr(n.annotation, self.add(K.OTHER, "Annotation", None, a, b, nid))
        if n.value is not None:
            self.expr(n.value, nid)

    def _return(self, n: ast.Return, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.RETURN, "Return", None, s, e, parent)
        if n.value is not None:
            self.expr(n.value, nid)

    def _raise(self, n: ast.Raise, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.OTHER, "Raise", None, s, e, parent)
        if n.exc is not None:
            self.expr(n.exc, nid)
        if n.cause is not None:
            kw = self.keyword_at(self.full(n.exc)[1], b"from")
            cause = self.add(K.OTHER, "From", None, kw, self.full(n.cause)[1], nid)
            self.expr(n.cause, cause)

    def _assert(self, n: ast.Assert, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.OTHER, "Assert", None, s, e, parent)
        self.expr(n.test, nid)
        if n.msg is not None:
            self.expr(n.msg, nid)

    def _delete(self, n: ast.Delete, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.OTHER, "Del", None, s, e, parent)
        if len(n.targets) == 1:
            self.expr(n.targets[0], nid)
            return
        # `del a, b` is one Tuple target to libcst
        tid = self.add(K.OTHER, "Tuple", None, self.full(n.targets[0])[0], e, nid)
        self.elements(n.targets, tid)

    def _keyword_stmt(self, n: Any, parent: int) -> None:
        s, e = self.span(n)
        self.add(K.OTHER, type(n).__name__, None, s, e, parent)

    def _global(self, n: ast.Global | ast.Nonlocal, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.OTHER, type(n).__name__, None, s, e, parent)
        i = s + (6 if type(n) is ast.Global else 8)
        add = self.add
        for name in n.names:
            at = self.next_sig(i)
            if self.src[at] == _COMMA:
                at = self.next_sig(at + 1)
            text = self.ident(name, at)
            i = at + len(text.encode())
            add(K.NAME, "Name", text, at, i, add(K.OTHER, "NameItem", None, at, i, nid))

    def dotted_name(self, at: int, name: str, parent: int) -> int:
        """An import's dotted name at `at` as Name / Attribute nodes; returns its end."""
        parts = name.split(".")
        if len(parts) == 1:
            text = self.ident(name, at)
            end = at + len(text.encode())
            self.add(K.NAME, "Name", text, at, end, parent)
            return end
        # positions of the parts (whitespace may surround the dots)
        spans: list[tuple[int, int, str]] = []
        i = at
        for k, part in enumerate(parts):
            if k:
                i = self.next_sig(self.next_sig(i) + 1)
            text = self.ident(part, i)
            spans.append((i, i + len(text.encode()), text))
            i = spans[-1][1]
        self._attr_chain(spans, len(spans), parent)
        return i

    def _attr_chain(self, spans: list[tuple[int, int, str]], k: int, parent: int) -> None:
        if k == 1:
            s, e, text = spans[0]
            self.add(K.NAME, "Name", text, s, e, parent)
            return
        nid = self.add(K.OTHER, "Attribute", None, spans[0][0], spans[k - 1][1], parent)
        self._attr_chain(spans, k - 1, nid)
        s, e, text = spans[k - 1]
        self.add(K.NAME, "Name", text, s, e, nid)

    def aliases(self, names: list[ast.alias], parent: int) -> None:
        add = self.add
        for al in names:
            s, e = self.span(al)
            if al.name == "*":
                continue  # ImportStar is an operator token to the IR
            aid = add(K.OTHER, "ImportAlias", None, s, e, parent)
            ne = self.dotted_name(s, al.name, aid)
            if al.asname is not None:
                at, text = self.name_before(e, al.asname)
                add(K.NAME, "Name", text, at, e,
                    add(K.OTHER, "AsName", None, ne, e, aid))

    def _import(self, n: ast.Import, parent: int) -> None:
        s, e = self.span(n)
        self.aliases(n.names, self.add(K.IMPORT, "Import", None, s, e, parent))

    def _importfrom(self, n: ast.ImportFrom, parent: int) -> None:
        s, e = self.span(n)
        nid = self.add(K.IMPORT, "ImportFrom", None, s, e, parent)
        if n.module is not None:
            at = self.next_sig(s + 4)
            while self.src[at] == 46:  # relative dots
                at = self.next_sig(at + 1)
            self.dotted_name(at, n.module, nid)
        self.aliases(n.names, nid)


class _Unsupported(Exception):
    """A construct this builder does not rebuild: `build` hands the text to libcst."""


def build(text: str, source: bytes) -> Columns:
    """Parse Python/Triton text into libcst's node table; raises `ParseError` on a syntax
    error. Text Python's parser refuses, and constructs this builder does not rebuild, go
    through `kir.triton_cst` (same table, same errors)."""
    # the ast and the table are many small acyclic objects: the cyclic GC would rescan them
    # again and again while they grow (measured: about a sixth of the parse time)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _build(text, source)
    finally:
        if gc_was_enabled:
            gc.enable()


def _build(text: str, source: bytes) -> Columns:
    body = text[1:] if text.startswith("\ufeff") else text
    try:
        tree = ast.parse(body)
        return build_from_ast(tree, text, source)
    except (SyntaxError, _Unsupported) as exc:
        # libcst decides what parses (it also reads syntax newer than this Python's, e.g.
        # PEP 695 on 3.11); where neither parses, Python's own error says where and why
        from kir import triton_cst

        try:
            return triton_cst.build(text, source)
        except ParseError:
            if isinstance(exc, SyntaxError) and exc.lineno:
                raise ParseError(f"Python syntax error: {exc.msg}", line=exc.lineno) from None
            raise
    except (RecursionError, MemoryError):
        raise ParseError("Python source nests too deeply to parse") from None


def build_from_ast(tree: ast.Module, text: str, source: bytes) -> Columns:
    """The node table of a parsed module; raises `_Unsupported` for constructs left to
    libcst."""
    b = _Builder(text, source)
    root = b.add(K.MODULE, "Module", None, 0, len(source), -1)
    b.statements(tree.body, root)
    widen_to_children(b.cols)
    return b.cols
