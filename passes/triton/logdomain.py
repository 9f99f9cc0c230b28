"""The softmax's log domain of a Triton function, read from its AST and dataflow: the scaled
scores, what masks and maxima make of them, and the exponentials that take them.

A value is in the log domain when scaling every such value by one positive factor scales it
too: the scores (a product of an expression and a scalar *scale*, `tl.dot(q, k) * sm_scale`),
sums and differences of log-domain values, their maxima and minima (`tl.max`, `tl.maximum`),
their products with values outside the domain (a `tl.dot` with one operand in the domain: a
query scaled before the key loop, `q = (q * sm_scale).to(t)`, scales the scores), casts,
`tl.where` between them (or a drop: -inf, zero, a large negative literal) on a condition the
factor leaves alone, and the constants a running maximum starts from. Where every read of such
a value is another of them, an exponential's argument or a comparison between them,
multiplying each scale by log2(e) and turning each of those `exp` into `exp2` computes the same
function with one multiply fewer per score: `exp2(x * log2(e)) == exp(x)`, and comparisons and
maxima commute with a positive factor.
The domain is a set of bindings (`x = ...`, `x op= ...`, an element of `a, b = x, y`, the form
an inlined helper hands its results back in). A read sees the one binding before it in its
block where the statements show it (straight-line code, out of `if` / `with` and out of loops
that do not bind the name: the `q` a dot reads after `q = q * s`), else every binding of its
name (a loop-carried maximum), and is in the domain when each binding it may see is.
"""
from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass

from passes.triton._py import callee
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


def _plain(fn: ast.FunctionDef, parents: Mapping[ast.AST, ast.AST]
           ) -> tuple[dict[str, list[ast.Name]], dict[ast.Name, ast.expr]]:
    """Name -> the targets of its `x = ...` / `x op= ...` statements (an element of
    `a, b = x, y` is one too), and each such target's value (an augmented assignment's
    operand), for the names bound in no other way (not a parameter, a loop target, a starred
    or nested element, a `with` target)."""
    plain: dict[str, list[ast.Name]] = {}
    values: dict[ast.Name, ast.expr] = {}
    opaque = _params(fn)
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)):
            continue
        stmt = parents.get(node)
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign) and node in stmt.targets \
                or isinstance(stmt, ast.AugAssign) and node is stmt.target:
            value = stmt.value
        elif isinstance(stmt, ast.Tuple) and isinstance(parents.get(stmt), ast.Assign):
            assign = parents[stmt]
            if assign.targets == [stmt] and isinstance(assign.value, ast.Tuple) \
                    and len(assign.value.elts) == len(stmt.elts) \
                    and not any(isinstance(e, ast.Starred) for e in assign.value.elts):
                value = assign.value.elts[stmt.elts.index(node)]
        if value is None:
            opaque.add(node.id)
        else:
            plain.setdefault(node.id, []).append(node)
            values[node] = value
    return {k: v for k, v in plain.items() if k not in opaque}, values


_DOTS = frozenset({"tl.dot", "triton.language.dot"})
_TRANS = frozenset({"tl.trans", "tl.permute", "triton.language.trans", "triton.language.permute"})
_DOT_OPTIONS = frozenset({"input_precision", "allow_tf32", "out_dtype", "max_num_imprecise_acc"})
_BLOCKS = ("body", "orelse")


def _loads(node: ast.AST) -> list[ast.Name]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]


