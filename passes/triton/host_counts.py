"""What a host count expression means, told by evaluating it: whether a launch grid's element
is the number of blocks of a tile over one size, rounded up (`ceil(n / T)`) or down
(`floor(n / T)`), whatever way it is written (`triton.cdiv(n, 256)`, `(n + 255) // 256`,
`-(n // -256)`, `len(range(0, n, 256))`, `q + (r > 0)` after `q, r = divmod(n, 256)`,
`triton.cdiv(n, 2 * 128)`, ...). The expression is read as a function of its one size (the
part of it that reads host values: a name, `x.numel()`, `M * N`) and evaluated over many sizes
with the tile at its written value, or at several values where the tile is read by name; it is
compared with the block counts there. Nothing is matched by how it is written, so any spelling
of a block count is recognised and anything else (`n // 256 + (n % 128 > 0)`, `(n + 32) //
32`) is not. Used by `roles` to write a host grid's counts in one form before a sweep rewrites
them, and to refuse a tile whose count is not one."""

from __future__ import annotations

import ast
import copy
import enum
import math
from collections.abc import Callable, Collection, Iterable

from passes.triton._py import callee, is_cdiv

# `follow(name)`: the expression a host name is bound to (an element of a tuple unpacked from
# a call as `call[i]`), or None where it is not followed.
Follow = Callable[[ast.Name], ast.AST | None]

_DEPTH = 6
_MAX_PERIOD = 4096
# tile values tried where the tile is a name or a meta-parameter read, besides its own
_TRIAL_BLOCKS = (1, 2, 3, 16, 48, 64, 100, 128, 256, 1024)


class Rounding(enum.Enum):
    """How an expression counts blocks of a tile over its size."""

    CEIL = "ceil"  # exactly ceil(size / tile): every element covered, no block idle
    FLOOR = "floor"  # exactly floor(size / tile): whole blocks alone
    OF_CEIL = "of-ceil"  # a function of ceil(size / tile) (`2 * cdiv(n, 256)`)
    OTHER = "other"  # not a function of the tile's block count (`n // 256 + (n % 128 > 0)`)


class _Unknown(Exception):
    pass


_COUNT_CALLS = frozenset({"int", "bool", "abs", "min", "max", "len", "range", "divmod",
                          "math.ceil", "math.floor", "math.trunc", "ceil", "floor"})


def _known_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or node.keywords:
        return False
    name = callee(node)
    return name in _COUNT_CALLS or is_cdiv(node)


def _tuple_read(node: ast.AST) -> bool:
    """`divmod(a, b)[0]`, `(a, b)[1]`: an element of a tuple the evaluator computes."""
    return (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, int)
            and (isinstance(node.value, ast.Tuple) or _known_call(node.value)))


# Conversions of a size: `int(t.max())` is a size itself, whose type the count keeps.
_CONVERSIONS = frozenset({"int", "bool", "abs"})


def _counting(node: ast.AST) -> bool:
    """A part of a count: a division, a remainder, a shift, a comparison, a known call that
    is no conversion (`cdiv`, `ceil`, `divmod`, `len(range(...))`, `min`), a tuple's element."""
    return (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod, ast.Div,
                                                                 ast.RShift))
            or isinstance(node, ast.Compare) or _tuple_read(node)
            or _known_call(node) and callee(node) not in _CONVERSIONS)


def _bound(node: ast.Name, follow: Follow | None, depth: int) -> ast.AST | None:
    """What `node` is followed to: its bound value where that computes something of a count
    (`_counting`); a name bound to a size alone (`n = x.numel()`, `S = M * N`, `longest =
    int(t.max())`) is a size itself."""
    bound = follow(node) if follow is not None and depth < _DEPTH else None
    if bound is None or not any(
            _counting(n) or isinstance(n, ast.Name) and n is not node
            and _bound(n, follow, depth + 1) is not None for n in ast.walk(bound)):
        return None
    return bound


def _size_leaf(node: ast.AST, follow: Follow | None, depth: int) -> bool:
    """A conversion of a size (`int(t.max())`): nothing in it counts, so it is a size whole."""
    return (_known_call(node) and callee(node) in _CONVERSIONS and not any(
        _counting(n) or isinstance(n, ast.Name) and _bound(n, follow, depth) is not None
        for a in node.args for n in ast.walk(a)))  # type: ignore[attr-defined]


