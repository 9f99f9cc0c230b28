"""Compute-level passes of Triton kernels: tensor-core `tl.dot` and `exp2` with a folded log2(e).
"""
from __future__ import annotations

import ast
import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from kir.errors import BadInputError
from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, callee, dotted, is_cdiv, walk_stmts
from passes.triton._py import int_value as _int_value
from passes.triton.launch import TRITON
from passes.triton.logdomain import scale_fold

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

    from passes.precondition import PreconditionResult

DOT_NAMES = frozenset({"tl.dot", "triton.language.dot"})
SUM_NAMES = frozenset({"tl.sum", "triton.language.sum"})
EXPAND_NAMES = frozenset({"tl.expand_dims", "triton.language.expand_dims"})
EXP2_NAMES = frozenset({"tl.exp2", "tl.math.exp2", "triton.language.exp2"})
EXP_NAMES = frozenset({"tl.exp", "tl.math.exp", "triton.language.exp"})
LOG2E = 1.4426950408889634
_F32 = ".to(tl.float32)"


def _snippet(text: str) -> tuple[PyModule, ast.expr]:
    """One recorded expression (e.g. a `tl.dot(...)` call) parsed on its own: a recorded call
    renders to the same text here as inside its kernel. Raises `ParseError` on bad text."""
    from kir import parse  # noqa: PLC0415 — kir is only needed for recorded options

    # The parentheses make a multi-line argument list (as recorded) one valid expression.
    mod = PyModule(parse(f"(\n{text}\n)\n", language="triton"))
    stmt = mod.tree.body[0] if len(mod.tree.body) == 1 else None
    if not isinstance(stmt, ast.Expr):
        raise BadInputError(f"recorded expression {text!r} is not one expression")
    return mod, stmt.value


def _render(src: PyModule, node: ast.AST, rewrite: Callable[[ast.AST], str | None]) -> str:
    """The source of `node` with `node` itself, or else every outermost descendant, that
    `rewrite` gives a text for replaced by that text (`rewrite` may render inside itself, so
    nested dots compose)."""
    whole = rewrite(node)
    if whole is not None:
        return whole
    edits: list[tuple[int, int, str]] = []
    todo = list(ast.iter_child_nodes(node))
    while todo:
        child = todo.pop()
        if not hasattr(child, "lineno"):
            continue  # operators and contexts carry no position and hold no dot
        text = rewrite(child)
        if text is None:
            todo.extend(ast.iter_child_nodes(child))
        else:
            edits.append((*src.span(child), text))
    base = src.start(node)
    out = src.text(node).encode("utf-8")
    for start, end, text in sorted(edits, reverse=True):
        out = out[:start - base] + text.encode("utf-8") + out[end - base:]
    return out.decode("utf-8")


_ATOMS = (ast.Name, ast.Call, ast.Attribute, ast.Subscript, ast.Constant)


def _paren(src: PyModule, node: ast.AST, text: str | None = None) -> str:
    """`text` (default: the source of `node`), parenthesized unless it is an atom (name, call,
    attribute, subscript, constant). A rendered text is judged as written, not as `node` was:
    a nested dot with an accumulator renders as a sum."""
    if text is None or text == src.text(node):
        return src.text(node) if isinstance(node, _ATOMS) else f"({src.text(node)})"
    parsed = ast.parse(f"(\n{text}\n)", mode="eval").body
    return text if isinstance(parsed, _ATOMS) else f"({text})"


# Triton refuses to compile a block of more than this many elements (TRITON_MAX_TENSOR_NUMEL).
MAX_NUMEL = 1 << 20
# The de-optimization's own precondition (the declared ones admit the optimization).
_FITS = "product_elems <= max_product_elems"

# Parents in which `acc + product` needs no parentheses: the value of a statement, an argument.
_LOOSE_PARENTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr, ast.keyword,
                  ast.Tuple, ast.List)


def _dot_args(call: ast.Call) -> tuple[ast.AST, ast.AST, ast.AST | None, ast.AST | None]:
    """(a, b, acc or None, out_dtype or None) of a `tl.dot` call."""
    acc = call.args[2] if len(call.args) > 2 else next(
        (k.value for k in call.keywords if k.arg == "acc"), None)
    out_dtype = next((k.value for k in call.keywords if k.arg == "out_dtype"), None)
    return call.args[0], call.args[1], acc, out_dtype


def _is_dot(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and callee(node) in DOT_NAMES and len(node.args) >= 2


def _deopt_text(src: PyModule, call: ast.Call, nested: bool = True) -> str:
    """The broadcast-multiply form of `call`; with `nested`, dots in its operands de-optimized
    too (without, they stay dots).

    `tl.dot(a, b, acc)` becomes `acc + tl.sum(a[:, :, None] * b[None, :, :], axis=1)` in fp32
    (parenthesized where an operator around the call would bind tighter than `+`); a recorded
    `out_dtype` without an accumulator becomes a `.to(T)` cast. Keywords that only steer the
    tensor-core instruction (`input_precision`, `allow_tf32`, `max_num_imprecise_acc`) are
    dropped: the fp32 product is exact."""
    def inner(node: ast.AST) -> str | None:
        return _deopt_text(src, node) if nested and _is_dot(node) else None

    a, b, acc, out_dtype = _dot_args(call)
    product = (f"tl.sum({_paren(src, a, _render(src, a, inner))}{_F32}[:, :, None] * "
               f"{_paren(src, b, _render(src, b, inner))}{_F32}[None, :, :], axis=1)")
    if out_dtype is not None and acc is None:
        product = f"{product}.to({src.text(out_dtype)})"
    if acc is None:
        return product
    text = f"{_paren(src, acc, _render(src, acc, inner))} + {product}"
    parent = src.parents.get(call)
    loose = isinstance(parent, _LOOSE_PARENTS) or (isinstance(parent, ast.Call) and call in parent.args)
    return text if loose else f"({text})"


def _slice_pattern(node: ast.AST) -> str:
    """"a" for `x[:, :, None]`, "b" for `x[None, :, :]`, "" otherwise."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple)
            and len(node.slice.elts) == 3):
        return ""
    marks = "".join("x" if isinstance(e, ast.Constant) and e.value is None
                    else (":" if isinstance(e, ast.Slice) and e.lower is None and e.upper is None
                          and e.step is None else "?") for e in node.slice.elts)
    return {"::x": "a", "x::": "b"}.get(marks, "")


def _strip_f32(node: ast.AST) -> ast.AST:
    """The operand of a de-optimized product without its `.to(tl.float32)` cast."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "to" and len(node.args) == 1 and not node.keywords
            and dotted(node.args[0]) in ("tl.float32", "triton.language.float32")):
        return node.func.value
    return node


