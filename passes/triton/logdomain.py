"""The softmax's log domain of a Triton function, read from its AST and dataflow: the scaled
scores, what masks and maxima make of them, and the exponentials that take them.

A value is in the log domain when scaling every such value by one positive factor scales it
too: the scores (a product of an expression and a scalar *scale*, `tl.dot(q, k) * sm_scale`),
sums and differences of log-domain values, their maxima and minima (`tl.max`, `tl.maximum`),
their products with values outside the domain, `tl.where` between them (or a drop: -inf, zero,
a large negative literal) on a condition the factor leaves alone, and the constants a running
maximum starts from. Where every read of such a value is another of them, an exponential's
argument or a comparison between them, multiplying each scale by log2(e) and turning each of
those `exp` into `exp2` computes the same function with one multiply fewer per score:
`exp2(x * log2(e)) == exp(x)`, and comparisons and maxima commute with a positive factor.
Names are followed flow-insensitively (a name is in the domain when every binding of it is),
which a kernel's reassignments (`s = tl.where(mask, s, -inf)`) keep.
"""
from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass

from passes.triton._py import callee, names_in
from passes.triton.masking import WHERE, strong_drop

EXPS = frozenset({"tl.exp", "tl.math.exp", "triton.language.exp"})
_REDUCE = frozenset({"tl.max", "tl.min", "triton.language.max", "triton.language.min"})
_PAIRWISE = frozenset({"tl.maximum", "tl.minimum", "triton.language.maximum",
                       "triton.language.minimum"})
_ZEROS = frozenset({"tl.zeros", "triton.language.zeros"})
_FULL = frozenset({"tl.full", "triton.language.full"})


@dataclass(frozen=True, slots=True)
class ScaleFold:
    """Where log2(e) goes: the scale factors of the scores (each a scalar to multiply by it)
    and the exponentials that take log-domain arguments (each to become `exp2`)."""

    scales: tuple[ast.expr, ...]
    exps: tuple[ast.Call, ...]


def _parents(fn: ast.FunctionDef) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)}


_ARITH = (ast.Add, ast.Sub, ast.Mult, ast.Div)


def _stored(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _params(fn: ast.FunctionDef) -> set[str]:
    return {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}


def _bindings(fn: ast.FunctionDef, parents: Mapping[ast.AST, ast.AST]) -> dict[str, list[ast.stmt]]:
    """Name -> its `x = ...` / `x op= ...` statements, for the names bound in no other way (not a
    parameter, a loop target, a tuple's element, a `with` target)."""
    plain: dict[str, list[ast.stmt]] = {}
    opaque = _params(fn)
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)):
            continue
        stmt = parents.get(node)
        if isinstance(stmt, ast.Assign) and node in stmt.targets \
                or isinstance(stmt, ast.AugAssign) and node is stmt.target:
            plain.setdefault(node.id, []).append(stmt)
        else:
            opaque.add(node.id)
    return {k: v for k, v in plain.items() if k not in opaque}