class _Domain:
    """The log domain of one function (see the module docstring)."""

    def __init__(self, fn: ast.FunctionDef) -> None:
        self.fn = fn
        self.parents = _parents(fn)
        self.binds, self.values = _plain(fn, self.parents)
        self.owner: dict[ast.expr, list[ast.Name]] = {}
        for target, value in self.values.items():
            if target.id in self.binds:
                self.owner.setdefault(value, []).append(target)
        self.params = _params(fn) - _stored(fn)  # parameters never rebound
        self.looped = {n for loop in ast.walk(fn) if isinstance(loop, (ast.For, ast.While))
                       for n in _stored(loop)}
        self.walrus = any(isinstance(n, ast.NamedExpr) for n in ast.walk(fn))
        self._seen: dict[ast.Name, tuple[ast.Name, ...]] = {}
        # The greatest set of bindings each in the domain. A name that must stay out of it (a
        # mask, a factor) would fail its readers while it is still assumed in: the first pass
        # takes such positions on trust, the second checks them.
        self.dom: set[ast.Name] = {t for ts in self.binds.values() for t in ts}
        for trusting in (True, False):
            self.trusting = trusting
            while True:
                bad = {t for t in self.dom if not self._binding(t)}
                if not bad:
                    break
                self.dom -= bad

    # -- which binding a read sees --------------------------------------------------------
    def _statement(self, node: ast.AST) -> ast.AST | None:
        while node is not None and not isinstance(node, ast.stmt):
            node = self.parents.get(node)
        return node

    def _reaching(self, read: ast.Name) -> ast.Name | None:
        """The one binding a read of a name sees where the statements show it: the last plain
        binding before it in its block, or in a block around it, climbing out of `if` / `with`
        and out of loops that do not bind the name; None where that is not known."""
        name = read.id
        pos = self._statement(read)
        if self.walrus or name not in self.binds or isinstance(pos, ast.While):
            return None
        while pos is not None and pos is not self.fn:
            parent = self.parents.get(pos)
            block = next((b for f in _BLOCKS if isinstance(b := getattr(parent, f, None), list)
                          and any(x is pos for x in b)), None)
            if block is None:
                return None
            for prev in reversed(block[:next(i for i, x in enumerate(block) if x is pos)]):
                stores = [n for n in ast.walk(prev) if isinstance(n, ast.Name)
                          and isinstance(n.ctx, ast.Store) and n.id == name]
                if stores:
                    ok = len(stores) == 1 and isinstance(prev, (ast.Assign, ast.AugAssign)) \
                        and stores[0] in self.values
                    return stores[0] if ok else None
            if parent is self.fn or not isinstance(parent, (ast.If, ast.With, ast.For, ast.While)):
                return None
            if isinstance(parent, (ast.For, ast.While)) and name in _stored(parent):
                return None  # a binding later in the loop reaches the read on the next iteration
            pos = parent
        return None

    def sees(self, read: ast.Name) -> tuple[ast.Name, ...]:
        """The bindings a read may see: the one that reaches it (`_reaching`), else every
        binding of its name (none for a name bound in another way)."""
        if read not in self._seen:
            one = self._reaching(read)
            self._seen[read] = (one,) if one is not None else tuple(self.binds.get(read.id, ()))
        return self._seen[read]

    def _in(self, read: ast.Name) -> bool:
        seen = self.sees(read)
        return bool(seen) and all(t in self.dom for t in seen)

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
            return (depth > 0 and len(binds) == 1
                    and not isinstance(self.parents.get(binds[0]), ast.AugAssign)
                    and node.id not in self.looped and self._scalar(self.values[binds[0]], depth - 1))
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
        return not any(set(self.sees(n)) & self.dom for n in _loads(node))

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
            if scale is None and isinstance(node, ast.Call) \
                    and isinstance(node.func, ast.Attribute) and node.func.attr == "to":
                return self.log(node.func.value, scales)  # scaled scores cast: `(q * s).to(t)`
            if scale is not None and scales is not None:
                scales.append(scale)
            return scale is not None
        if isinstance(node, ast.Name):
            return self._in(node)
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
            if name in _TRANS and node.args:
                return all(map(self._outside, rest)) and self.log(node.args[0], scales)
            if name in _DOTS and len(node.args) == 2 \
                    and all(k.arg in _DOT_OPTIONS for k in node.keywords):
                # linear in each operand: one in the domain, the other outside it
                a, b = node.args
                if self._free(b):
                    return self.log(a, scales)
                if self._free(a):
                    return self.log(b, scales)
                return self.trusting and (self.log(a) or self.log(b))
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

    def _binding(self, target: ast.Name) -> bool:
        stmt = self.parents.get(target)
        if not isinstance(stmt, ast.AugAssign):
            return self.log(self.values[target])
        if self.aug_scale(target) is not None:
            return True
        if not self._in(target):  # the value it updates
            return False
        if isinstance(stmt.op, (ast.Add, ast.Sub)):
            return self.log(stmt.value)
        return isinstance(stmt.op, (ast.Mult, ast.Div)) and self._outside(stmt.value)

    def aug_scale(self, target: ast.Name) -> ast.expr | None:
        """The scale of `x *= scale` where the x it updates is outside the domain and no
        scalar (a query scaled in place after its load): the product starts the domain."""
        stmt = self.parents.get(target)
        before = self.sees(target)
        if not (isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Mult) and before
                and self._scalar(stmt.value)) or set(before) & self.dom:
            return None
        return None if any(self._scalar(self.values[b]) for b in before) else stmt.value

    def _grows(self, target: ast.Name) -> bool:
        """Whether the target's value is a domain value its scales may start in (not the
        factor of `x *= f`)."""
        stmt = self.parents.get(target)
        return not isinstance(stmt, ast.AugAssign) or isinstance(stmt.op, (ast.Add, ast.Sub))

    # -- who reads it -------------------------------------------------------------------
    def feeding(self) -> tuple[list[ast.Call], set[ast.Name]]:
        """The exponentials of domain values, and the domain bindings connected to their
        arguments (what they read, what reads those, transitively): every binding a folded
        scale reaches."""
        exps = [c for c in ast.walk(self.fn) if isinstance(c, ast.Call) and callee(c) in EXPS
                and len(c.args) == 1 and not c.keywords and self.log(c.args[0])]

        def read(node: ast.AST) -> set[ast.Name]:
            return {t for n in _loads(node) for t in self.sees(n) if t in self.dom}

        near: dict[ast.Name, set[ast.Name]] = {t: set() for t in self.dom}
        for t in self.dom:
            reads = read(self.values[t])
            if isinstance(self.parents.get(t), ast.AugAssign):
                reads |= set(self.sees(t)) & self.dom
            for r in reads:
                near[t].add(r)
                near[r].add(t)
        found: set[ast.Name] = set()
        todo = [t for c in exps for t in read(c.args[0])]
        while todo:
            t = todo.pop()
            if t not in found:
                found.add(t)
                todo += near[t]
        return exps, found
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
            if cur in self.owner:  # the value of a binding (an element of a tuple's too)
                return None if all(t in self.dom for t in self.owner[cur]) \
                    else self._statement(cur)
            if isinstance(parent, (ast.Assign, ast.AugAssign)):
                return parent
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
    exps, found = domain.feeding()
    values = [c.args[0] for c in exps] + [domain.values[t] for t in found if domain._grows(t)]
    scales = domain.starts(values)
    scales += [s for t in found if (s := domain.aug_scale(t)) is not None]
    if not exps or not scales:
        return "no exponential takes scores scaled by a scalar (`tl.dot(q, k) * scale`)"
    for node in ast.walk(fn):
        if not isinstance(node, ast.Name) or not set(domain.sees(node)) & found:
            continue
        if isinstance(node.ctx, ast.Load):
            where = domain.misread(node)
        else:  # `x op= y` reads the x it updates
            stmt = domain.parents.get(node)
            where = stmt if isinstance(stmt, ast.AugAssign) and node not in domain.dom else None
        if where is not None:
            text = ast.unparse(where).splitlines()[0][:120]
            return f"{node.id} (in the softmax's log domain) is also read by `{text}`"
    return ScaleFold(tuple(scales), tuple(exps))