def _product_call(node: ast.AST) -> bool:
    """`tl.sum(x[:, :, None] * y[None, :, :], axis=1)`: a de-optimized dot."""
    if not (isinstance(node, ast.Call) and callee(node) in SUM_NAMES and node.args):
        return False
    axis = next((k.value for k in node.keywords if k.arg == "axis"),
                node.args[1] if len(node.args) > 1 else None)
    prod = node.args[0]
    return (isinstance(axis, ast.Constant) and axis.value == 1
            and isinstance(prod, ast.BinOp) and isinstance(prod.op, ast.Mult)
            and _slice_pattern(prod.left) == "a" and _slice_pattern(prod.right) == "b")


def _axis(node: ast.AST) -> int | None:
    """An integer literal (`2`, `-2`); None for anything else."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        sign, node = -1, node.operand
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return sign * node.value
    return None


def _expanded(node: ast.AST) -> tuple[str, ast.AST] | None:
    """("a", x) for `x[:, :, None]` or `tl.expand_dims(x, 2)`, ("b", x) for `x[None, :, :]` or
    `tl.expand_dims(x, 0)` (the axis also as a keyword); None otherwise."""
    role = _slice_pattern(node)
    if role:
        return role, node.value
    if not (isinstance(node, ast.Call) and callee(node) in EXPAND_NAMES
            and len(node.args) + len(node.keywords) == 2
            and all(k.arg in ("input", "axis") for k in node.keywords)):
        return None
    x = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "input"), None)
    axis = node.args[1] if len(node.args) > 1 else next(
        (k.value for k in node.keywords if k.arg == "axis"), None)
    role = {2: "a", 0: "b"}.get(_axis(axis)) if x is not None and axis is not None else None
    return (role, x) if role else None


def _broadcast_product(expr: ast.AST) -> tuple[ast.AST, ast.AST] | None:
    """(a, b) of the (M, K, N) product `a[:, :, None] * b[None, :, :]`, its factors in either
    order and each also spelled with `tl.expand_dims`: its sum over axis 1 is `a @ b`."""
    if not (isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult)):
        return None
    left, right = _expanded(expr.left), _expanded(expr.right)
    if left is None or right is None or {left[0], right[0]} != {"a", "b"}:
        return None
    return (left[1], right[1]) if left[0] == "a" else (right[1], left[1])


def _reduced_axis(call: ast.Call) -> int | None:
    """The axis of `tl.sum(x, axis)` (positional or keyword) when nothing else is passed (no
    `keep_dims`, no `dtype`); None otherwise."""
    if not call.args or len(call.args) + len(call.keywords) != 2:
        return None
    if len(call.args) == 2:
        return _axis(call.args[1])
    return _axis(call.keywords[0].value) if call.keywords[0].arg == "axis" else None


def _single_bindings(kernel: ast.FunctionDef) -> dict[str, ast.Assign]:
    """The names of a kernel (not parameters) bound once, by a plain `name = value`, and read
    once: name -> the assignment."""
    stores: dict[str, int] = {}
    loads: dict[str, int] = {}
    for node in ast.walk(kernel):
        if isinstance(node, ast.Name):
            counts = loads if isinstance(node.ctx, ast.Load) else stores
            counts[node.id] = counts.get(node.id, 0) + 1
    params = {a.arg for a in (*kernel.args.posonlyargs, *kernel.args.args, *kernel.args.kwonlyargs)}
    return {node.targets[0].id: node for node in ast.walk(kernel)
            if isinstance(node, ast.Assign) and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name) and node.targets[0].id not in params
            and stores[node.targets[0].id] == 1 and loads.get(node.targets[0].id) == 1}


def _drop(mod: PyModule, stmt: ast.stmt) -> ByteEdit:
    """Delete `stmt`: its lines when it is alone on them, else the statement itself (`pass`)."""
    start, end = mod.stmt_span(stmt)
    head, tail = mod.source[start:mod.start(stmt)], mod.source[mod.end(stmt):end].strip()
    if not head.strip() and (not tail or tail.startswith(b"#")):
        return ByteEdit(start, end, "")
    return ByteEdit(*mod.span(stmt), "pass")


# ---------------------------------------------------------------------------------------------
# How large a broadcast product gets: tile shapes inferred per launch configuration.
Shape = tuple[int | None, ...]
_ELEMENTWISE = frozenset({"tl.where", "tl.maximum", "tl.minimum", "tl.exp", "tl.exp2", "tl.log",
                          "tl.log2", "tl.abs", "tl.sqrt", "tl.sigmoid", "tl.math.exp2",
                          "tl.math.exp", "tl.math.log2", "tl.fma", "tl.math.fma"})
# a cdiv is a scalar too, under any name (`is_cdiv`)
_SCALARS = frozenset({"tl.program_id", "tl.num_programs", "min", "max",
                      "triton.language.program_id", "triton.language.num_programs"})
_REDUCTIONS = frozenset({"tl.sum", "tl.max", "tl.min", "tl.cumsum", "tl.argmax", "tl.argmin"})


def _broadcast(*shapes: Shape | None) -> Shape | None:
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    out: list[int | None] = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        out.append(None if len(dims) > 1 or None in dims else (dims.pop() if dims else 1))
    return tuple(out)


def _shape(expr: ast.AST, env: dict[str, Shape], values: dict[str, int]) -> Shape | None:
    """The block shape of a Triton expression (scalars: `()`); None where not inferred
    (e.g. the result of a helper function)."""
    if isinstance(expr, ast.Constant):
        return ()
    if isinstance(expr, ast.Name):
        return () if expr.id in values else env.get(expr.id)
    if isinstance(expr, (ast.BinOp, ast.BoolOp, ast.Compare)):
        parts = ([expr.left, expr.right] if isinstance(expr, ast.BinOp) else
                 expr.values if isinstance(expr, ast.BoolOp) else [expr.left, *expr.comparators])
        return _broadcast(*(_shape(p, env, values) for p in parts))
    if isinstance(expr, ast.UnaryOp):
        return _shape(expr.operand, env, values)
    if isinstance(expr, ast.IfExp):
        return _broadcast(_shape(expr.body, env, values), _shape(expr.orelse, env, values))
    if isinstance(expr, ast.Subscript):
        base = _shape(expr.value, env, values)
        items = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
        if base is None:
            return None
        out, rest = [], list(base)
        for item in items:
            if isinstance(item, ast.Constant) and item.value is None:
                out.append(1)
            elif isinstance(item, ast.Slice) and rest:
                out.append(rest.pop(0))
            else:
                return None
        return tuple(out + rest)
    if not isinstance(expr, ast.Call):
        return None
    name = callee(expr)
    args = expr.args
    if name in _SCALARS or is_cdiv(expr):
        return ()
    if isinstance(expr.func, ast.Attribute) and expr.func.attr == "to":
        return _shape(expr.func.value, env, values)
    if (isinstance(expr.func, ast.Attribute) and expr.func.attr == "reshape" and args
            and name not in ("tl.reshape", "triton.language.reshape")):  # `x.reshape(A, B)`
        dims = args[0].elts if len(args) == 1 and isinstance(args[0], (ast.List, ast.Tuple)) else args
        return tuple(_int_value(d, values) for d in dims)
    if name in ("tl.reshape", "triton.language.reshape") and len(args) >= 2:
        dims = args[1].elts if isinstance(args[1], (ast.List, ast.Tuple)) else args[1:]
        return tuple(_int_value(d, values) for d in dims)
    if name in ("tl.arange", "triton.language.arange") and len(args) == 2:
        lo, hi = _int_value(args[0], values), _int_value(args[1], values)
        return (hi - lo,) if lo is not None and hi is not None else (None,)
    if name in ("tl.zeros", "tl.full") and args and isinstance(args[0], (ast.List, ast.Tuple)):
        return tuple(_int_value(d, values) for d in args[0].elts)
    if name in ("tl.load",) and args:
        return _shape(args[0], env, values)
    if name in ("tl.trans",) and len(args) == 1:
        inner = _shape(args[0], env, values)
        return tuple(reversed(inner)) if inner is not None else None
    if name in DOT_NAMES and len(args) >= 2:
        a, b = _shape(args[0], env, values), _shape(args[1], env, values)
        return (a[0], b[-1]) if a and b and len(a) == 2 and len(b) == 2 else None
    if name in _REDUCTIONS and args:
        inner = _shape(args[0], env, values)
        axis = next((k.value for k in expr.keywords if k.arg == "axis"), args[1] if len(args) > 1 else None)
        at = _int_value(axis, values) if axis is not None else None
        if inner is None or at is None or not -len(inner) <= at < len(inner):
            return None if axis is not None else ()
        return inner[:at % len(inner)] + inner[at % len(inner) + 1:]
    if name in _ELEMENTWISE:
        return _broadcast(*(_shape(a, env, values) for a in args))
    return None


def _constexpr_bindings(mod: PyModule, kernel: ast.FunctionDef,
                        facts: Mapping[str, Any]) -> list[dict[str, int]]:
    """The integer constexpr values the kernel compiles with, one table per autotune config:
    module constants, then launch keywords, then each config's values; a name still unbound
    takes the case fact of the same name (the case's shape dims name the kernel's, e.g. K)."""
    module: dict[str, int] = {}
    for stmt in mod.tree.body:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
        if isinstance(target, ast.Name) and (value := _int_value(stmt.value, module)) is not None:
            module[target.id] = value
    params = [a.arg for a in kernel.args.args]
    base: dict[str, int] = {}
    for param, default in zip(params[len(params) - len(kernel.args.defaults):], kernel.args.defaults):
        if (value := _int_value(default, module)) is not None:
            base[param] = value
    for launch in mod.launches(kernel.name):
        for kw in launch.keywords:
            if kw.arg in params and (value := _int_value(kw.value, module)) is not None:
                base[kw.arg] = value
    for param in params:
        if param not in base and isinstance(facts.get(param), int):
            base[param] = int(facts[param])
    configs: list[dict[str, int]] = []
    dec = mod.decorator(kernel, "autotune")
    listed = next((k.value for k in dec.keywords if k.arg == "configs"), None) \
        if isinstance(dec, ast.Call) else None
    for config in listed.elts if isinstance(listed, ast.List) else []:
        table = config.args[0] if isinstance(config, ast.Call) and config.args else None
        if isinstance(table, ast.Dict):
            configs.append({key.value: value for key, node in zip(table.keys, table.values)
                            if isinstance(key, ast.Constant) and isinstance(key.value, str)
                            and (value := _int_value(node, module)) is not None})
    return [{**base, **config} for config in configs] or [base]


def _product_elems(mod: PyModule, kernel: ast.FunctionDef, dots: list[ast.Call],
                   facts: Mapping[str, Any]) -> int | None:
    """The largest M x K x N broadcast product the kernel's `dots` become, over its launch
    configurations; None when no dot's operand shapes could be inferred."""
    largest = None
    wanted = {id(d) for d in dots}
    for values in _constexpr_bindings(mod, kernel, facts):
        env: dict[str, Shape] = {a.arg: () for a in kernel.args.args if a.arg not in values}
        for node in _statements(kernel.body):
            for call in (n for n in ast.walk(node) if id(n) in wanted) if not isinstance(
                    node, (ast.For, ast.While, ast.If)) else ():
                a, b = _shape(call.args[0], env, values), _shape(call.args[1], env, values)
                if a and b and len(a) == 2 and len(b) == 2 and None not in (*a, b[-1]):
                    elems = a[0] * a[1] * b[-1]
                    largest = elems if largest is None else max(largest, elems)
            bind_shapes(node, env, values)
    return largest


