"""Pointer arithmetic read as a 2-D box: base, per-axis offset, block and stride, and bounds.

A tile load written by hand (`tl.load(a + rows[:, None] * lda + ks[None, :], mask=...)`) is a
rectangular box of a row-major 2-D view: `base + (o0 + arange(b0))[:, None] * t0 +
(o1 + arange(b1))[None, :] * t1`, masked by `(index0 < s0) & (index1 < s1)`. People write it
in many ways: the index vectors named (`rm = pid_m * BM + tl.arange(0, BM)`) or inline, built
inside the loop (`rk = k0 + tl.arange(0, BK)`) or before it, the contiguous axis with an
explicit stride or none, a batch offset folded into the base (`a_base = a_ptr + b * sab`), the
bounds as named booleans (`row_ok = rows < M`, `row_ok[:, None]`). `box_of(load)` follows
names through their one assignment and reads the box from whichever form it finds; anything
else (a name assigned twice, a pointer advanced in the loop, a mask that is not a product of
per-axis bounds) is not a box, and the caller leaves the access alone.
"""
from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass

from passes.triton._py import PyModule, callee, is_cdiv

SCALAR_CALLS = frozenset({  # a cdiv is one too, under any name (`is_cdiv`)
    "tl.program_id", "tl.num_programs", "tl.minimum", "tl.maximum",
    "min", "max", "triton.language.program_id",
})
ARANGE = frozenset({"tl.arange", "triton.language.arange"})
MIN_MAX = frozenset({"tl.minimum", "tl.maximum", "triton.language.minimum",
                     "triton.language.maximum", "min", "max"})
# Loops whose counter counts (the iterations a loop has done are its counter over its step).
COUNTED = frozenset({"range", "tl.range", "triton.language.range", "tl.static_range",
                     "triton.language.static_range"})


@dataclass(frozen=True, slots=True)
class Index:
    """`sum(offsets) + tl.arange(0, block)`."""

    offsets: tuple[str, ...]
    block: str
    wrap: str = ""
    """`E` of `(offsets + tl.arange(0, block)) % E`: the index wraps at the bound E."""

    @property
    def offset(self) -> str:
        return " + ".join(self.offsets) if self.offsets else "0"


@dataclass(frozen=True, slots=True)
class Box:
    """A 2-D box access: `base` (text), per axis its index, stride text and bound text."""

    base: str
    index: tuple[Index, Index]
    stride: tuple[str, str]
    shape: tuple[str, str]
    names: frozenset[str]
    """Every name the base, strides and bounds read (where a descriptor of the box may go)."""


SCALAR_PAIRS = frozenset({"tl.swizzle2d", "triton.language.swizzle2d"})
HINTS = frozenset({"tl.multiple_of", "tl.max_contiguous", "triton.language.multiple_of",
                   "triton.language.max_contiguous"})


def _unhinted(node: ast.AST) -> ast.AST:
    """`node` without the compiler hints around it (`tl.max_contiguous(tl.multiple_of(x, 16),
    16)` -> `x`)."""
    while isinstance(node, ast.Call) and callee(node) in HINTS and node.args:
        node = node.args[0]
    return node


