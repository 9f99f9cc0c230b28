"""kir.triton (Python `ast` -> IR) builds exactly the node table of kir.triton_cst (libcst).

Every column is compared: kinds, grammar types, names, byte spans, parents and attrs; equal
tables give equal anchors, structure hashes and diffs. The sources are the repo's kernels and
experts, the Triton / inductor modules installed in the venv, snippets of every construct
whose libcst shape or span differs from `ast`'s, and generated expressions.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import anchors
import kir
from kir import triton, triton_cst
from kir.ir import Columns
from test_kir_support import ROOT, SITE, TRITON_CORPUS, real_triton_files


def table(text: str) -> list[Any]:
    """The libcst-built table, as plain values."""
    return _plain(triton_cst.build(text, text.encode()))


def ast_table(text: str) -> list[Any]:
    """The ast-built table, without the libcst fallback (a construct it left to libcst
    raises)."""
    import ast

    body = text[1:] if text.startswith("\ufeff") else text
    return _plain(triton.build_from_ast(ast.parse(body), text, text.encode()))


def _plain(cols: Columns) -> list[Any]:
    return [cols.kinds, cols.gtypes, cols.names, cols.starts, cols.ends, cols.parents,
            {k: dict(v) for k, v in cols.attrs.items()}]


def first_difference(text: str) -> str | None:
    """None when both builders agree, else the first node that differs (readable)."""
    want, got = table(text), ast_table(text)
    if want == got:
        return None
    src = text.encode()
    for i in range(min(len(want[0]), len(got[0]))):
        a = [c[i] for c in want[:6]] + [want[6].get(i)]
        b = [c[i] for c in got[:6]] + [got[6].get(i)]
        if a != b:
            return f"node {i}: libcst {a} {src[a[3]:a[4]]!r} / ast {b} {src[b[3]:b[4]]!r}"
    return f"{len(want[0])} nodes from libcst, {len(got[0])} from ast"


def _python_files() -> list[Path]:
    """The repo's kernels and experts, and installed modules under 40 KB (libcst takes
    seconds on the larger ones; those were compared when the builder was written)."""
    repo = [p for d in ("experts", "tests/data") for p in sorted((ROOT / d).rglob("*.py"))]
    installed = [p for p in real_triton_files(limit=80) if p.stat().st_size < 40_000]
    return sorted(set(TRITON_CORPUS) | set(repo)) + installed


@pytest.mark.slow
@pytest.mark.parametrize("path", _python_files(), ids=lambda p: str(p.relative_to(
    ROOT if p.is_relative_to(ROOT) and not p.is_relative_to(SITE) else SITE)))
def test_real_modules_give_the_libcst_table(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert first_difference(text) is None


SNIPPETS = {
    "decorated kernel, params, annotations": '''\
import triton  # c
@triton.jit
@foo(1)
def k(x, y: tl.constexpr = 3, *args, z=2, **kw) -> int:
    """doc"""
    a = b = (x + 1) * -y  # comment
    a += 1; b: int = 2
    return
''',
    "parameters: slash, bare star, trailing commas, comments, defaults in parens": '''\
def h(
    a,
    b=(1),
    *,

    c,
    ):
    pass
def h2(a, /, b, *, c): pass
def h3(a, # c
  *, b  # d
  ): pass
def h4(a ): pass
def h5(): pass
def h6(self, x=1, /
    ) -> None: pass
f = lambda: 0
g = lambda q, *, r=1: q
''',
    "branches, loops, else clauses, try, with": '''\
if a < b <= c and not d or e:
    pass
elif e:
    pass; x = 1;
else:
    if f: pass
for i, *rest in tl.range(0, 10):  # c
    x[i] = [1, 2,]
else:
    pass
while True: break
with open(f) as g, h:
    pass
with (a):
    pass
with (open(x) as f, g):
    pass
try:
    pass
except (A, B) as e:
    raise X from e
except E:
    pass
else:
    pass
finally:
    del a, (b), c[1]
''',
    "calls, subscripts, slices, generators, comprehensions": '''\
f(x for x in y if x if z for w in v)
f((x for x in y))
g((a), *b, k=(1), **kw)
x[(1, 2)] = x[1:2, ::] + x[ a : b ] + x[1,] + x[size:
    ] + x[(i)]
t = {k: v for k, v in d if k}
s = {*a, b}
d = {1: 2, **z, (3): (4)}
l = [y async for y in z]
print((yield))
v = ( a, b ) + (a,) + () + (1, 2,
    )
''',
    "strings: concatenation, f-strings, bytes, escapes": '''\
s = "a" "b" 'c'
t = f"a{x!r:>{w}}b" "c"; b = rb'\\d' b"e"
u = f"{a, b} {x=} {y = !s} {{lit}} {d['k']:{'>'}10} \\N{BULLET} {'{'}"
v = f"""
{x +
 y}