def bind_shapes(stmt: ast.stmt, env: dict[str, Shape], values: dict[str, int]) -> None:
    """Record in `env` the block shapes of the names `stmt` assigns (a name whose new shape is
    not inferred keeps a known one: a loop-carried block); a loop counter is a scalar."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target, value = stmt.targets[0], stmt.value
        pairs = (list(zip(target.elts, value.elts)) if isinstance(target, ast.Tuple)
                 and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts)
                 else [(target, value)])
        for t, v in pairs:
            if isinstance(t, ast.Name):
                shape = _shape(v, env, values)
                env[t.id] = shape if shape is not None else env.get(t.id)
    elif isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name):
        env[stmt.target.id] = ()


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement under `body` in source order (a loop's body once, after its header)."""
    for stmt in body:
        yield stmt
        for attr in ("body", "orelse"):
            block = getattr(stmt, attr, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield from _statements(block)


def _stored(stmt: ast.stmt) -> set[str]:
    """The names a statement binds itself (not those of the statements nested in it)."""
    own = [v for _, field in ast.iter_fields(stmt)
           for v in (field if isinstance(field, list) else [field])
           if isinstance(v, ast.AST) and not isinstance(v, ast.stmt)]
    return {n.id for v in own for n in ast.walk(v)
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}


def _rank_env(kernel: ast.FunctionDef) -> dict[str, Shape]:
    """Block shapes, for their ranks, of the names a kernel binds: a name bound to blocks of
    different ranks, to one of unknown shape, or other than by a plain assignment (`x += y`
    keeps the rank) is left out."""
    env: dict[str, Shape] = {a.arg: () for a in kernel.args.args}
    mixed: set[str] = set()
    for node in _statements(kernel.body):
        pairs: list[tuple[ast.AST, ast.AST | None]] = []
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            pairs = (list(zip(target.elts, value.elts)) if isinstance(target, ast.Tuple)
                     and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts)
                     else [(target, value)])
        elif isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            pairs = [(node.target, None)]  # a loop counter
        done = {t.id for t, _ in pairs if isinstance(t, ast.Name)}
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            done.add(node.target.id)
        for target, value in pairs:
            if not isinstance(target, ast.Name) or target.id in mixed:
                continue
            shape = () if value is None else _shape(value, env, {})
            if shape is None or (target.id in env and len(env[target.id]) != len(shape)):
                mixed.add(target.id)
            else:
                env[target.id] = shape
        mixed |= _stored(node) - done
        for name in mixed:
            env.pop(name, None)
    return env