class Scope:
    """What the names of one kernel are bound to: parameters, loop variables, and names
    assigned exactly once (their value); a name bound any other way is opaque. With `region`
    (a loop), a name the loop's body assigns once, before any use of it in the loop, is read
    inside the loop as that value, whatever other loops assign it (a loop split in two, each
    half with its own `k = start + tl.arange(0, B)`)."""

    def __init__(self, mod: PyModule, kernel: ast.FunctionDef,
                 region: ast.stmt | None = None) -> None:
        self.mod = mod
        self.kernel = kernel
        self.params = {a.arg for a in kernel.args.args + kernel.args.kwonlyargs}
        counts: dict[str, int] = {}
        self.values: dict[str, ast.expr] = {}
        self.assigned_at: dict[str, ast.stmt] = {}
        self.loop_vars: set[str] = set()
        self.advances: dict[str, list[ast.AugAssign]] = {}
        self.pairs: dict[str, ast.Call] = {}
        """Names unpacked from a pair of program indices (`pm, pn = tl.swizzle2d(...)`)."""
        for node in ast.walk(kernel):
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) \
                    and isinstance(node.op, ast.Add):
                self.advances.setdefault(node.target.id, []).append(node)
            inner = _unhinted(node.value) if isinstance(node, ast.Assign) else None
            if inner is not None and inner is not node.value and isinstance(inner, ast.Name) \
                    and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and inner.id == node.targets[0].id:
                continue  # `x = tl.multiple_of(x, 16)`: the same values, with a compiler hint
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, (ast.For, ast.comprehension)):
                for t in ast.walk(node.target):
                    if isinstance(t, ast.Name):
                        self.loop_vars.add(t.id)
                        counts[t.id] = counts.get(t.id, 0) + 2
                continue
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Call) \
                    and callee(node.value) in SCALAR_PAIRS:
                # `pid_m, pid_n = tl.swizzle2d(i, j, ...)`: program indices, reordered
                self.pairs.update((t.id, node.value) for t in node.targets[0].elts
                                  if isinstance(t, ast.Name))
            for target in targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Name):
                        counts[t.id] = counts.get(t.id, 0) + 1
                        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                                and isinstance(node.targets[0], ast.Name):
                            self.values[t.id] = node.value
                            self.assigned_at[t.id] = node
        self.single = {n for n, c in counts.items() if c == 1 and n in self.values} - self.params
        self.pairs = {n: c for n, c in self.pairs.items() if counts.get(n) == 1 and n not in self.params}
        # a name assigned once and advanced (`p += step`) once: a pointer walked by a loop
        self.walked = {n for n, c in counts.items() if c == 2 and n in self.values
                       and len(self.advances.get(n, ())) == 1} - self.params
        self.continued: dict[str, ast.For] = {}
        """Pointers walked by a loop split in two (advanced once in each half): name -> the
        second half, whose counter starts where the first half's walk stopped."""
        for n, c in counts.items():
            if c == 3 and n in self.values and n not in self.params \
                    and len(self.advances.get(n, ())) == 2:
                second = self._second_half(n, counts)
                if second is not None:
                    self.walked.add(n)
                    self.continued[n] = second
        self.loop_vars -= self.params
        rebased = self._rebased(counts)
        self.params -= set(counts)  # a parameter the kernel rebinds (`a_ptr += ...`) is opaque
        # but one moved once by a scalar before any loop (`a_ptr += pid_b * stride_ab`, a
        # batch's base) is a scalar from there on: a loop reads it as it is then
        self.params |= {n for n, aug in rebased.items() if self.scalar(aug.value)}
        if region is not None:
            self._own_bindings(region)

    def _rebased(self, counts: Mapping[str, int]) -> dict[str, ast.AugAssign]:
        """Parameters bound once more, by an `+=` among the kernel's top statements that comes
        before its first loop: parameter -> that statement."""
        body = self.kernel.body
        first_loop = min((self.mod.start(n) for n in ast.walk(self.kernel)
                          if isinstance(n, (ast.For, ast.While))), default=None)
        return {n.target.id: n for n in body
                if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add)
                and isinstance(n.target, ast.Name) and n.target.id in self.params
                and counts.get(n.target.id) == 1
                and (first_loop is None or self.mod.start(n) < first_loop)}

    def _second_half(self, name: str, counts: Mapping[str, int]) -> ast.For | None:
        """The second of two sibling counted loops that each advance `name` once per iteration
        (a direct statement of its body), after `name`'s assignment, where the second loop's
        counter starts at the first one's stop and that stop is where the first loop's walk
        ends (`_split_walk`; the names the stop reads bound once at most, so both ranges read
        one value): the pointer there has walked as far as the counter says, as in one loop
        from 0. None for any other pair."""
        advances = self.advances[name]
        loops = [self.mod.parents.get(a) for a in advances]
        if any(not isinstance(lp, ast.For) or a not in lp.body for lp, a in zip(loops, advances)):
            return None
        first, second = sorted(loops, key=self.mod.start)
        holder = self.mod.parents.get(first)
        if first is second or holder is not self.mod.parents.get(second):
            return None
        stmts = next((body for body in (getattr(holder, f, None) for f in ("body", "orelse"))
                      if isinstance(body, list) and first in body and second in body), None)
        assign = self.assigned_at.get(name)
        if stmts is None or assign not in stmts or stmts.index(assign) > stmts.index(first):
            return None
        parts = _range_parts(first)
        if parts is None or any(counts.get(n.id, 0) > 1 for n in ast.walk(parts[1])
                                if isinstance(n, ast.Name)):
            return None
        return second if _split_walk(self, first, second) else None

    def _own_bindings(self, region: ast.stmt) -> None:
        """The names `region`'s body assigns once, before their first use in it (class
        docstring), read as that value."""
        for stmt in getattr(region, "body", ()):
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)):
                continue
            name = stmt.targets[0].id
            if name in self.single or name in self.params or name in self.loop_vars:
                continue
            binds = [n for n in ast.walk(region) if isinstance(n, (ast.Assign, ast.AugAssign,
                                                                   ast.AnnAssign, ast.For))
                     and any(isinstance(t, ast.Name) and t.id == name
                             for target in (n.targets if isinstance(n, ast.Assign)
                                            else [n.target]) for t in ast.walk(target))]
            early = any(isinstance(u, ast.Name) and u.id == name
                        and self.mod.start(u) < self.mod.start(stmt) for u in ast.walk(region))
            if binds == [stmt] and not early:
                self.values[name], self.assigned_at[name] = stmt.value, stmt
                self.single.add(name)

    def bound_before(self, at: int) -> set[str]:
        """Names assigned (once) by a statement that ends at or before byte `at`."""
        return {n for n, stmt in self.assigned_at.items() if self.mod.end(stmt) <= at}

    def value(self, node: ast.AST) -> ast.expr | None:
        if isinstance(node, ast.Name) and node.id in self.single:
            return self.values[node.id]
        return None

    def scalar(self, node: ast.AST, depth: int = 0) -> bool:
        """A value without a block shape: literals, parameters, loop variables, program ids and
        arithmetic of them (through names assigned once)."""
        if depth > 40:
            return False
        if isinstance(node, ast.Constant):
            return isinstance(node.value, (int, float))
        if isinstance(node, ast.Name):
            if node.id in self.params or node.id in self.loop_vars:
                return True
            if node.id in self.pairs:  # scalar when the call's arguments are
                return all(self.scalar(a, depth + 1) for a in self.pairs[node.id].args)
            v = self.value(node)
            return v is not None and self.scalar(v, depth + 1)
        if isinstance(node, ast.BinOp):
            return self.scalar(node.left, depth + 1) and self.scalar(node.right, depth + 1)
        if isinstance(node, ast.UnaryOp):
            return self.scalar(node.operand, depth + 1)
        if isinstance(node, ast.Call) and (callee(node) in SCALAR_CALLS or is_cdiv(node)):
            return all(self.scalar(a, depth + 1) for a in node.args)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "to":  # a scalar cast (`pid.to(tl.int64)`)
            return self.scalar(node.func.value, depth + 1)
        return False

    def index(self, node: ast.AST, depth: int = 0) -> Index | None:
        """`node` as `offsets + tl.arange(0, block)`, or None."""
        if depth > 40:
            return None
        if isinstance(node, ast.Call) and callee(node) in ARANGE and len(node.args) == 2 \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == 0:
            return Index((), self.mod.text(node.args[1]))
        if isinstance(node, ast.Name):
            v = self.value(node)
            return self.index(v, depth + 1) if v is not None else None
        if isinstance(node, ast.Call) and (_unhinted(node) is not node or (
                isinstance(node.func, ast.Attribute) and node.func.attr == "to")):
            # a compiler hint (`tl.multiple_of`, `tl.max_contiguous`) or a cast of the index
            # (`.to(tl.int64)`) addresses the same elements
            inner = _unhinted(node) if _unhinted(node) is not node else node.func.value
            return self.index(inner, depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            for vec, off in ((node.left, node.right), (node.right, node.left)):
                got = self.index(vec, depth + 1)
                if got is not None and not got.wrap and self.scalar(off):
                    return Index(got.offsets + (self.mod.text(off),), got.block)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and self.scalar(node.right):
            got = self.index(node.left, depth + 1)
            if got is not None and not got.wrap:
                return Index(got.offsets, got.block, self.mod.text(node.right))
        return None

    def names_of(self, node: ast.AST) -> set[str]:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def broadcast(node: ast.AST) -> tuple[int, ast.expr] | None:
    """(axis, inner) of `inner[:, None]` (axis 0) or `inner[None, :]` (axis 1)."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple)
            and len(node.slice.elts) == 2):
        return None
    a, b = node.slice.elts
    none_a = isinstance(a, ast.Constant) and a.value is None
    none_b = isinstance(b, ast.Constant) and b.value is None
    if isinstance(a, ast.Slice) and none_b:
        return 0, node.value
    if none_a and isinstance(b, ast.Slice):
        return 1, node.value
    return None


def broadcast_times_stride(term: ast.expr, scope: Scope
                           ) -> tuple[tuple[int, ast.expr], ast.expr | None] | None:
    """A pointer term read as one axis's broadcast index times a stride: ((axis, inner), the
    stride, None for a bare index) for `inner[:, None]`, `inner[None, :] * s` or `s * inner[..]`
    with `s` a scalar of `scope`; None for any other term."""
    got = broadcast(term)
    if got is not None:
        return got, None
    if isinstance(term, ast.BinOp) and isinstance(term.op, ast.Mult):
        for vec, s in ((term.left, term.right), (term.right, term.left)):
            if broadcast(vec) is not None and scope.scalar(s):
                return broadcast(vec), s
    return None


def _terms(scope: Scope, node: ast.AST, walked: list[str] | None = None,
           depth: int = 0) -> list[ast.expr] | None:
    """The summands of a pointer expression, names with a block shape expanded; a pointer
    the loop walks (`walked` collects its name) is expanded to its value before the loop."""
    if depth > 40:
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = _terms(scope, node.left, walked, depth + 1)
        right = _terms(scope, node.right, walked, depth + 1)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Name) and not scope.scalar(node):
        v = scope.value(node)
        if v is None and walked is not None and node.id in scope.walked:
            walked.append(node.id)
            v = scope.values[node.id]
        return _terms(scope, v, walked, depth + 1) if v is not None else None
    return [node]


def _loop_count(scope: Scope, loop: ast.stmt, step: str, continued: bool = False) -> str | None:
    """`count * step` as text, `count` the iterations a `for` loop has done, or None.
    `continued`: the loop is the second half of a split walk (`Scope.continued`), whose
    iterations continue the first half's: counted as in one loop from 0."""
    if not (isinstance(loop, ast.For) and isinstance(loop.target, ast.Name)
            and isinstance(loop.iter, ast.Call) and callee(loop.iter) in COUNTED):
        return None
    args = loop.iter.args
    start = args[0] if len(args) >= 2 else None
    stride = args[2] if len(args) >= 3 else None
    k = loop.target.id
    if start is not None and not continued and not (isinstance(start, ast.Constant) and start.value == 0):
        return None
    if stride is None or (isinstance(stride, ast.Constant) and stride.value == 1):
        return f"{k} * {step}" if step != "1" else k
    if ast.dump(ast.parse(scope.mod.text(stride), mode="eval")) == ast.dump(ast.parse(step, mode="eval")):
        return k
    return None


