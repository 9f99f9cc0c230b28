"""Triton / Python back-end through libcst: the definition of the Python node table.

`kir.triton` builds the same table from Python's `ast` about six times faster and is what
`kir.parse` uses; this module is its reference (tests compare the two column by column) and
its fallback for the few constructs it does not rebuild (`except*`, PEP 695 type parameters,
a starred subscript, f-strings it cannot split). libcst loads only when this module does.

Whitespace, comments and operator tokens are not IR nodes (their bytes stay covered by the
enclosing node's span); an operator is kept as the `name` of its expression so that a diff still
sees `a + b` -> `a * b`. A function's span starts at its first decorator, so deleting or moving
the node moves its decorators with it.
"""
from __future__ import annotations

import dataclasses
import functools
import gc
from collections.abc import Iterator
from typing import Any

import libcst as cst
from libcst import _nodes as _cst_nodes
from libcst.metadata import ByteSpanPositionProvider, MetadataWrapper
from libcst.metadata.span_provider import SpanProvidingCodegenState

from kir import kinds as K
from kir.errors import ParseError
from kir.columns import Columns
from kir.triton_names import _CONSTEXPR, KERNEL_DECORATORS, call_kind, widen_to_children

_LOOPS = {"For": "for", "While": "while"}


def dotted(expr: cst.CSTNode | None) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if isinstance(expr, cst.Name):
        parts.append(expr.value)
        return ".".join(reversed(parts))
    return None


def _target_name(expr: cst.CSTNode) -> str | None:
    """What an assignment writes: `acc`, `self.x`, `a,b`, `buf` for `buf[i]`."""
    if isinstance(expr, (cst.Tuple, cst.List)):
        names = [_target_name(e.value) for e in expr.elements]
        return ",".join(n or "?" for n in names)
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    return dotted(expr)


@functools.cache
def _child_fields(cls: type) -> tuple[str, ...]:
    """Fields of a libcst node class that can hold IR-relevant child nodes."""
    skip = {"whitespace", "lpar", "rpar", "leading_lines", "lines_after_decorators", "header",
            "footer", "comma", "semicolon", "equal", "star", "colon", "dot", "lbracket", "rbracket",
            "lbrace", "rbrace"}
    return tuple(
        f.name for f in dataclasses.fields(cls)
        if not f.name.startswith("whitespace") and f.name not in skip
    )


_SKIP_MODULES = (_cst_nodes.whitespace.__name__, _cst_nodes.op.__name__)


@functools.cache
def _is_trivia(cls: type) -> bool:
    return cls.__module__ in _SKIP_MODULES


def _children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    for fname in _child_fields(type(node)):
        value = getattr(node, fname)
        if isinstance(value, cst.CSTNode):
            if not _is_trivia(type(value)):
                yield value
        elif isinstance(value, (tuple, list)):
            for v in value:
                if isinstance(v, cst.CSTNode) and not _is_trivia(type(v)):
                    yield v


def _classify(node: cst.CSTNode, t: str) -> tuple[str, str | None, dict[str, Any] | None]:
    if t == "Name":
        return K.NAME, node.value, None  # type: ignore[attr-defined]
    if t in ("Integer", "Float", "Imaginary", "SimpleString", "ConcatenatedString",
             "FormattedString"):
        return K.LITERAL, None, None
    if t == "Call":
        func = node.func  # type: ignore[attr-defined]
        kw = tuple(a.keyword.value for a in node.args if a.keyword is not None)  # type: ignore[attr-defined]
        if isinstance(func, cst.Subscript):
            target = dotted(func.value)
            if target is not None:
                return K.LAUNCH, target, {"callee": target, "keywords": kw}
        callee = dotted(func)
        if callee is None:
            return K.CALL, None, {"callee": None, "keywords": kw}
        return call_kind(callee), callee, {"callee": callee, "keywords": kw}
    if t in _LOOPS:
        attrs: dict[str, Any] = {"flavor": _LOOPS[t]}
        if t == "For":
            it = node.iter  # type: ignore[attr-defined]
            attrs["iterator"] = dotted(it.func) if isinstance(it, cst.Call) else None
            attrs["target"] = _target_name(node.target)  # type: ignore[attr-defined]
        return K.LOOP, None, attrs
    if t == "If":
        return K.BRANCH, None, {"flavor": "if"}
    if t in ("Assign", "AnnAssign", "AugAssign"):
        if t == "Assign":
            names = [_target_name(tg.target) for tg in node.targets]  # type: ignore[attr-defined]
            name = ",".join(n or "?" for n in names)
            op = "="
        else:
            name = _target_name(node.target)  # type: ignore[attr-defined]
            op = type(node.operator).__name__ if t == "AugAssign" else "="  # type: ignore[attr-defined]
        return K.ASSIGN, name, {"op": op}
    if t == "FunctionDef":
        decos = tuple(
            dotted(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) or "?"
            for d in node.decorators  # type: ignore[attr-defined]
        )
        kind = K.KERNEL if any(d in KERNEL_DECORATORS for d in decos) else K.FUNCTION
        return kind, node.name.value, {"decorators": decos}  # type: ignore[attr-defined]
    if t == "Decorator":
        d = node.decorator  # type: ignore[attr-defined]
        return K.DECORATOR, dotted(d.func if isinstance(d, cst.Call) else d), None
    if t == "Param":
        ann = node.annotation  # type: ignore[attr-defined]
        ann_name = dotted(ann.annotation) if ann is not None else None
        kind = K.CONSTEXPR_PARAM if ann_name in _CONSTEXPR else K.PARAM
        return kind, node.name.value, {"annotation": ann_name}  # type: ignore[attr-defined]
    if t == "Return":
        return K.RETURN, None, None
    if t == "ClassDef":
        return K.CLASS, node.name.value, None  # type: ignore[attr-defined]
    if t in ("Import", "ImportFrom"):
        return K.IMPORT, None, None
    if t in ("BinaryOperation", "BooleanOperation", "UnaryOperation"):
        return K.OTHER, type(node.operator).__name__, None  # type: ignore[attr-defined]
    if t == "ComparisonTarget":
        return K.OTHER, type(node.operator).__name__, None  # type: ignore[attr-defined]
    if t == "Attribute":
        return K.OTHER, None, None
    if t == "Module":
        return K.MODULE, None, None
    return K.OTHER, None, None