def _block_rank(expr: ast.AST, ranks: dict[str, Shape]) -> int:
    """The largest block rank an expression reads (a name's, or 2 for an `x[:, None]`
    broadcast); 0 for scalars and unknowns."""
    rank = 0
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id in ranks:
            rank = max(rank, len(ranks[node.id]))
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple):
            rank = max(rank, len(node.slice.elts))
    return rank


# Calls that neither read nor write memory (a `.to(...)` cast too): a product of them may be
# computed later than where it is written.
_PURE = (_ELEMENTWISE | _SCALARS | _REDUCTIONS | DOT_NAMES | EXPAND_NAMES
         | {"tl.arange", "tl.zeros", "tl.full", "tl.trans", "tl.reshape", "tl.broadcast_to",
            "tl.zeros_like", "tl.full_like", "triton.language.arange", "triton.language.zeros"})
_SIMPLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return)


def _pure(call: ast.Call) -> bool:
    return (callee(call) in _PURE or is_cdiv(call)
            or (isinstance(call.func, ast.Attribute) and call.func.attr == "to"))


@dataclass(frozen=True, slots=True)
class _Product:
    """A de-optimized dot found in a kernel: the whole expression a restore may replace (the
    `tl.sum` call, `acc + tl.sum(...)`, or `tl.sum(...).to(T)`), the call, the accumulator,
    the operands (a is (M, K), b is (K, N); casts not stripped) and, for a product bound to a
    name first, its assignment: `moved` when the dot may be computed at the sum (the assignment
    is dropped), else the assignment's value becomes the dot and the sum the name."""

    whole: ast.AST
    call: ast.Call
    acc: ast.AST | None
    kernel: ast.FunctionDef
    a: ast.AST
    b: ast.AST
    bound: ast.Assign | None = None
    moved: bool = False