def _range_parts(loop: ast.For) -> tuple[ast.expr | None, ast.expr, ast.expr | None] | None:
    """(start, stop, step) of a counted loop's range (None where not written), or None."""
    if not (isinstance(loop.target, ast.Name) and isinstance(loop.iter, ast.Call)
            and callee(loop.iter) in COUNTED) or not 1 <= len(loop.iter.args) <= 3:
        return None
    args = loop.iter.args
    if len(args) == 1:
        return None, args[0], None
    return args[0], args[1], args[2] if len(args) == 3 else None


def _split_walk(scope: Scope, first: ast.For, second: ast.For) -> bool:
    """`range(0, e, s)` then `range(e, ..., s)`: the second loop's counter starts at the first
    one's stop, and the first loop stops exactly there (s is 1, or e a multiple of s, `_multiple`),
    so a pointer advanced once per iteration of both has, at the second loop's counter k, walked
    k / s steps, as in one loop from 0. The counter indexes a tensor, so e is taken to be >= 0
    (a first half that runs no iteration stops at 0)."""
    one, two = _range_parts(first), _range_parts(second)
    if one is None or two is None or two[0] is None or first.target.id != second.target.id:
        return False
    text = scope.mod.text
    start, stop, step = one
    if start is not None and not _same(text(start), "0"):
        return False
    if not _same(text(two[0]), text(stop)):
        return False
    s1, s2 = (text(s) if s is not None else "1" for s in (step, two[2]))
    return _same(s1, s2) and (_same(s1, "1") or _multiple(scope, stop, s1))