"""
w = (f'{a}'
     'b')
''',
    "imports, globals, async, walrus, starred, matrix ops": '''\
import a.b.c as d, e
from . import x
from .. a import *
from m import (p as q,
    r,)
global q, r
async def z():
    async for i in y:
        await q
    async with a: pass
    nonlocal_ = (n := 3) @ m
    a, *b = c
    yield from g
    return *a, b
class C(B, metaclass=M):
    x: int
    y: "T" = None
@dataclass
class D: pass
''',
    "match statements": '''\
match command.split():
    case [action]:
        pass
    case [action, obj, *rest]:
        pass
    case Point(x=0, y=0) | Point(1, y=2):
        pass
    case (1 | 2) as z if z > 0:
        pass
    case {"a": 1, "b": [x, *_], **kw}:
        pass
    case None | True:
        pass
    case a, b, *_:
        pass
    case (a, b):
        pass
    case -1 | 1.5 | "s" | x.y:
        pass
    case _:
        pass
''',
    "comments ending in spaces inside brackets": (
        "y = [(  # c  \n    a), f((  # d \t\n  b  # e  \n  ))]\n"),
    "non-ASCII text and CRLF": 'x = "é"  # ü\r\ny = f"{x}ß" + z\r\n',
    "identifiers NFKC maps to ASCII": "𝔘𝔫𝔦 = ﬃ.ｘ(ｋ=1)\ndef ｆ(ａ, *ｂ): global ｇ\nimport ｍ.ｎ as ｏ\n",
    "lone carriage returns": "x = 1\ry = (2,\r 3)\rz = '''a\rb'''\r",
    "empty and comment-only modules": "# c\n\n",
    "byte-order mark": '\ufeffimport triton\n@triton.jit\ndef k(x):\n    return x\n',
}


@pytest.mark.parametrize("name", SNIPPETS)
def test_every_construct_gives_the_libcst_table(name: str) -> None:
    assert first_difference(SNIPPETS[name]) is None


@pytest.mark.parametrize("src", [
    "try:\n    pass\nexcept* ValueError:\n    pass\n",
    "x = a[*b]\n",
    "def f[T](x: T) -> T:\n    return x\n",  # PEP 695: a syntax error to Python 3.11
])
def test_constructs_left_to_libcst_still_parse_to_its_table(src: str) -> None:
    with pytest.raises((triton._Unsupported, SyntaxError)):
        ast_table(src)
    ir = kir.parse(src, "triton")
    assert _plain(ir._cols) == table(src)
    assert ir.unparse() == src


def test_spans_are_exact_where_libcst_miscounts() -> None:
    # libcst shifts spans after a form feed in the indentation and after `except (...) :`
    # (its code generation drops the space); the ast-built spans stay on the source bytes
    src = "\x0cx = 1\ntry:\n    pass\nexcept (A, B) :\n    pass\n"
    ir = kir.parse(src, "triton")
    assert ir.node_text(ir.find("assign")[0]) == "x = 1"
    assert [ir.node_text(n) for n in ir.nodes if n.grammar_type == "Pass"] == ["pass"] * 2
    assert ir.unparse() == src


def test_anchor_ids_follow_from_the_table_on_a_real_kernel() -> None:
    path = ROOT / "tests/data/kernels/flash_attention_fwd.py"
    text = path.read_text()
    new = anchors.build_index(kir.parse(text, "triton"))
    old = anchors.build_index(kir.KernelIR(kir.Language.TRITON, text, text.encode(), None,
                                           triton_cst.build(text, text.encode())))
    assert [(a.id, a.kind, a.span, a.structure_hash) for a in new] == [
        (a.id, a.kind, a.span, a.structure_hash) for a in old]
    assert "triton:attn_fwd/for[0]/call:tl.dot[0]" in new


# -- generated expressions: random nesting, parentheses, whitespace and comments -------------
_SPACE = st.sampled_from(["", " ", "  "])
_BREAK = st.sampled_from(["", " ", "\n    ", "  # note\n  ", " \\\n  "])


def _wrap(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Composite expressions over `inner`; `_BREAK` only inside brackets, where Python
    allows line breaks and comments."""
    binop = st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "@", "<<", "&", "|", "^"])
    cmpop = st.sampled_from(["<", "<=", "==", "!=", "in", "not in", "is", "is not"])
    return st.one_of(
        st.tuples(inner, _SPACE, binop, _SPACE, inner).map("".join),
        st.tuples(inner, st.just(" "), cmpop, st.just(" "), inner).map("".join),
        st.tuples(inner, st.sampled_from([" and ", " or "]), inner,
                  st.sampled_from([" and ", " or "]), inner).map("".join),
        st.tuples(st.sampled_from(["-", "~", "not "]), inner).map("".join),
        st.tuples(st.just("("), _BREAK, inner, _BREAK, st.just(")")).map("".join),
        st.tuples(st.just("("), _BREAK, inner, st.just(","), _BREAK, inner,
                  st.sampled_from(["", ","]), _BREAK, st.just(")")).map("".join),
        st.tuples(st.just("["), _BREAK, inner, st.just(","), _SPACE, inner,
                  st.just("]")).map("".join),
        st.tuples(st.sampled_from(["f", "tl.load", "a.b.c"]), st.just("("), _BREAK, inner,
                  st.sampled_from(["", ", k=1", ", *r", ", **kw", ","]), _BREAK,
                  st.just(")")).map("".join),
        st.tuples(st.just("x["), inner, st.sampled_from(["", ":", ":2", ", ::3", ","]),
                  st.just("]")).map("".join),
        st.tuples(st.just("{"), inner, st.just(": "), inner, st.just("}")).map("".join),
        st.tuples(inner, st.just(" if "), inner, st.just(" else "), inner).map("".join),
        st.tuples(st.just("["), inner, st.just(" for i in "), inner,
                  st.sampled_from(["", " if i"]), st.just("]")).map("".join),
        st.tuples(st.just('f"a{'), inner, st.sampled_from(["", "!r", ":>4", "="]),
                  st.just('}b"')).map("".join),
        st.tuples(st.just("lambda q"), st.sampled_from(["", ", *, r=1"]), st.just(": "),
                  inner).map("".join),
    )


_ATOMS = st.sampled_from(["a", "tl.dot", "1", "2.5", "3j", "'s'", '"a" "b"', "None", "...",
                          "x[i]", "f()", "(a)"])
EXPRESSIONS = st.recursive(_ATOMS, _wrap, max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(EXPRESSIONS, st.sampled_from(["x = {}", "{}", "return {}", "acc += {}",
                                     "for t in {}:\n    pass", "if {}:\n    y = 1",
                                     "assert {}, 'm'", "k({})", "del x[{}]"]))
def test_generated_expressions_give_the_libcst_table(expr: str, stmt: str) -> None:
    src = "def k(x):\n    " + stmt.format(expr).replace("\n", "\n    ") + "\n"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # `1 is 2` and the like are fine here
            compile(src, "<generated>", "exec")
    except SyntaxError:
        return  # e.g. `del x[...]` of a generated call, `return` of a walrus-free lambda
    assert first_difference(src) is None