@dataclass(frozen=True, slots=True)
class TensorCoreDot(Pass):
    """`tl.dot` (tensor cores) <-> a broadcast multiply reduced with `tl.sum` in fp32.

    A site is one jit function with all its dots (`granularity="kernel"`, the default): one
    step removes, or restores, the tensor cores of a whole kernel, so a kernel of many dots is
    one lineage transition. `granularity="call"` keeps one site per `tl.dot` call.
    """

    call: str = ""
    """The exact `tl.dot(...)` expression to restore at one product (recorded by a per-call
    de-optimization)."""
    calls: str = ""
    """A JSON list of the exact outermost `tl.dot(...)` expressions of one kernel, in source
    order (recorded by a kernel-wide de-optimization); `optimize` restores each at the product
    it became and refuses when the kernel does not hold them all."""
    granularity: str = "kernel"
    """"kernel": one site per jit function covering all its dots; "call": one site per dot."""
    max_product_elems: int = MAX_NUMEL
    """The largest broadcast product (M x K x N elements) a de-optimization writes: Triton
    refuses to compile a tensor of more than `MAX_NUMEL` elements."""

    name: ClassVar[str] = "tensor-core-dot"
    category: ClassVar[Category] = Category.COMPUTE
    summary: ClassVar[str] = "tl.dot on tensor cores <-> broadcast multiply + tl.sum"
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    provides: ClassVar[tuple[str, ...]] = ("tensor-core",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = (
        "arch >= sm_70", "dtype in {fp16, bf16, fp32, fp8, fp8e4m3, fp8e5m2, int8}")

    # -- finding dots and products ------------------------------------------------------
    @staticmethod
    def _dots(mod: PyModule, kernel: ast.FunctionDef) -> list[ast.Call]:
        return [c for c in mod.calls(kernel, DOT_NAMES) if len(c.args) >= 2]

    @staticmethod
    def _outermost(mod: PyModule, nodes: list[ast.AST]) -> list[ast.AST]:
        """The nodes not inside another of `nodes`, in source order."""
        inside = set()
        for node in nodes:
            inside.update(id(n) for n in ast.walk(node) if n is not node)
        return sorted((n for n in nodes if id(n) not in inside), key=mod.start)

    def _products(self, mod: PyModule, kernel: ast.FunctionDef) -> list[_Product]:
        """The de-optimized dots of a kernel, in source order: the form a de-optimization
        writes, and the same (M, K, N) product summed over K written otherwise (factors
        swapped or spelled with `tl.expand_dims`, `axis=-2`, the product bound to a name read
        only by the sum)."""
        found: list[tuple[ast.Call, ast.AST, ast.AST, ast.Assign | None]] = []
        bindings: dict[str, ast.Assign] | None = None
        env: dict[str, Shape] | None = None
        for call in mod.calls(kernel, SUM_NAMES):
            if _product_call(call):
                prod = call.args[0]
                found.append((call, prod.left.value, prod.right.value, None))
                continue
            axis = _reduced_axis(call)
            if axis not in (1, -2):
                continue
            arg = call.args[0]
            if isinstance(arg, ast.Name):
                bindings = _single_bindings(kernel) if bindings is None else bindings
                assign = bindings.get(arg.id)
                if assign is None or mod.end(assign) > mod.start(call):
                    continue
                operands = _broadcast_product(assign.value)
            else:
                assign, operands = None, _broadcast_product(arg)
            if operands is None:
                continue
            env = _rank_env(kernel) if env is None else env
            shapes = [_shape(x, env, {}) for x in operands]
            if any(s is not None and len(s) != 2 for s in shapes) or (axis == -2 and None in shapes):
                continue  # not (M, K) x (K, N) operands, or axis -2 not provably axis 1
            found.append((call, *operands, assign))
        sums = {id(call) for call, *_ in found}
        out = []
        for call, a, b, assign in found:
            moved = assign is not None and self._movable(mod, kernel, assign, call)
            parent = mod.parents.get(call)
            cast = mod.parents.get(parent) if isinstance(parent, ast.Attribute) else None
            if assign is not None and not moved:
                # the dot is computed where the product is bound; the sum reads the name
                out.append(_Product(call, call, None, kernel, a, b, assign, False))
            elif (isinstance(parent, ast.Attribute) and parent.attr == "to"
                    and isinstance(cast, ast.Call) and cast.func is parent):
                # `tl.sum(...).to(T)`: a de-optimized out_dtype, or the kernel's own cast;
                # the recorded call (if any) says which
                out.append(_Product(cast, call, None, kernel, a, b, assign, moved))
            elif (isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add)
                  and parent.right is call and not any(id(n) in sums for n in ast.walk(parent.left))):
                # `acc + product`: maybe an accumulator (a recorded call says; the default
                # folds only a plain name). A left side holding products is a sum of dots
                # (`dot(a, b) + dot(c, d)` de-optimized), each product on its own.
                out.append(_Product(parent, call, parent.left, kernel, a, b, assign, moved))
            else:
                out.append(_Product(call, call, None, kernel, a, b, assign, moved))
        return out

    @staticmethod
    def _movable(mod: PyModule, kernel: ast.FunctionDef, assign: ast.Assign, call: ast.Call) -> bool:
        """Whether the product `assign` binds may be computed at the sum `call` that reads it:
        both in one block, the sum in a simple statement, nothing from the assignment to the
        sum rebinding a name the product reads, nor, when it reads memory (or calls what is not
        known pure), calling anything not known pure."""
        block = next((b for b in walk_stmts(kernel.body) if any(s is assign for s in b)), [])
        i = next((i for i, s in enumerate(block) if s is assign), len(block))
        j = next((j for j, s in enumerate(block)
                  if mod.start(s) <= mod.start(call) and mod.end(call) <= mod.end(s)), -1)
        if j <= i or not isinstance(block[j], _SIMPLE):
            return False
        between = block[i + 1:j]
        reads = {n.id for n in ast.walk(assign.value) if isinstance(n, ast.Name)}
        rebound = {n.id for s in between for n in ast.walk(s)
                   if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        rebound |= {n.target.id for n in ast.walk(block[j]) if isinstance(n, ast.NamedExpr)}
        if reads & rebound:
            return False
        if all(_pure(c) for c in ast.walk(assign.value) if isinstance(c, ast.Call)):
            return True
        return all(_pure(c) for s in (*between, block[j]) for c in ast.walk(s)
                   if isinstance(c, ast.Call) and c is not call)

    @staticmethod
    def _span(mod: PyModule, product: _Product) -> tuple[int, int]:
        """The bytes a restore of `product` may touch: its expression, from its binding on."""
        if product.bound is None:
            return mod.span(product.whole)
        return mod.stmt_span(product.bound)[0], mod.end(product.whole)

    @staticmethod
    def _operands(product: _Product) -> tuple[ast.AST, ast.AST]:
        return _strip_f32(product.a), _strip_f32(product.b)

    def _kernel_at(self, mod: PyModule, site: Site) -> ast.FunctionDef | None:
        name = site.detail.get("kernel")
        return next((k for k in mod.kernels() if k.name == name
                     and mod.span(k)[0] <= site.span[0] < mod.span(k)[1]), None)

    # -- sites --------------------------------------------------------------------------
    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        if self.granularity == "call":
            return self._call_sites(ir, index, mod)
        out = []
        for kernel in mod.kernels():
            span = mod.span(kernel)
            dots = self._dots(mod, kernel)
            if dots:
                out.append(make_site(self.name, ir, index, span, True, {
                    "kernel": kernel.name, "dots": len(dots),
                    "outermost": len(self._outermost(mod, dots))}))
            products = self._products(mod, kernel)
            if products:
                out.append(make_site(self.name, ir, index, span, False,
                                     {"kernel": kernel.name, "products": len(products)}))
        return out

    def _call_sites(self, ir: KernelIR, index: AnchorIndex | None, mod: PyModule) -> list[Site]:
        out = []
        for kernel in mod.kernels():
            out += [make_site(self.name, ir, index, mod.span(c), True,
                              {"kernel": kernel.name, "a": mod.text(c.args[0]),
                               "b": mod.text(c.args[1])}) for c in self._dots(mod, kernel)]
            for product in self._products(mod, kernel):
                a, b = self._operands(product)
                # the operands identify the product: `x + tl.sum(...)` shares its start with a
                # product x before it, so the position alone cannot tell them apart
                out.append(make_site(self.name, ir, index, self._span(mod, product), False, {
                    "kernel": kernel.name, "a": mod.text(a), "b": mod.text(b),
                    "accumulates": product.acc is not None}, mod.span(product.call)))
        return out

    # -- de-optimization ----------------------------------------------------------------
    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        if "dots" not in site.detail:
            call = next((c for k in mod.kernels() for c in self._dots(mod, k)
                         if mod.span(c) == tuple(site.span)), None)
            if call is None:
                return Skipped("no tl.dot at the site", {"site": site.anchor})
            results, skip = self._fits(mod, mod.kernel_of(call), [call], ctx)
            if skip:
                return skip
            return finish(ir, site, [ByteEdit(*mod.span(call), _deopt_text(mod, call, nested=False))],
                          options={"call": mod.text(call), "granularity": "call"},
                          preconditions=results)
        kernel = self._kernel_at(mod, site)
        dots = self._dots(mod, kernel) if kernel is not None else []
        if not dots:
            return Skipped("no tl.dot in the kernel at the site", {"site": site.anchor})
        results, skip = self._fits(mod, kernel, dots, ctx)
        if skip:
            return skip
        outer = self._outermost(mod, dots)
        return finish(ir, site, [ByteEdit(*mod.span(c), _deopt_text(mod, c)) for c in outer],
                      options={"calls": json.dumps([mod.text(c) for c in outer])},
                      preconditions=results)

    def _fits(self, mod: PyModule, kernel: ast.FunctionDef, dots: list[ast.Call],
              ctx: PassContext | None) -> tuple[list[PreconditionResult], Skipped | None]:
        """The broadcast products must stay within what Triton compiles (`max_product_elems`);
        unknown (not refused) where the operand shapes cannot be inferred statically."""
        from passes.precondition import evaluate  # noqa: PLC0415 — avoids an import cycle

        facts: dict[str, Any] = {"max_product_elems": self.max_product_elems}
        elems = _product_elems(mod, kernel, dots, ctx.facts if ctx is not None else {})
        if elems is not None:
            facts["product_elems"] = elems
        result = evaluate(_FITS, facts)
        if result.value is False:
            return [result], Skipped(f"precondition failed: {_FITS} (a broadcast product of "
                                     f"{elems} elements does not compile)", result.facts)
        return [result], None

    # -- optimization -------------------------------------------------------------------
    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        if "products" not in site.detail:
            return self._optimize_call(ir, mod, site, ctx)
        kernel = self._kernel_at(mod, site)
        products = self._products(mod, kernel) if kernel is not None else []
        if not products:
            return Skipped("no broadcast-multiply reduction in the kernel at the site",
                           {"site": site.anchor})
        results, skip = self.check(ctx)
        if skip:
            return skip
        recorded = self._recorded_calls()
        if recorded is None:
            edits = self._default_edits(mod, products)
        else:
            edits = self._recorded_edits(mod, kernel, recorded)
            if isinstance(edits, Skipped):
                return edits
        return finish(ir, site, edits, preconditions=results)

    def _optimize_call(self, ir: KernelIR, mod: PyModule, site: Site,
                       ctx: PassContext | None) -> PassResult:
        """Restore the one product at a per-call site: the recorded call, else the default."""
        found = next((p for k in mod.kernels() for p in self._products(mod, k)
                      if self._span(mod, p) == tuple(site.span)
                      and all(site.detail.get(key, text) == text for key, text in
                              zip(("a", "b"), map(mod.text, self._operands(p))))), None)
        if found is None:
            return Skipped("no broadcast-multiply reduction at the site", {"site": site.anchor})
        results, skip = self.check(ctx)
        if skip:
            return skip
        if not self.call:
            return finish(ir, site, self._default_edits(mod, [found]), preconditions=results)
        if found.bound is not None and not found.moved:
            return Skipped("the product is bound to a name where the recorded call cannot be "
                           "computed", {"site": site.anchor, "name": found.bound.targets[0].id})
        recorded = ast.parse(self.call, mode="eval").body
        keywords = {k.arg for k in getattr(recorded, "keywords", [])}
        has_acc = isinstance(recorded, ast.Call) and (len(recorded.args) > 2 or "acc" in keywords)
        whole = found.whole
        if not has_acc and (isinstance(whole, ast.BinOp)  # `x + dot(a, b)`: only the product
                            or "out_dtype" not in keywords):  # `.to(T)` is the kernel's own
            whole = found.call
        edits = [ByteEdit(*mod.span(whole), self.call)]
        if found.moved:
            edits.insert(0, _drop(mod, found.bound))
        return finish(ir, site, edits, preconditions=results)

    def _recorded_calls(self) -> list[str] | None:
        if self.calls:
            calls = json.loads(self.calls)
            if not (isinstance(calls, list) and all(isinstance(c, str) for c in calls)):
                raise BadInputError("tensor-core-dot: option 'calls' must be a JSON list of strings")
            return calls
        return [self.call] if self.call else None

    def _recorded_edits(self, mod: PyModule, kernel: ast.FunctionDef,
                        recorded: list[str]) -> list[ByteEdit] | Skipped:
        """Each recorded call replaces the first expression after the previous one that is
        (up to formatting) what de-optimizing that call wrote."""
        candidates = sorted((n for n in ast.walk(kernel) if isinstance(n, (ast.Call, ast.BinOp))),
                            key=lambda n: (mod.start(n), -mod.end(n)))
        edits, pos = [], mod.start(kernel)
        for text in recorded:
            snippet, call = _snippet(text)
            if not _is_dot(call):
                raise BadInputError(f"tensor-core-dot: recorded call {text!r} is not a tl.dot call")
            want = ast.dump(ast.parse(_deopt_text(snippet, call), mode="eval").body)
            found = next((n for n in candidates if mod.start(n) >= pos and ast.dump(n) == want), None)
            if found is None:
                return Skipped("the kernel does not hold the recorded de-optimized products",
                               {"call": text})
            edits.append(ByteEdit(*mod.span(found), text))
            pos = mod.end(found)
        return edits

    def _default_edits(self, mod: PyModule, products: list[_Product]) -> list[ByteEdit]:
        """`tl.dot(a, b[, acc])` for every product (an `x + product` accumulates into x), with
        the fp32 casts of the operands dropped; products nested in operands compose. A product
        bound to a name is computed at its sum (the assignment dropped) where that keeps
        semantics, else the assignment binds the dot and the sum becomes the name."""
        by_whole = {id(p.whole): p for p in products}
        # a product nested in another's operand is reached through its cast-stripped call
        by_call = {id(p.call): p for p in products if p.acc is None}
        kept = {id(p.bound.value): p for p in products if p.bound is not None and not p.moved}

        def restore(node: ast.AST) -> str | None:
            if (bound := kept.get(id(node))) is not None:
                a, b = self._operands(bound)
                return f"tl.dot({_render(mod, a, restore)}, {_render(mod, b, restore)})"
            product = by_whole.get(id(node)) or by_call.get(id(node))
            if product is None:
                return None
            if product.bound is not None and not product.moved:
                return product.bound.targets[0].id
            a, b = self._operands(product)
            args = [_render(mod, a, restore), _render(mod, b, restore)]
            if product.acc is not None and isinstance(product.acc, ast.Name):
                args.append(mod.text(product.acc))
            elif product.acc is not None:
                # `x * s + product` is a sum, not obviously an accumulator: the dot stays a
                # term (Triton folds `dot + c` into the accumulator where it pays)
                acc = _paren(mod, product.acc, _render(mod, product.acc, restore))
                return f"{acc} + tl.dot({', '.join(args)})"
            text = f"tl.dot({', '.join(args)})"
            if node is product.whole and product.whole is not product.call and product.acc is None:
                # `tl.sum(...).to(T)`: the cast stays a cast of the dot
                return f"{text}.{mod.text(product.whole)[mod.end(product.call) - mod.start(node) + 1:]}"
            return text

        dropped = [mod.span(p.bound) for p in products if p.moved]
        outer = [w for w in self._outermost(mod, [p.whole for p in products] +
                                            [p.bound.value for p in products
                                             if p.bound is not None and not p.moved])
                 # a product inside a dropped assignment is rendered at the sum that reads it
                 if not any(lo <= mod.start(w) and mod.end(w) <= hi for lo, hi in dropped)]
        edits = [ByteEdit(*mod.span(w), _render(mod, w, restore)) for w in outer]
        edits += [_drop(mod, p.bound) for p in products if p.moved]
        return sorted(edits, key=lambda e: e.start)


# ---------------------------------------------------------------------------------------------
def _log2e_names(mod: PyModule) -> set[str]:
    """Names bound (anywhere in the module) to the constant log2(e)."""
    names = set()
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Assign) and _is_log2e_literal(node.value):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.value is not None and _is_log2e_literal(node.value):
            names.add(node.target.id)
    return names