def _children(node: ast.AST, follow: Follow | None, depth: int) -> list[ast.AST] | None:
    """The sub-expressions `node`'s value is computed from, or None where it is a leaf the
    evaluator cannot compute (a host value: the expression's size, or part of it)."""
    if isinstance(node, ast.Constant):
        return []
    if isinstance(node, ast.Name):
        bound = _bound(node, follow, depth)
        return [bound] if bound is not None else None
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    if isinstance(node, ast.Compare):
        return [node.left, *node.comparators]
    if isinstance(node, ast.BoolOp):
        return list(node.values)
    if isinstance(node, ast.IfExp):
        return [node.test, node.body, node.orelse]
    if _known_call(node):
        return None if _size_leaf(node, follow, depth) else list(node.args)  # type: ignore[attr-defined]
    if _tuple_read(node):
        return [node.value]  # type: ignore[attr-defined]
    if isinstance(node, ast.Tuple):
        return list(node.elts)
    return None


def _walk(node: ast.AST, follow: Follow | None, depth: int = 0) -> Iterable[tuple[ast.AST, int]]:
    """Every sub-expression of `node` with names followed, each with its depth of bindings."""
    yield node, depth
    for child in _children(node, follow, depth) or ():
        deeper = depth + 1 if isinstance(node, ast.Name) else depth
        yield from _walk(child, follow, deeper)


def _leaves(node: ast.AST, follow: Follow | None, fixed: Collection[str]) -> list[ast.AST]:
    """The host values `node` reads (its leaves the evaluator cannot compute), but those whose
    `ast.dump` is in `fixed` (given a value) and what lies under them."""
    out: list[ast.AST] = []
    todo: list[tuple[ast.AST, int]] = [(node, 0)]
    while todo:
        sub, depth = todo.pop()
        if ast.dump(sub) in fixed:
            continue
        children = _children(sub, follow, depth)
        if children is None:
            out.append(sub)
            continue
        deeper = depth + 1 if isinstance(sub, ast.Name) else depth
        todo += [(c, deeper) for c in children]
    return out


_CALLS: dict[str, Callable[..., object]] = {
    "cdiv": lambda a, b: (a + b - 1) // b,  # triton.cdiv
    "len": len, "range": range, "divmod": divmod, "min": min, "max": max, "int": int,
    "bool": bool, "abs": abs, "ceil": math.ceil, "floor": math.floor, "trunc": math.trunc,
}
_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Div, ast.LShift, ast.RShift,
        ast.USub, ast.UAdd, ast.Not, ast.Gt, ast.GtE, ast.Lt, ast.LtE, ast.Eq, ast.NotEq,
        ast.And, ast.Or)


class _Inliner(ast.NodeTransformer):
    """`node` as an expression of the variables of `values` (dump -> variable name) alone:
    names followed to their values, each known call named by its `_CALLS` key; `_Unknown`
    where anything else is read."""

    def __init__(self, values: dict[str, str], follow: Follow | None, depth: int = 0) -> None:
        self.values, self.follow, self.depth = values, follow, depth

    def visit(self, node: ast.AST) -> ast.AST:
        shown = ast.dump(node)
        if shown in self.values:
            return ast.Name(self.values[shown], ast.Load())
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (int, float)):
                return node
            raise _Unknown
        if isinstance(node, ast.Name):
            bound = _bound(node, self.follow, self.depth)
            if bound is None:
                raise _Unknown
            # a copy: the bound value is the module's own tree, shared by every reader
            return _Inliner(self.values, self.follow, self.depth + 1).visit(copy.deepcopy(bound))
        if isinstance(node, ast.Call):
            if not _known_call(node) or _size_leaf(node, self.follow, self.depth):
                raise _Unknown
            key = callee(node).split(".")[-1]
            return ast.Call(ast.Name(key, ast.Load()), [self.visit(a) for a in node.args], [])
        if isinstance(node, ast.Subscript):
            if not _tuple_read(node):
                raise _Unknown
            return ast.Subscript(self.visit(node.value), node.slice, ast.Load())
        if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp,
                             ast.Tuple, ast.expr_context, *_OPS)):
            return self.generic_visit(node)
        raise _Unknown  # `**`, `&`, `is`, a lambda, ...


def _function(expr: ast.AST, values: dict[str, str], follow: Follow | None
              ) -> Callable[..., object] | None:
    """`expr` as a Python function of the variables of `values`, in their order; None where
    it reads anything else (`_Inliner`)."""
    try:
        body = _Inliner(values, follow).visit(copy.deepcopy(expr))
    except (_Unknown, RecursionError):
        return None
    lam = ast.Expression(ast.Lambda(
        ast.arguments([], [ast.arg(v) for v in values.values()], None, [], [], None, []), body))
    ast.fix_missing_locations(lam)
    return eval(compile(lam, "<count>", "eval"), {"__builtins__": {}, **_CALLS})  # noqa: S307