def _multiple(scope: Scope, node: ast.AST, step: str, depth: int = 0) -> bool:
    """Whether the integer `node` is a multiple of `step` as written: a product with `step` as
    a factor (`E // s * s`), 0, a sum, difference, minimum or maximum of such, through names
    assigned once."""
    if depth > 20:
        return False
    if isinstance(node, ast.Constant):
        return node.value == 0
    if isinstance(node, ast.Name):
        value = scope.value(node)
        return value is not None and _multiple(scope, value, step, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _same(scope.mod.text(node.left), step) or _same(scope.mod.text(node.right), step)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return _multiple(scope, node.left, step, depth + 1) and \
            _multiple(scope, node.right, step, depth + 1)
    if isinstance(node, ast.Call) and callee(node) in MIN_MAX and len(node.args) == 2:
        return all(_multiple(scope, a, step, depth + 1) for a in node.args)
    return False


def _walked_extent(scope: Scope, loop: ast.stmt | None, idx: Index) -> str | None:
    """The extent E over which a counted loop walks an index it does not mask: `v * B +
    tl.arange(0, B)` over `range(E // B)` (never past E), or `v + tl.arange(0, B)` over
    `range(0, E, B)` (past E only where E is not a multiple of B, where the unmasked load read
    beyond its tensor already); None for any other index or loop."""
    if not (isinstance(loop, ast.For) and isinstance(loop.target, ast.Name)
            and isinstance(loop.iter, ast.Call) and callee(loop.iter) in COUNTED
            and len(idx.offsets) == 1 and not idx.wrap) or loop.iter.keywords:
        return None
    args, v, text = loop.iter.args, loop.target.id, scope.mod.text
    if not args or len(args) > 3 or (len(args) >= 2 and not _same(text(args[0]), "0")):
        return None
    stop = args[1] if len(args) >= 2 else args[0]
    if isinstance(stop, ast.Name) and scope.value(stop) is not None:
        stop = scope.value(stop)  # the count bound to a name first (`whole = K // BK`)
    offset = ast.parse(idx.offsets[0], mode="eval").body
    if len(args) < 3 or _same(text(args[2]), "1"):
        factors = {ast.unparse(offset.left), ast.unparse(offset.right)} \
            if isinstance(offset, ast.BinOp) and isinstance(offset.op, ast.Mult) else set()
        whole = isinstance(stop, ast.BinOp) and isinstance(stop.op, ast.FloorDiv) \
            and _same(text(stop.right), idx.block)
        return text(stop.left) if whole and factors == {v, ast.unparse(ast.parse(idx.block))} \
            else None
    same_step = _same(text(args[2]), idx.block)
    return text(stop) if same_step and isinstance(offset, ast.Name) and offset.id == v else None


def _same(a: str, b: str) -> bool:
    try:
        return ast.dump(ast.parse(a, mode="eval")) == ast.dump(ast.parse(b, mode="eval"))
    except SyntaxError:
        return False


def _bounds(scope: Scope, node: ast.AST, depth: int = 0) -> list[tuple[int, Index, ast.expr]] | None:
    """(axis, index, bound) of each factor of a mask `c0 & c1 & ...`, or None."""
    if depth > 40:
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd):
        left, right = _bounds(scope, node.left, depth + 1), _bounds(scope, node.right, depth + 1)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Name):
        v = scope.value(node)
        return _bounds(scope, v, depth + 1) if v is not None else None
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Lt) \
            and scope.scalar(node.comparators[0]):
        got = _offset_broadcast(scope, node.left)
        if got is None:
            return None
        idx = scope.index(got[1])
        return None if idx is None else [(got[0], idx, node.comparators[0])]
    got = broadcast(node)  # `ok[:, None]` with `ok = rows < M` (a 1-D bound broadcast)
    if got is not None:
        inner = got[1]
        v = scope.value(inner) if isinstance(inner, ast.Name) else inner
        if isinstance(v, ast.Compare) and len(v.ops) == 1 and isinstance(v.ops[0], ast.Lt) \
                and scope.scalar(v.comparators[0]):
            idx = scope.index(v.left)
            return None if idx is None else [(got[0], idx, v.comparators[0])]
    return None