def _is_log2e_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Call) and callee(node) in ("tl.constexpr", "triton.language.constexpr") \
            and len(node.args) == 1:
        node = node.args[0]  # LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
    return (isinstance(node, ast.Constant) and isinstance(node.value, float)
            and math.isclose(node.value, LOG2E, rel_tol=1e-6))


@dataclass(frozen=True, slots=True)
class Exp2Fold(Pass):
    """`exp2(x * log2(e))` (the MUFU.EX2 instruction, the factor folded) <-> `exp(x)`."""

    fn: str = "tl.exp2"
    """The exp2 spelling to emit."""
    factor: str = "1.4426950408889634"
    """The log2(e) factor's source (a literal or a name bound to it)."""
    side: str = "right"
    """Which side of the product the factor stands on ("left" / "right")."""
    target: str = ""
    """Scale-folded form: the variable that carries `scale * log2(e)` (e.g. `qk_scale`) and
    whose every use feeds exp2; empty for the direct `exp2(x * log2(e))` form."""
    scores: bool = False
    """Scale-folded form with no such variable: log2(e) multiplies each scalar the scores are
    scaled by (`tl.dot(q, k) * (sm_scale * log2(e))`) and the softmax's exps are exp2."""

    name: ClassVar[str] = "exp2-fold"
    category: ClassVar[Category] = Category.EXPRESSION
    summary: ClassVar[str] = "exp2 with log2(e) folded into the argument <-> exp"
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("*",)
    preconditions: ClassVar[tuple[str, ...]] = ("side in {'left', 'right'}",)

    def _folded(self, mod: PyModule) -> list[tuple[ast.Call, ast.AST, ast.AST, str]]:
        """(exp2 call, its x, the factor, side) for `exp2(x * LOG2E)` / `exp2(LOG2E * x)`."""
        log2e = _log2e_names(mod)
        out = []
        for kernel in mod.kernels():
            for call in mod.calls(kernel, EXP2_NAMES):
                arg = call.args[0] if len(call.args) == 1 and not call.keywords else None
                if not (isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mult)):
                    continue
                for x, factor, side in ((arg.left, arg.right, "right"), (arg.right, arg.left, "left")):
                    if _is_log2e_literal(factor) or (isinstance(factor, ast.Name) and factor.id in log2e):
                        out.append((call, x, factor, side))
                        break
        return out

    def _scales(self, mod: PyModule) -> list[tuple[ast.Assign, ast.AST, ast.AST, str]]:
        """(assignment, scale, factor, side) of `s = scale * LOG2E` inside a kernel."""
        log2e = _log2e_names(mod)
        out = []
        for kernel in mod.kernels():
            for node in ast.walk(kernel):
                if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                        and isinstance(node.targets[0], ast.Name)
                        and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Mult)):
                    continue
                value = node.value
                for x, factor, side in ((value.left, value.right, "right"),
                                        (value.right, value.left, "left")):
                    if _is_log2e_literal(factor) or (isinstance(factor, ast.Name) and factor.id in log2e):
                        out.append((node, x, factor, side))
                        break
        return out

    def _folded_scores(self, mod: PyModule
                       ) -> list[tuple[ast.FunctionDef, list[ByteEdit], dict[str, str]]]:
        """(kernel, the edits that undo it, the factor and side of its first product) of each
        kernel in the form `_fold_scores` writes:
        products of a scalar and log2(e) (neither an exp2's argument, `_folded`, nor an
        assignment's whole value, `_scales`) and exp2 calls, where undoing it (each product
        back to its scalar, each exp2 back to exp) leaves a softmax whose fold
        (`logdomain.scale_fold`) is exactly these scalars and these exponentials."""
        log2e = _log2e_names(mod)
        direct = {id(x) for _, x, _, _ in self._folded(mod)}
        direct |= {id(c.args[0]) for c, _, _, _ in self._folded(mod)}
        out = []
        for kernel in mod.kernels():
            exps = [c for c in mod.calls(kernel, EXP2_NAMES) if len(c.args) == 1
                    and not c.keywords and id(c.args[0]) not in direct]
            products = []
            for node in ast.walk(kernel) if exps else ():
                parent = mod.parents.get(node)
                if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)) \
                        or id(node) in direct or (isinstance(parent, ast.Assign) and parent.value is node):
                    continue
                found = next(((x, f, side) for x, f, side in ((node.left, node.right, "right"),
                                                             (node.right, node.left, "left"))
                              if _is_log2e_literal(f) or (isinstance(f, ast.Name) and f.id in log2e)),
                             None)
                if found is not None:
                    products.append((node, *found))
            if not products:
                continue
            src = mod.source
            edits = []
            for node, scale, _, _ in products:
                lo, hi = mod.span(node)
                if src[lo - 1:lo] == b"(" and src[hi:hi + 1] == b")" and not (
                        isinstance(mod.parents.get(node), ast.Call)):
                    lo, hi = lo - 1, hi + 1  # the parentheses `_fold_scores` put around it
                edits.append(ByteEdit(lo, hi, mod.text(scale)))
            edits += [ByteEdit(*mod.span(c.func), mod.text(c.func)[:-1]) for c in exps]
            edits.sort(key=lambda e: e.start)
            text = src
            for e in reversed(edits):
                text = text[:e.start] + e.text.encode("utf-8") + text[e.end:]
            try:
                fn = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)
                          and n.name == kernel.name)
            except (SyntaxError, StopIteration):
                continue
            fold = scale_fold(fn)
            if not isinstance(fold, str) and len(fold.exps) == len(exps) \
                    and sorted(ast.unparse(s) for s in fold.scales) == \
                    sorted(mod.text(x) for _, x, _, _ in products):
                _, _, factor, side = products[0]
                out.append((kernel, edits, {"factor": mod.text(factor), "side": side}))
        return out

    def _module_calls(self, mod: PyModule, names: frozenset[str]) -> list[ast.Call]:
        return [c for k in mod.kernels() for c in mod.calls(k, names)]

    def _jit_span(self, mod: PyModule) -> tuple[int, int]:
        kernels = mod.kernels()
        return min(mod.stmt_span(k)[0] for k in kernels), max(mod.end(k) for k in kernels)

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = [make_site(self.name, ir, index, mod.span(c), True,
                         {"factor": mod.text(f), "side": side}) for c, _, f, side in self._folded(mod)]
        if self._module_calls(mod, EXP2_NAMES):
            for assign, _, factor, side in self._scales(mod):
                out.append(make_site(self.name, ir, index, self._jit_span(mod), True,
                                     {"factor": mod.text(factor), "side": side,
                                      "target": assign.targets[0].id}, mod.span(assign)))
        for kernel, _, _ in self._folded_scores(mod):
            out.append(make_site(self.name, ir, index, mod.span(kernel), True,
                                 {"kernel": kernel.name, "scores": True}, mod.span(kernel)))
        for kernel in mod.kernels():
            # the scale-folded form rewrites every exp of the kernels: the region is theirs;
            # an exp over a 2-D block (the probabilities of a tile) before one over a row vector
            calls = [c for c in mod.calls(kernel, EXP_NAMES) if len(c.args) == 1 and not c.keywords]
            ranks = _rank_env(kernel)
            calls.sort(key=lambda c: -_block_rank(c.args[0], ranks))
            out += [make_site(self.name, ir, index, self._jit_span(mod), False,
                              {"call_span": list(mod.span(c))}, mod.span(c)) for c in calls]
        return out

    def _deoptimize_scale(self, ir: KernelIR, mod: PyModule, site: Site) -> PassResult:
        target = site.detail["target"]
        found = next((f for f in self._scales(mod) if f[0].targets[0].id == target), None)
        if found is None:
            return Skipped("no log2(e)-folded scale at the site", {"target": target})
        if self._module_calls(mod, EXP_NAMES) or self._module_calls(
                mod, frozenset({"tl.log2", "tl.math.log2", "tl.log", "tl.math.log"})):
            return Skipped("the kernels also use exp/log: dropping the folded log2(e) would "
                           "change them", {"target": target})
        assign, x, factor, side = found
        edits = [ByteEdit(*mod.span(assign.value), mod.text(x))]
        for call in self._module_calls(mod, EXP2_NAMES):
            edits.append(ByteEdit(*mod.span(call.func), mod.text(call.func)[:-1]))
        return finish(ir, site, sorted(edits, key=lambda e: e.start), options={
            "fn": "", "factor": mod.text(factor), "side": side, "target": target})

    def _optimize_scale(self, ir: KernelIR, mod: PyModule, site: Site) -> PassResult:
        assign = next((n for k in mod.kernels() for n in ast.walk(k) if isinstance(n, ast.Assign)
                       and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                       and n.targets[0].id == self.target), None)
        if assign is None:  # the kernel names no scale: fold into what scales its scores
            return self._fold_scores(ir, mod, site)
        x = mod.text(assign.value) if isinstance(assign.value, (ast.Name, ast.Call, ast.Attribute)) \
            else f"({mod.text(assign.value)})"
        value = f"{x} * {self.factor}" if self.side == "right" else f"{self.factor} * {x}"
        edits = [ByteEdit(*mod.span(assign.value), value)]
        for call in self._module_calls(mod, EXP_NAMES):
            edits.append(ByteEdit(*mod.span(call.func), mod.text(call.func) + "2"))
        return finish(ir, site, sorted(edits, key=lambda e: e.start))

    def _fold_scores(self, ir: KernelIR, mod: PyModule, site: Site) -> PassResult:
        """The scale-folded form where no variable carries the scale: log2(e) multiplies each
        scalar the scores are scaled by (`tl.dot(q, k) * sm_scale`), and every exp of the
        softmax's log domain (`passes.triton.logdomain`) in the kernel of the site's exp
        becomes exp2."""
        call = next((c for k in mod.kernels() for c in mod.calls(k, EXP_NAMES)
                     if list(mod.span(c)) == list(site.detail.get("call_span", ()))), None)
        kernel = mod.kernel_of(call) if call is not None else None
        if kernel is None:
            return Skipped("the recorded scale variable is not assigned and no exp is at the "
                           "site", {"target": self.target, "site": site.anchor})
        fold = scale_fold(kernel)
        if isinstance(fold, str):
            return Skipped(f"the recorded scale variable is not assigned, and {fold}",
                           {"target": self.target, "kernel": kernel.name})
        if call not in fold.exps:
            return Skipped("the exp at the site does not take the softmax's scaled scores",
                           {"site": site.anchor})
        edits = [ByteEdit(*mod.span(s), f"({mod.text(s)} * {self.factor})" if self.side == "right"
                          else f"({self.factor} * {mod.text(s)})") for s in fold.scales]
        edits += [ByteEdit(*mod.span(c.func), mod.text(c.func) + "2") for c in fold.exps]
        return finish(ir, site, sorted(edits, key=lambda e: e.start))

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        if site.detail.get("target"):
            return self._deoptimize_scale(ir, mod, site)
        if site.detail.get("scores"):
            found = next(((e, how) for k, e, how in self._folded_scores(mod)
                          if k.name == site.detail.get("kernel")), None)
            if found is None:
                return Skipped("no log2(e)-folded score scale at the site", {"site": site.anchor})
            return finish(ir, site, found[0], options={"fn": "", **found[1], "target": "",
                                                       "scores": True})
        found = next((f for f in self._folded(mod) if mod.span(f[0]) == tuple(site.span)), None)
        if found is None:
            return Skipped("no exp2 with a folded log2(e) at the site", {"site": site.anchor})
        call, x, factor, side = found
        exp = "tl.math.exp" if callee(call).startswith("tl.math") else "tl.exp"
        return finish(ir, site, [ByteEdit(*mod.span(call), f"{exp}({mod.text(x)})")],
                      options={"fn": callee(call), "factor": mod.text(factor), "side": side})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        if self.target or self.scores:
            return self._optimize_scale(ir, mod, site)
        call = next((c for k in mod.kernels() for c in mod.calls(k, EXP_NAMES)
                     if list(mod.span(c)) == list(site.detail.get("call_span", ()))), None)
        if call is None or len(call.args) != 1:
            return Skipped("no exp at the site", {"site": site.anchor})
        results, skip = self.check(ctx, {"side": self.side})
        if skip:
            return skip
        x = call.args[0]
        tight = isinstance(x, (ast.Name, ast.Call, ast.Attribute, ast.Subscript, ast.Constant)) or (
            isinstance(x, ast.BinOp) and isinstance(x.op, (ast.Mult, ast.Div)) and self.side == "right")
        xt = mod.text(x) if tight else f"({mod.text(x)})"
        arg = f"{xt} * {self.factor}" if self.side == "right" else f"{self.factor} * {xt}"
        return finish(ir, site, [ByteEdit(*mod.span(call), f"{self.fn}({arg})")],
                      preconditions=results)