def constant(node: ast.AST, follow: Follow | None = None) -> int | None:
    """The integer `node` computes from literals alone (`2 * 128`); None for anything else."""
    fn = _function(node, {}, follow)
    try:
        value = fn() if fn is not None else None
    except (ArithmeticError, TypeError, ValueError, OverflowError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def size_of(expr: ast.AST, follow: Follow | None = None, fixed: Collection[str] = ()
            ) -> ast.AST | None:
    """The one size `expr` reads: the sub-expression (names followed) that every host value it
    reads lies in a copy of (`n` of `-(n // -256)`, `M * N` of `(M * N + 255) // 256`), the
    smallest such; None where it reads none or several apart (`B * cdiv(S, 64)`). Those whose
    dump is in `fixed` (a tile's copy) do not count."""
    leaves = _leaves(expr, follow, fixed)
    if not leaves or any(leaf is expr for leaf in leaves):
        return None
    shown = {ast.dump(leaf) for leaf in leaves}
    if len(shown) == 1:
        return leaves[0]
    # a size is arithmetic of host values: no count is computed inside it
    candidates = [sub for sub, _ in _walk(expr, follow)
                  if isinstance(sub, ast.BinOp) and isinstance(sub.op, (ast.Add, ast.Sub, ast.Mult))
                  and ast.dump(sub) not in fixed and not any(_counting(n) for n in ast.walk(sub))]
    for sub in sorted(candidates, key=lambda s: sum(1 for _ in ast.walk(s))):
        if not _leaves(expr, follow, {*fixed, ast.dump(sub)}) \
                and {ast.dump(n) for n in ast.walk(sub)} >= shown:
            return sub
    return None


def _samples(block: int, constants: Iterable[int]) -> list[int]:
    """Sizes to compare at: every size up to three periods of the expression's moduli (all
    of them up to a bound), around multiples of each constant and of the block, and large."""
    moduli = {abs(c) for c in constants if c and abs(c) > 1} | {block}
    period = 1
    for m in moduli:
        period = math.lcm(period, m)
        if period > _MAX_PERIOD:
            break
    out = set(range(0, min(3 * period, 3 * _MAX_PERIOD) + 2))
    for m in moduli:
        for k in (1, 2, 3, 5, 7, 64, 1000, 4099):
            out.update(m * k + d for d in (-2, -1, 0, 1, 2))
    out.update(b + d for b in (10**6, 2**24, 2**31, 3 * 2**30) for d in range(-3, 4))
    return sorted(s for s in out if s >= 0)


def rounding(expr: ast.AST, size: ast.AST, block: int | ast.AST,
             follow: Follow | None = None, written: int | None = None) -> Rounding | None:
    """How `expr` counts blocks of `block` over `size` (`size_of`): a constant tile value, or
    the expression that reads the tile (a host name, `meta["BLOCK"]`), tried at `written` and
    at several other values. None where `expr` cannot be evaluated (it reads something other
    than the size and the tile) or counts nothing of the size."""
    shown = ast.dump(size)
    tile = None if isinstance(block, int) else ast.dump(block)
    blocks = [block] if isinstance(block, int) else \
        sorted({*_TRIAL_BLOCKS, *([written] if written else [])})
    constants = [c.value for c, _ in _walk(expr, follow)
                 if isinstance(c, ast.Constant) and isinstance(c.value, int)]
    fn = _function(expr, {shown: "size", **({tile: "tile"} if tile else {})}, follow)
    if fn is None:
        return None
    kinds = {Rounding.CEIL, Rounding.FLOOR, Rounding.OF_CEIL}
    for b in blocks:
        if b <= 0:
            return None
        seen: dict[int, object] = {}
        for s in _samples(b, constants):
            try:
                got = fn(s, b) if tile else fn(s)
            except (TypeError, ValueError, OverflowError):
                return None
            except ArithmeticError:
                got = None
            ceil, floor = -(-s // b), s // b
            if got != ceil:
                kinds.discard(Rounding.CEIL)
            if got != floor:
                kinds.discard(Rounding.FLOOR)
            if seen.setdefault(ceil, got) != got:
                kinds.discard(Rounding.OF_CEIL)
            if not kinds:
                return Rounding.OTHER
    for kind in (Rounding.CEIL, Rounding.FLOOR, Rounding.OF_CEIL):
        if kind in kinds:
            return kind
    return Rounding.OTHER


def counts_blocks(expr: ast.AST, blocks: Collection[int], follow: Follow | None = None
                  ) -> tuple[ast.AST, int, Rounding] | None:
    """(size, block, rounding) where `expr` is exactly the ceil or floor count of one of
    `blocks` (constant tile values) over its one size; None otherwise."""
    size = size_of(expr, follow)
    if size is None:
        return None
    for block in sorted(blocks):
        kind = rounding(expr, size, block, follow)
        if kind in (Rounding.CEIL, Rounding.FLOOR):
            return size, block, kind
    return None