class _Record:
    """`record_syntactic_position` without contextlib's generator machinery (a hot path)."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state: _SpanState, node: cst.CSTNode, start_node: cst.CSTNode | None,
                 end_node: cst.CSTNode | None) -> None:
        self.state, self.node = state, node
        self.start_node, self.end_node = start_node, end_node
        self.start = 0

    def __enter__(self) -> None:
        self.start = self.state.position

    def __exit__(self, *exc: object) -> bool:
        computed = self.state.computed
        start = computed[id(self.start_node)][0] if self.start_node is not None else self.start
        end = computed[id(self.end_node)][1] if self.end_node is not None else self.state.position
        computed[id(self.node)] = (start, end)
        return False


class _SpanState(SpanProvidingCodegenState):
    """libcst's byte-span codegen, recording `(start, end)` per `id(node)`.

    Gives the spans `ByteSpanPositionProvider` gives (a test checks this) at about twice the
    speed: the provider goes through MetadataWrapper's visitor machinery, hashes nodes with a
    Python-level `__hash__`, builds a dataclass per node and encodes every token to UTF-8 to
    measure it (ASCII text needs none of that). The token list is not kept.
    """

    computed: dict[int, tuple[int, int]]
    ascii: bool

    def add_token(self, value: str) -> None:
        self.position += len(value) if self.ascii else len(value.encode("utf-8"))

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.add_token(token)

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._stack.append(self.position)

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._stack.pop()
        self.computed.setdefault(id(node), (start, self.position))

    def record_syntactic_position(  # type: ignore[override]
        self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None,
        end_node: cst.CSTNode | None = None,
    ) -> _Record:
        return _Record(self, node, start_node, end_node)


def byte_spans(module: cst.Module, ascii_only: bool) -> dict[int, tuple[int, int]]:
    """`id(node) -> (start, end)` byte span of every node of `module` (the module must stay
    alive while the ids are used). Same spans as libcst's `ByteSpanPositionProvider`."""
    try:
        state = _SpanState(default_indent=module.default_indent,
                           default_newline=module.default_newline, provider=None)  # type: ignore[arg-type]
        state.ascii = ascii_only
        state.computed = {}
        module._codegen(state)
        return state.computed
    except (AttributeError, TypeError):  # libcst internals moved: take the public road
        spans = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ByteSpanPositionProvider)
        return {id(k): (v.start, v.start + v.length) for k, v in spans.items()}


def build(text: str, source: bytes) -> Columns:
    """Parse Python/Triton text; raises `ParseError` on a syntax error."""
    # libcst allocates one object per token and node; the cyclic GC would otherwise rescan the
    # young tree many times during the parse (measured: about a third of the parse time).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _build(text, source)
    except RecursionError:  # libcst's parser and code generator recurse per nesting level
        raise ParseError("Python source nests too deeply to parse") from None
    finally:
        if gc_was_enabled:
            gc.enable()


def _build(text: str, source: bytes) -> Columns:
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        raise ParseError(f"Python syntax error: {' '.join(exc.message.split())}",
                         line=exc.raw_line) from None
    positions = byte_spans(module, len(source) == len(text))
    if text.startswith("\ufeff"):
        # libcst drops a UTF-8 byte-order mark from its code generation: shift past it
        bom = len("\ufeff".encode())
        positions = {k: (a + bom, b + bom) for k, (a, b) in positions.items()}
    cols = Columns()
    add = cols.add
    # explicit stack: kernels can nest deeply enough to hit Python's recursion limit otherwise
    stack: list[tuple[cst.CSTNode, int]] = [(module, -1)]
    while stack:
        node, parent = stack.pop()
        t = type(node).__name__
        kind, name, attrs = _classify(node, t)
        if parent < 0:
            start, end = 0, len(source)
        else:
            start, end = positions[id(node)]
            if t in ("FunctionDef", "ClassDef") and node.decorators:  # type: ignore[attr-defined]
                start = positions[id(node.decorators[0])][0]  # type: ignore[attr-defined]
        nid = add(kind, t, name, start, end, parent, attrs)
        kids = list(_children(node))
        if len(kids) > 1:
            # dataclass field order is not always source order (e.g. FunctionDef.decorators)
            kids.sort(key=lambda k: positions[id(k)][0])
        stack.extend((k, nid) for k in reversed(kids))
    widen_to_children(cols)
    return cols