def _offset_broadcast(scope: Scope, node: ast.AST) -> tuple[int, ast.expr] | None:
    """`broadcast(node)`, or for a scalar added to a broadcast index (`k0 + d[None, :]`, the
    same elements as `(k0 + d)[None, :]`) the axis and that sum."""
    got = broadcast(node)
    if got is not None or not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
        return got
    for vec, off in ((node.left, node.right), (node.right, node.left)):
        inner = broadcast(vec)
        if inner is not None and scope.scalar(off):
            return inner[0], ast.BinOp(left=inner[1], op=ast.Add(), right=off)
    return None


def box_of(scope: Scope, ptr: ast.AST, mask: ast.AST | None, loop: ast.stmt | None = None,
           at: ast.AST | None = None) -> Box | str:
    """The box `ptr` / `mask` read (at node `at` inside `loop`), or why they are not one.

    A pointer the loop advances once per iteration (`p += step * stride`, after the access) has
    moved `iterations * step` along the axis of that stride; a bound written relative to it
    (`k_idx < K - k * STEP`) is the absolute bound K. An index that wraps at its bound
    (`(o + tl.arange(0, B)) % M`, no mask on that axis) reads the box up to M; an unmasked axis
    indexed from 0 (`tl.arange(0, D)`) reads [0, D) and takes D as its bound."""
    mod = scope.mod
    walked: list[str] = []
    terms = _terms(scope, ptr, walked)
    if terms is None:
        return "the pointer is built from a name assigned more than once"
    base: list[ast.expr] = []
    axes: dict[int, tuple[Index, str, ast.expr | None]] = {}
    for term in terms:
        if scope.scalar(term):
            base.append(term)
            continue
        found = broadcast_times_stride(term, scope)
        if found is None:
            return f"a pointer term is not a broadcast index times a stride: {mod.text(term)}"
        got, stride = found
        idx = scope.index(got[1])
        if idx is None or got[0] in axes:
            return f"a pointer term has no `offset + tl.arange` index: {mod.text(term)}"
        axes[got[0]] = (idx, mod.text(stride) if stride is not None else "1", stride)
    if set(axes) != {0, 1} or not base:
        return "the pointer is not a base plus one index per axis"
    moved: dict[int, str] = {}  # axis -> how far the loop has walked the pointer along it
    for name in walked:
        advance = next((a for a in scope.advances[name] if a in getattr(loop, "body", ())), None)
        if loop is None or advance is None or at is None or mod.start(at) > mod.start(advance):
            return f"{name} is advanced elsewhere than once per iteration after the access"
        step = None
        for axis, (_, stride, _) in axes.items():
            inc = advance.value
            if stride == "1" and scope.scalar(inc):
                step = (axis, mod.text(inc))
            elif isinstance(inc, ast.BinOp) and isinstance(inc.op, ast.Mult):
                for s_node, t_node in ((inc.left, inc.right), (inc.right, inc.left)):
                    if _same(mod.text(t_node), stride) and scope.scalar(s_node):
                        step = (axis, mod.text(s_node))
            if step is not None:
                break
        if step is None or step[0] in moved:
            return f"the advance of {name} is not a step along one axis's stride"
        count = _loop_count(scope, loop, step[1], continued=scope.continued.get(name) is loop)
        if count is None:
            return f"the loop that advances {name} is not a counted range from 0"
        moved[step[0]] = count
    axes = {a: (Index(i.offsets + ((moved[a],) if a in moved else ()), i.block, i.wrap), t, n)
            for a, (i, t, n) in axes.items()}
    bounds = _bounds(scope, mask) if mask is not None else []
    if bounds is None:
        return "the mask is not a product of per-axis bounds `index < bound`"
    shape: dict[int, str] = {}
    bound_nodes: list[ast.AST] = []
    for axis, idx, bound in bounds:
        pointer_idx = axes[axis][0]
        text = mod.text(bound)
        if axis in shape:
            return "the mask bounds an axis twice"
        if idx != pointer_idx:
            rel = scope.value(bound) if isinstance(bound, ast.Name) else bound
            unmoved = Index(pointer_idx.offsets[:-1], pointer_idx.block, pointer_idx.wrap)
            if not (axis in moved and idx == unmoved and isinstance(rel, ast.BinOp)
                    and isinstance(rel.op, ast.Sub) and _same(mod.text(rel.right), moved[axis])
                    and scope.scalar(rel.left)):
                return "the mask bounds another index than the pointer's"
            bound, text = rel.left, mod.text(rel.left)
        shape[axis] = text
        bound_nodes.append(bound)
    for axis, (idx, _, _) in axes.items():
        if axis not in shape and idx.wrap:
            shape[axis] = idx.wrap
            bound_nodes.append(ast.parse(idx.wrap, mode="eval").body)
        elif axis not in shape and not idx.offsets and mask is not None:
            # unmasked, from 0: the access reads exactly [0, block) on this axis (a head
            # dimension the tile spans whole), so the block is a bound that changes nothing
            shape[axis] = idx.block
            bound_nodes.append(ast.parse(idx.block, mode="eval").body)
        elif axis not in shape and mask is not None and _walked_extent(scope, loop, idx):
            # unmasked, walked by the loop's own counter: the loop reads [0, extent) on it
            shape[axis] = _walked_extent(scope, loop, idx)
            bound_nodes.append(ast.parse(shape[axis], mode="eval").body)
    if set(shape) != {0, 1}:
        return "the mask does not bound both axes" if mask is not None else \
            "the access has no mask: the bounds of the box are not written anywhere"
    names: set[str] = set()
    for node in [*base, *(s for _, _, s in axes.values() if s is not None), *bound_nodes]:
        names |= scope.names_of(node)
    return Box(" + ".join(mod.text(b) for b in base), (axes[0][0], axes[1][0]),
               (axes[0][1], axes[1][1]), (shape[0], shape[1]), frozenset(names))