class _Domain:
    """The log domain of one function (see the module docstring)."""

    def __init__(self, fn: ast.FunctionDef) -> None:
        self.fn = fn
        self.parents = _parents(fn)
        self.binds = _bindings(fn, self.parents)
        self.params = _params(fn) - _stored(fn)  # parameters never rebound
        self.looped = {n for loop in ast.walk(fn) if isinstance(loop, (ast.For, ast.While))
                       for n in _stored(loop)}
        # The greatest set of names every binding of which is in the domain. A name that must
        # stay out of it (a mask, a factor) would fail its readers while it is still assumed in:
        # the first pass takes such positions on trust, the second checks them.
        self.names: set[str] = set(self.binds)
        for trusting in (True, False):
            self.trusting = trusting
            while True:
                bad = {n for n in self.names if not all(self._binding(s) for s in self.binds[n])}
                if not bad:
                    break
                self.names -= bad

    # -- what a value is ----------------------------------------------------------------
    def _scalar(self, node: ast.AST, depth: int = 4) -> bool:
        """A value the same in every iteration and every lane: a numeric literal, a parameter
        never rebound, a name bound once outside the loops to such values."""
        if isinstance(node, ast.Constant):
            return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
        if isinstance(node, ast.Name):
            if node.id in self.params:
                return True
            binds = self.binds.get(node.id, [])
            return (depth > 0 and len(binds) == 1 and isinstance(binds[0], ast.Assign)
                    and node.id not in self.looped and self._scalar(binds[0].value, depth - 1))
        if isinstance(node, ast.BinOp) and isinstance(node.op, _ARITH):
            return self._scalar(node.left, depth) and self._scalar(node.right, depth)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return self._scalar(node.operand, depth)
        return False

    @staticmethod
    def _infinite(node: ast.AST) -> bool:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            node = node.operand
        if isinstance(node, ast.Call) and callee(node) == "float" and len(node.args) == 1:
            arg = node.args[0]
            return isinstance(arg, ast.Constant) and str(arg.value).lower().lstrip("+-") in (
                "inf", "infinity")
        return isinstance(node, ast.Attribute) and node.attr == "inf"

    def _fixed(self, node: ast.AST) -> bool:
        """A constant a positive factor leaves alone, or may change without changing a softmax:
        zero, an infinity, a drop (a literal at or below -1e4), blocks of them."""
        if isinstance(node, ast.Constant):
            return (isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
                    and node.value == 0) or strong_drop(node)
        if self._infinite(node) or strong_drop(node):
            return True
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return self._fixed(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            return self._fixed(node.left) and self._fixed(node.right)
        if isinstance(node, ast.Call):
            name = callee(node)
            if name in _ZEROS:
                return True
            if name in _FULL and len(node.args) >= 2:
                return self._fixed(node.args[1])
            if name in WHERE and len(node.args) == 3:
                return self._outside(node.args[0]) \
                    and self._fixed(node.args[1]) and self._fixed(node.args[2])
            if isinstance(node.func, ast.Attribute) and node.func.attr == "to":
                return self._fixed(node.func.value)
        return False

    def scale_of(self, node: ast.AST) -> ast.expr | None:
        """The scalar factor of a product `x * scale` / `scale * x` (x not a scalar)."""
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
            return None
        for x, s in ((node.left, node.right), (node.right, node.left)):
            if self._scalar(s) and not self._scalar(x):
                return s
        return None

    def _free(self, node: ast.AST) -> bool:
        return not (names_in(node) & self.names)

    def _outside(self, node: ast.AST) -> bool:
        """A position the domain must not reach (a mask, a factor, an axis)."""
        return self.trusting or self._free(node)

    def log(self, node: ast.AST, scales: list[ast.expr] | None = None) -> bool:
        """Whether `node` is in the log domain; the scales it starts from go to `scales`."""
        if self.trusting and self.scale_of(node) is not None:
            return True  # a product with a scalar may start the domain: checked on the second pass
        if self._free(node):
            if self._fixed(node):
                return True
            scale = self.scale_of(node)
            if scale is not None and scales is not None:
                scales.append(scale)
            return scale is not None
        if isinstance(node, ast.Name):
            return node.id in self.names
        if isinstance(node, ast.Subscript):
            index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return all(isinstance(i, ast.Slice) and i.lower is i.upper is i.step is None
                       or isinstance(i, ast.Constant) and i.value is None for i in index) \
                and self.log(node.value, scales)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return self.log(node.operand, scales)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, (ast.Add, ast.Sub)):
                return self.log(node.left, scales) & self.log(node.right, scales)
            if isinstance(node.op, ast.Mult):  # one factor in the domain, one outside it
                if self._free(node.right):
                    return self.log(node.left, scales)
                if self._free(node.left):
                    return self.log(node.right, scales)
                return self.trusting and (self.log(node.left) or self.log(node.right))
            if isinstance(node.op, ast.Div):
                return self._outside(node.right) and self.log(node.left, scales)
            return False
        if isinstance(node, ast.Call):
            name = callee(node)
            rest = [*node.args[1:], *(k.value for k in node.keywords)]
            if name in _REDUCE and node.args:
                return all(map(self._outside, rest)) and self.log(node.args[0], scales)
            if name in _PAIRWISE and len(node.args) == 2 and not node.keywords:
                return self.log(node.args[0], scales) & self.log(node.args[1], scales)
            if name in WHERE and len(node.args) == 3 and not node.keywords:
                return self._invariant(node.args[0]) and self.log(node.args[1], scales) \
                    & self.log(node.args[2], scales)
            if isinstance(node.func, ast.Attribute) and node.func.attr == "to":
                return all(map(self._outside, [*node.args, *(k.value for k in node.keywords)])) \
                    and self.log(node.func.value, scales)
        return False

    def _invariant(self, cond: ast.AST) -> bool:
        """A condition a positive factor on the domain leaves alone: it reads no domain value,
        or every domain value it reads is compared with another or with a fixed constant."""
        if self._outside(cond):
            return True
        if isinstance(cond, ast.Compare):
            return all(self.log(x) or self._fixed(x) for x in (cond.left, *cond.comparators))
        if isinstance(cond, ast.BinOp) and isinstance(cond.op, (ast.BitAnd, ast.BitOr)):
            return self._invariant(cond.left) and self._invariant(cond.right)
        if isinstance(cond, ast.UnaryOp) and isinstance(cond.op, (ast.Invert, ast.Not)):
            return self._invariant(cond.operand)
        return False

    def _binding(self, stmt: ast.stmt, scales: list[ast.expr] | None = None) -> bool:
        if isinstance(stmt, ast.Assign):
            return self.log(stmt.value, scales)
        if isinstance(stmt, ast.AugAssign):
            if isinstance(stmt.op, (ast.Add, ast.Sub)):
                return self.log(stmt.value, scales)
            return isinstance(stmt.op, (ast.Mult, ast.Div)) and self._outside(stmt.value)
        return False

    # -- who reads it -------------------------------------------------------------------
    def feeding(self) -> tuple[list[ast.Call], set[str]]:
        """The exponentials of domain values, and the domain names connected to their arguments
        (what they read, what reads those, transitively): every name a folded scale reaches."""
        exps = [c for c in ast.walk(self.fn) if isinstance(c, ast.Call) and callee(c) in EXPS
                and len(c.args) == 1 and not c.keywords and self.log(c.args[0])]
        reads = {n: {r for s in self.binds[n] for r in names_in(s.value) & self.names}
                 for n in self.names}
        near = {n: set(r) for n, r in reads.items()}
        for n, rs in reads.items():
            for r in rs:
                near[r].add(n)
        names: set[str] = set()
        todo = [n for c in exps for n in names_in(c.args[0]) & self.names]
        while todo:
            name = todo.pop()
            if name not in names:
                names.add(name)
                todo += near[name]
        return exps, names

    def starts(self, nodes: list[ast.AST]) -> list[ast.expr]:
        """The scales the domain values `nodes` start from (each once)."""
        found: list[ast.expr] = []
        for node in nodes:
            self.log(node, found)
        return list({id(s): s for s in found}.values())

    def misread(self, name: ast.Name) -> ast.AST | None:
        """The statement where a read of a domain name leaves the domain (None: it does not):
        it must climb through domain values to a binding of a domain name, an exponential's
        argument or a comparison the factor leaves alone."""
        cur: ast.AST = name
        while True:
            parent = self.parents.get(cur)
            if parent is None:
                return cur
            if isinstance(parent, (ast.Assign, ast.AugAssign)):
                target = parent.targets[0] if isinstance(parent, ast.Assign) else parent.target
                ok = cur is parent.value and isinstance(target, ast.Name) \
                    and target.id in self.names
                return None if ok else parent
            if isinstance(parent, ast.Call) and callee(parent) in EXPS and parent.args == [cur] \
                    and not parent.keywords:
                return None
            if isinstance(parent, ast.Compare) and self._invariant(parent):
                return None
            if isinstance(parent, ast.expr) and self.log(parent):
                cur = parent
                continue
            stmt = parent
            while stmt is not None and not isinstance(stmt, ast.stmt):
                stmt = self.parents.get(stmt)
            return stmt if stmt is not None else parent


def scale_fold(fn: ast.FunctionDef) -> ScaleFold | str:
    """Where log2(e) folds into `fn`'s softmax (`ScaleFold`), or why it does not (a reason)."""
    domain = _Domain(fn)
    exps, names = domain.feeding()
    values = [c.args[0] for c in exps] + [s.value for n in names for s in domain.binds[n]]
    scales = domain.starts(values)
    if not exps or not scales:
        return "no exponential takes scores scaled by a scalar (`tl.dot(q, k) * scale`)"
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names:
            where = domain.misread(node)
            if where is not None:
                text = ast.unparse(where).splitlines()[0][:120]
                return f"{node.id} (in the softmax's log domain) is also read by `{text}`"
    return ScaleFold(tuple(scales), tuple(exps))
