"""Loads kept in bounds by a mask rather than by a clamped index.

A kernel can keep a tile's loads in bounds two ways. Clamped: the index is pinned to the last
valid row, `tl.minimum(x, B - 1)` (or `tl.where(x < B, x, B - 1)`), every lane loads something
and the lanes past the end load duplicates of the last row. Masked: the load reads `x` under
`mask=x < B` and the lanes past the end get `other`. Triton proves an index built from
`tl.arange` contiguous and its base divisible, and so vectorizes the load (a dot loop's tiles
become 16-byte asynchronous copies into shared memory); a `tl.minimum` hides both facts and
every element becomes a load of its own.

The clamped lanes' values differ from the masked ones (a duplicate row, not `other`), so the
rewrite fires only where those lanes cannot reach a result:
- *filled*: the load's value is next read by `tl.where(c, v, F)` whose condition `c` holds the
  mask's term (the clamped lanes are overwritten with F; the load then gets `other=F`), or
- *discarded*: the value reaches only stores whose mask bounds the same index (`x < B` in any
  broadcast), through element-wise operations and the non-contracted axes of `tl.dot`; no
  reduction, reshaping or helper function sees it.
Otherwise the clamp is kept and the reason reported. A clamp whose name is read anywhere but in
load pointers is kept as well (a store, arithmetic, a mask may rely on the pinned value).

A clamp may reach the pointer through variables (`a_ptrs = a_ptr + am[:, None] * sam` before
the K loop, `a_ptrs += BK * sak` in it; or `q = p + ...` over `p = base + ...`): the variable's
value is then written on `x`, and every load that reads the variable gets the term. Each
variable on the way must be assigned once and changed only by `+=` / `-=` of an amount free of
the clamp, be read only in load pointers (or in the value of another such variable), and the
way from the clamp to the load must be element-wise arithmetic (the index's own axes inserted
right on the clamp, none on a variable; so for a clamp written in the pointer too, where axes
inserted above it, `(tl.minimum(x, B - 1) * s)[:, None]`, would put the term in the wrong
broadcast); x and B may not be bound again between the clamp (for a clamp written in a
variable's value, that assignment) and the load. Otherwise the clamp is kept with the reason.

A site is one jit function. The optimization writes each converted load on `x` with the mask
term `x<broadcast> < B` (the broadcast the index has in that load), `&`-combined with the load's
mask and its other converted axes, and `other=0.0` (or the following `where`'s fill; an existing
`other` is kept); a following `where` whose terms the mask now holds is dropped, and a clamp
assignment no load reads any more is deleted. The de-optimization pins each index a load's mask
bounds (`E < B` with `E` written in the pointer, the load carrying an `other`) with
`tl.minimum(x, B - 1)` inline, drops those terms from the mask, and fills the lanes with
`tl.where(terms, load, other)`: the same values in every lane (for B >= 1; a bound of 0 is an
empty extent, whose grid or loop launches no such load). A site's options (`leads`) keep the
order of a mask's terms across the round trip. The de-optimization pins only indices written
in the load's pointer: a load whose pointer is a variable keeps its mask (a pin there would
need the variable's value rewritten for every load that reads it), so a kernel optimized
through pointer variables is not taken back to its clamps.
"""
from __future__ import annotations

import ast
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, line_end, line_start, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, argument, bound_names, callee, names_in
from passes.triton.launch import TRITON
from passes.triton.layout import DOT
from passes.triton.masking import LOADS, STORES
from passes.triton.roles import ARANGE

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

MINIMUM = frozenset({"tl.minimum", "triton.language.minimum"})
WHERE = frozenset({"tl.where", "triton.language.where"})
# what moves or folds lanes across an axis (the clamped lanes' values would reach kept lanes),
# as a function `tl.sum(x)` or a method `x.sum()`
FOLDS = frozenset({"sum", "max", "min", "reduce", "argmax", "argmin", "cumsum", "cumprod",
                   "associative_scan", "xor_sum", "histogram", "trans", "permute", "reshape",
                   "view", "join", "split", "interleave", "sort", "flip", "gather", "T",
                   "broadcast_to", "expand_dims"})
FILL = "0.0"
_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)


def _conjuncts(node: ast.AST) -> list[ast.AST]:
    """The terms of `a & b & ...` (one term for anything else)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _atom(text: str, node: ast.AST) -> str:
    """`text` of `node`, parenthesized unless it binds tighter than any operator."""
    return text if isinstance(node, _ATOMS) else f"({text})"


def _operand(text: str, node: ast.AST) -> str:
    """`text` of `node` as an operand of `<` or `- 1` (arithmetic binds tighter than both)."""
    arithmetic = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)
    if isinstance(node, _ATOMS) or (isinstance(node, ast.BinOp) and isinstance(node.op, arithmetic)):
        return text
    return f"({text})"


def _minus_one(node: ast.AST) -> ast.AST | None:
    """B where `node` is `B - 1`."""
    if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)
            and isinstance(node.right, ast.Constant) and node.right.value == 1
            and not isinstance(node.right.value, bool)):
        return node.left
    return None


def _broadcast(node: ast.AST) -> tuple[int, int] | None:
    """(axis, rank) of a subscript that only inserts axes around one (`[:, None]`: (0, 2))."""
    if not isinstance(node, ast.Subscript):
        return None
    elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    full = [i for i, e in enumerate(elts)
            if isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None]
    nones = [e for e in elts if isinstance(e, ast.Constant) and e.value is None]
    if len(full) != 1 or len(full) + len(nones) != len(elts):
        return None
    return full[0], len(elts)


def _axes_text(sub: ast.Subscript) -> str:
    """`[:, None]`: the written form of a `_broadcast` subscript's index."""
    elts = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
    return "[" + ", ".join(":" if isinstance(e, ast.Slice) else "None" for e in elts) + "]"


def _pointer(load: ast.Call) -> ast.AST | None:
    return argument(load, 0, "pointer")


def _arg_node(call: ast.Call, position: int, name: str) -> ast.AST | None:
    """The argument node as `PyModule.arguments` lists it (the keyword, or the expression)."""
    kw = PyModule.keyword(call, name)
    return kw if kw is not None else (call.args[position] if len(call.args) > position else None)


@dataclass(frozen=True, slots=True)
class _Kernel:
    """Facts of one jit function the rule reads."""

    fn: ast.FunctionDef
    tensors: frozenset[str]
    """Names that hold tensors of lanes (built from `tl.arange`, transitively)."""
    stores: dict[str, list[ast.AST]]
    """Name -> the statements that bind it (assignments, loop heads)."""
    single: dict[str, ast.AST]
    """Name -> its value, for names bound once by a plain assignment."""

    def tensorish(self, node: ast.AST) -> bool:
        return bool(names_in(node) & self.tensors) or any(
            isinstance(n, ast.Call) and callee(n) in ARANGE for n in ast.walk(node))

    def resolved(self, node: ast.AST) -> ast.AST:
        """`node`, or the value of the name it is, where the name is bound once."""
        if isinstance(node, ast.Name) and node.id in self.single:
            return self.single[node.id]
        return node


def _facts(fn: ast.FunctionDef) -> _Kernel:
    """The kernel's facts, read once per parsed function (parses are shared: `PyModule`)."""
    hit = _FACTS.get(fn)
    if hit is None:
        hit = _FACTS[fn] = _read_facts(fn)
    return hit


_FACTS: weakref.WeakKeyDictionary[ast.FunctionDef, _Kernel] = weakref.WeakKeyDictionary()


def _read_facts(fn: ast.FunctionDef) -> _Kernel:
    stores: dict[str, list[ast.AST]] = {}
    values: dict[str, list[ast.AST | None]] = {}
    for node in ast.walk(fn):
        for name in bound_names(node):
            stores.setdefault(name, []).append(node)
            plain = isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name)
            values.setdefault(name, []).append(node.value if plain else None)
    for a in fn.args.args + fn.args.kwonlyargs:
        stores.setdefault(a.arg, []).append(fn)
        values.setdefault(a.arg, []).append(None)
    single = {n: v[0] for n, v in values.items() if len(v) == 1 and v[0] is not None}
    tensors: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, vals in values.items():
            if name in tensors:
                continue
            for v in vals:
                if v is not None and (names_in(v) & tensors or any(
                        isinstance(n, ast.Call) and callee(n) in ARANGE for n in ast.walk(v))):
                    tensors.add(name)
                    changed = True
                    break
    return _Kernel(fn, frozenset(tensors), stores, single)


def _clamp(node: ast.AST, k: _Kernel) -> tuple[ast.AST, ast.AST] | None:
    """(x, B) where `node` pins a lane index x below B: `tl.minimum(x, B - 1)` (either
    order) or `tl.where(x < B, x, B - 1)` (`B > x`, or `x >= B` with the branches swapped)."""
    if not isinstance(node, ast.Call) or node.keywords or len(node.args) not in (2, 3):
        return None
    name = callee(node)
    if name in MINIMUM and len(node.args) == 2:
        for x, limit in (node.args, reversed(node.args)):
            bound = _minus_one(limit)
            if bound is not None and k.tensorish(x) and not k.tensorish(bound):
                return x, bound
        return None
    if name not in WHERE or len(node.args) != 3:
        return None
    test, yes, no = node.args
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    op, left, right = test.ops[0], test.left, test.comparators[0]
    if isinstance(op, ast.Gt):
        op, left, right = ast.Lt(), right, left
    if isinstance(op, ast.GtE):
        yes, no = no, yes
    elif not isinstance(op, ast.Lt):
        return None
    bound = _minus_one(no)
    if (bound is None or ast.dump(left) != ast.dump(yes) or ast.dump(right) != ast.dump(bound)
            or not k.tensorish(left) or k.tensorish(bound)):
        return None
    return left, bound


@dataclass(frozen=True, slots=True)
class _Use:
    """One clamped index read in a load's pointer."""

    load: ast.Call
    node: ast.AST
    """The clamp's name, or the clamp itself when written in the pointer."""
    x: ast.AST
    bound: ast.AST
    axis: tuple[int, int] | None
    """(axis, rank) of the broadcast the index takes in this load; None: read as it is."""
    subscript: ast.Subscript | None
    clamp: str
    """The clamp's name, or "" for a clamp written in the pointer."""
    via: tuple[ast.Name, ...] = ()
    """The variables through which the index reaches the load's pointer, as read there first
    (`a_ptrs` in `tl.load(a_ptrs)`, then `p` in `a_ptrs = p + ...`); empty: written in it."""


class _Reader:
    """The clamps, uses and lane flow of one kernel."""

    def __init__(self, mod: PyModule, fn: ast.FunctionDef) -> None:
        self.mod = mod
        self.k = _facts(fn)
        self.loads = [c for c in mod.calls(fn, LOADS) if _pointer(c) is not None]
        self.clamps: dict[str, tuple[ast.Assign, ast.AST, ast.AST]] = {}
        for node in ast.walk(fn):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and len(self.k.stores.get(node.targets[0].id, ())) == 1):
                found = _clamp(node.value, self.k)
                if found is not None:
                    self.clamps[node.targets[0].id] = (node, *found)
        self.carriers = self._carriers()

    def _carriers(self) -> dict[str, list[ast.Assign | ast.AugAssign]]:
        """Name -> its bindings, for the names bound only by assignments (plain or augmented)
        one of whose values reads a clamp or another such name: the variables a clamped index
        can reach a load's pointer through (`a_ptrs = a_ptr + am[:, None] * sam`)."""
        binds: dict[str, list[ast.Assign | ast.AugAssign]] = {}
        for name, nodes in self.k.stores.items():
            if name in self.clamps or not all(
                    isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)
                    or isinstance(n, ast.Assign) and len(n.targets) == 1
                    and isinstance(n.targets[0], ast.Name) for n in nodes):
                continue
            binds[name] = nodes  # type: ignore[assignment]
        out: dict[str, list[ast.Assign | ast.AugAssign]] = {}
        changed = True
        while changed:
            changed = False
            for name, nodes in binds.items():
                if name not in out and any(self._reads_clamp(n.value, out) for n in nodes):
                    out[name] = nodes
                    changed = True
        return out

    def _reads_clamp(self, value: ast.AST, carriers: dict[str, object]) -> bool:
        """`value` reads a clamp or a name in `carriers`, other than in a load it holds (a
        loaded value is no index the masks could follow)."""
        todo = [value]
        while todo:
            n = todo.pop()
            if isinstance(n, ast.Call) and callee(n) in LOADS:
                continue
            if (isinstance(n, ast.Name) and (n.id in self.clamps or n.id in carriers)
                    or isinstance(n, ast.Call) and _clamp(n, self.k) is not None):
                return True
            todo.extend(ast.iter_child_nodes(n))
        return False

    def text(self, node: ast.AST) -> str:
        return self.mod.text(node)

    def uses(self) -> list[_Use]:
        out: list[_Use] = []
        for load in self.loads:
            todo: list[tuple[ast.AST, tuple[ast.Name, ...]]] = [(_pointer(load), ())]
            while todo:
                node, via = todo.pop()
                if via and isinstance(node, ast.Call) and callee(node) in LOADS:
                    continue  # another load's own pointer: that load's uses, not this one's
                found: tuple[ast.AST, ast.AST] | None = None
                clamp = ""
                if isinstance(node, ast.Name) and node.id in self.clamps:
                    _, x, bound = self.clamps[node.id]
                    found, clamp = (x, bound), node.id
                elif isinstance(node, ast.Call):
                    found = _clamp(node, self.k)
                elif (isinstance(node, ast.Name) and node.id in self.carriers
                      and isinstance(node.ctx, ast.Load) and all(v.id != node.id for v in via)):
                    todo.extend((bind.value, (*via, node)) for bind in self.carriers[node.id])
                    continue
                if found is None:
                    todo.extend((child, via) for child in ast.iter_child_nodes(node))
                    continue
                parent = self.mod.parents.get(node)
                sub = parent if isinstance(parent, ast.Subscript) and parent.value is node else None
                axis = _broadcast(sub) if sub is not None else None
                out.append(_Use(load, node, found[0], found[1], axis,
                                sub if axis is not None else None, clamp, via))
        return sorted(out, key=lambda u: self.mod.start(u.node))

    def carried(self, use: _Use) -> str:
        """Why the index cannot be taken along the way it reaches the load's pointer ("" where
        it can): each step is element-wise arithmetic (its own broadcast aside), and each
        variable on the way is assigned once, changed only by `+=` / `-=` of an amount free of
        the clamp, and read only in load pointers or in such variables' values."""
        for node in (use.node, *use.via):
            hidden = self._hidden(node, axes=node is use.node)
            if hidden is not None:
                return (f"`{self.text(hidden)[:60]}` stands between `{self.text(node)}` and the load, "
                        "where only element-wise arithmetic keeps the clamp's broadcast")
        for name in use.via:
            var = name.id
            plain = [b for b in self.carriers[var] if isinstance(b, ast.Assign)]
            for bind in self.carriers[var]:
                if isinstance(bind, ast.AugAssign) and (
                        not isinstance(bind.op, (ast.Add, ast.Sub))
                        or self._reads_clamp(bind.value, self.carriers)):
                    return (f"`{var}`, built from the clamp, is changed on line {bind.lineno} other "
                            "than by `+=` of an amount free of the clamp")
            if len(plain) != 1:
                return (f"`{var}`, built from the clamp, is assigned {len(plain)} times "
                        "(once, then advanced by `+=`, is what the masks can follow)")
            escape = self._escapes(var, set())
            if escape is not None:
                return (f"`{var}`, built from the clamp, is also read outside load pointers (line "
                        f"{escape.lineno}: `{self.text(self.statement(escape))[:60]}`)")
        return ""

    def _hidden(self, node: ast.AST, axes: bool) -> ast.AST | None:
        """The first node above `node` (and, with `axes`, the subscript inserting its axes) that
        is not element-wise arithmetic, up to the load pointer or the assigned value `node`
        stands in; None where there is none."""
        cur = node
        parent = self.mod.parents.get(cur)
        if axes and isinstance(parent, ast.Subscript) and parent.value is cur and _broadcast(parent):
            cur = parent
        while isinstance(parent := self.mod.parents.get(cur), (ast.BinOp, ast.UnaryOp)):
            cur = parent
        if isinstance(parent, (ast.Assign, ast.AugAssign)) and parent.value is cur:
            return None
        if isinstance(parent, ast.keyword) and parent.arg == "pointer":
            return None
        if isinstance(parent, ast.Call) and callee(parent) in LOADS and parent.args \
                and parent.args[0] is cur:
            return None
        return parent

    def _escapes(self, var: str, seen: set[str]) -> ast.Name | None:
        """A read of `var` outside load pointers and the values of variables read only there."""
        seen.add(var)
        pointers = [_pointer(load) for load in self.loads]
        for node in ast.walk(self.k.fn):
            if not (isinstance(node, ast.Name) and node.id == var and isinstance(node.ctx, ast.Load)):
                continue
            if any(_within(p, node) for p in pointers):
                continue
            stmt = self.statement(node)
            holder = stmt.targets[0].id if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id in self.carriers \
                else None
            if holder is None or holder not in seen and self._escapes(holder, seen) is not None:
                return node
        return None

    def term(self, use: _Use) -> str:
        """The mask term that keeps `use`'s lanes in bounds: `x<broadcast> < B`."""
        x = _atom(self.text(use.x), use.x)
        if use.subscript is not None:
            x += _axes_text(use.subscript)
        return f"{x} < {_operand(self.text(use.bound), use.bound)}"

    # -- where the lanes go ---------------------------------------------------------------
    def statement(self, node: ast.AST) -> ast.stmt | None:
        cur = node
        while cur is not None and not isinstance(cur, ast.stmt):
            cur = self.mod.parents.get(cur)
        return cur

    def following_where(self, load: ast.Call) -> tuple[ast.Call, ast.AST | None] | None:
        """The `tl.where(c, v, F)` that first reads the load's value: the call and, where it
        is a statement `v = tl.where(c, v, F)` of its own, that statement."""
        parent = self.mod.parents.get(load)
        if isinstance(parent, ast.Call) and callee(parent) in WHERE and len(parent.args) == 3 \
                and parent.args[1] is load and not parent.keywords:
            return parent, None
        stmt = parent
        if not (isinstance(stmt, ast.Assign) and stmt.value is load and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)):
            return None
        v = stmt.targets[0].id
        block = self._block(stmt)
        if block is None:
            return None
        for later in block[block.index(stmt) + 1:]:
            reads = v in {n.id for n in ast.walk(later) if isinstance(n, ast.Name)
                          and isinstance(n.ctx, ast.Load)}
            if not reads:
                if v in set().union(*(bound_names(n) for n in ast.walk(later))):
                    return None
                continue
            call = later.value if isinstance(later, ast.Assign) else None
            if (isinstance(call, ast.Call) and callee(call) in WHERE and len(call.args) == 3
                    and not call.keywords and len(later.targets) == 1
                    and isinstance(later.targets[0], ast.Name) and later.targets[0].id == v
                    and isinstance(call.args[1], ast.Name) and call.args[1].id == v
                    and v not in names_in(call.args[0]) and v not in names_in(call.args[2])
                    and not self._rebound_between(stmt, later, names_in(call.args[0]))):
                return call, later
            return None
        return None

    def _block(self, stmt: ast.stmt) -> list[ast.stmt] | None:
        holder = self.mod.parents.get(stmt)
        for attr in ("body", "orelse", "finalbody"):
            block = getattr(holder, attr, None)
            if isinstance(block, list) and stmt in block:
                return block
        return None

    def _rebound_between(self, first: ast.stmt, last: ast.stmt, names: set[str]) -> bool:
        lo, hi = self.mod.end(first), self.mod.start(last)
        return any(lo <= self.mod.start(s) < hi for n in names for s in self.k.stores.get(n, ())
                   if s is not self.k.fn)

    def terms(self, mask: ast.AST | None) -> set[str]:
        if mask is None:
            return set()
        return {ast.dump(t) for t in _conjuncts(self.k.resolved(mask))}

    def filled(self, use: _Use) -> bool:
        """The lanes the term masks are overwritten by the where that first reads the load."""
        found = self.following_where(use.load)
        return found is not None and _parsed_dump(self.term(use)) in self.terms(found[0].args[0])

    def discarded(self, use: _Use) -> str:
        """Why the load's lanes past the bound could reach a result ("" where they cannot)."""
        stmt = self.statement(use.load)
        flow = bound_names(stmt) if stmt is not None else set()
        changed = True
        while changed:
            changed = False
            for node in ast.walk(self.k.fn):
                value = getattr(node, "value", None) if isinstance(
                    node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) else None
                if value is not None and (names_in(value) & flow or _within(value, use.load)):
                    new = bound_names(node) - flow
                    if new:
                        flow |= new
                        changed = True

        def reaches(node: ast.AST) -> bool:
            return bool(names_in(node) & flow) or _within(node, use.load)

        calls = sorted((n for n in ast.walk(self.k.fn) if isinstance(n, ast.Call)),
                       key=self.mod.start)
        for node in ast.walk(self.k.fn):
            if isinstance(node, ast.Return) and node.value is not None and reaches(node.value):
                return "the loaded value is returned"
        for node in calls:  # what folds or hides lanes first: no store mask helps there
            name = callee(node)
            tail = node.func.attr if isinstance(node.func, ast.Attribute) else name
            args = [*node.args, *(k.value for k in node.keywords)]
            if tail in FOLDS and (reaches(node.func) or any(map(reaches, args))):
                return f"the loaded value reaches `{self.text(node)[:60]}`, which moves lanes across axes"
            if name.startswith(("tl.atomic", "triton.language.atomic")) and any(map(reaches, args)):
                return "the loaded value reaches an atomic"
            if isinstance(node.func, ast.Name) and any(map(reaches, args)):
                return f"the loaded value is passed to `{node.func.id}`"
            if name in DOT:
                for i, operand in enumerate(node.args[:2]):
                    if reaches(operand) and (use.axis is None or use.axis == (1 - i, 2)):
                        return f"the clamped axis is the one `{self.text(node)[:60]}` sums over"
        stored = False
        for node in calls:  # a store it reaches by its value, its address (a scatter), its mask
            if callee(node) in STORES and any(map(reaches, [*node.args, *node.keywords])):
                mask = argument(node, 2, "mask")
                terms = _conjuncts(self.k.resolved(mask)) if mask is not None else []
                if not any(self._bounds(t, use) for t in terms):
                    return f"the store on line {node.lineno} does not mask out the clamped lanes"
                stored = True
        return "" if stored else "the loaded value reaches no masked store"

    def _bounds(self, term: ast.AST, use: _Use) -> bool:
        """`term` is `x<broadcast> < B`, the bound of `use` in any broadcast."""
        if not (isinstance(term, ast.Compare) and len(term.ops) == 1
                and isinstance(term.ops[0], ast.Lt)):
            return False
        left = term.left.value if _broadcast(term.left) is not None else term.left
        return ast.dump(left) == ast.dump(use.x) and ast.dump(term.comparators[0]) == ast.dump(use.bound)

    def stale(self, use: _Use) -> str:
        """A name of the clamp's x or B bound again between the clamp (or the variable a clamp
        written in its value reaches the load through) and the load ("" if none)."""
        if use.clamp:
            clamp, label = self.clamps[use.clamp][0], use.clamp
        elif use.via:
            clamp, label = self.statement(use.node), use.via[-1].id
        else:
            return ""
        names = names_in(use.x) | names_in(use.bound)
        at, end = self.mod.start(use.load), self.mod.end(clamp)
        for name in sorted(names):
            for bind in self.k.stores.get(name, ()):
                if bind is self.k.fn:
                    continue
                if end <= self.mod.start(bind) < at or any(
                        _within(loop, use.load) and not _within(loop, clamp)
                        for loop in self._loops(bind)):
                    return f"`{name}` is bound again between `{label}` and the load"
        return ""

    def _loops(self, node: ast.AST) -> list[ast.AST]:
        out = [node] if isinstance(node, (ast.For, ast.While)) else []
        cur = self.mod.parents.get(node)
        while cur is not None:
            if isinstance(cur, (ast.For, ast.While)):
                out.append(cur)
            cur = self.mod.parents.get(cur)
        return out


def _named(mod: PyModule, use: _Use) -> str:
    """How a refusal names the clamp of `use`: its name, or the clamp and its line."""
    return f"`{use.clamp}`" if use.clamp else f"`{mod.text(use.node)}` (line {use.node.lineno})"


def _within(outer: ast.AST, node: ast.AST) -> bool:
    return any(n is node for n in ast.walk(outer))


def _parsed_dump(text: str) -> str:
    return ast.dump(ast.parse(text, mode="eval").body)


def _whole_lines(mod: PyModule, stmt: ast.stmt) -> tuple[int, int] | None:
    """The lines of `stmt` where it stands on them alone."""
    start, end = mod.span(stmt)
    lo, hi = line_start(mod.source, start), line_end(mod.source, end)
    before = mod.source[lo:start].strip()
    after = mod.source[end:hi].strip()
    if before or (after and not after.startswith(b"#")):
        return None
    return lo, hi


def _local(mod: PyModule, node: ast.AST, edits: Iterable[ByteEdit]) -> str:
    """The text of `node` with `edits` (inside it) applied."""
    lo, hi = mod.span(node)
    text = mod.source[lo:hi]
    for e in sorted(edits, key=lambda e: e.start, reverse=True):
        text = text[:e.start - lo] + e.text.encode("utf-8") + text[e.end - lo:]
    return text.decode("utf-8")


@dataclass(frozen=True, slots=True)
class MaskedBounds(Pass):
    """Loads kept in bounds by a clamped index (`tl.minimum(x, B - 1)`) <-> by a mask
    (`mask=x < B`), which keeps the index's contiguity for vectorized loads."""

    name: ClassVar[str] = "masked-bounds"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = ("a load's index clamped with tl.minimum(x, B - 1) <-> the load "
                              "masked with x < B: a contiguous index, vectorized loads")
    provides: ClassVar[tuple[str, ...]] = ("masked-loads",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("*",)
    # A clamped index hides the contiguity and divisibility Triton proves of an arange-built
    # index: each element of the tile becomes its own 2-byte global load through registers,
    # where a masked tile of a dot loop is copied into shared memory 16 bytes at a time,
    # asynchronously and pipelined across iterations (cp.async at sm_80+). The loads then
    # dominate a clamped GEMM; giving the copies back recovers several times.
    prior: ClassVar[float] = 3.0

    leads: str = ""
    """The loads (their places among the kernel's loads, comma-separated) whose new mask terms
    are written before the terms the load's mask has; the others' after them. A
    de-optimization records the loads whose removed terms stood first."""

    # -- sites ------------------------------------------------------------------------------
    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = []
        for fn in mod.kernels():
            reader = _Reader(mod, fn)
            uses = reader.uses()
            if uses:
                out.append(make_site(self.name, ir, index, mod.stmt_span(fn), False,
                                     {"kernel": fn.name, "reads": len(uses)}, mod.span(uses[0].node)))
            masked = [load for load in reader.loads if _bounded_terms(reader, load)]
            if masked:
                out.append(make_site(self.name, ir, index, mod.stmt_span(fn), True,
                                     {"kernel": fn.name, "loads": len(masked)}, mod.span(masked[0])))
        return out

    def _reader(self, ir: KernelIR, site: Site) -> _Reader | None:
        mod = PyModule(ir)
        fn = next((f for f in mod.kernels() if f.name == site.detail.get("kernel")
                   and mod.stmt_span(f) == tuple(site.span)), None)
        return _Reader(mod, fn) if fn is not None else None

    # -- clamped -> masked ----------------------------------------------------------------
    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        reader = self._reader(ir, site)
        if reader is None:
            return Skipped("no kernel at the site", {"site": site.anchor})
        mod = reader.mod
        uses = reader.uses()
        if not uses:
            return Skipped("no load reads a clamped index", {"kernel": site.detail.get("kernel")})
        refusals: dict[str, str] = {}
        for name, (stmt, _, _) in reader.clamps.items():
            inside = {id(u.node) for u in uses if u.clamp == name}
            for node in ast.walk(reader.k.fn):
                if (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
                        and id(node) not in inside):
                    refusals.setdefault(f"`{name}`", f"`{name}` is also read outside load pointers "
                                              f"(line {node.lineno}: `{mod.text(reader.statement(node))[:60]}`)")
        for use in uses:
            key = _named(mod, use)
            if use.subscript is None and isinstance(mod.parents.get(use.node), ast.Subscript) \
                    and mod.parents[use.node].value is use.node:
                refusals.setdefault(key, f"`{mod.text(mod.parents[use.node])}` indexes the clamp "
                                         "other than by inserting axes")
                continue
            why = reader.carried(use) or reader.stale(use)
            if not why and not reader.filled(use):
                why = reader.discarded(use)
            if why:
                refusals.setdefault(key, why)
        taken = [u for u in uses if _named(mod, u) not in refusals]
        if not taken:
            first = next(iter(refusals.items()))
            return Skipped(f"clamp {first[0]} kept: {first[1]}", {"refused": dict(refusals)})
        edits = self._unclamp(reader, taken)
        for name, (stmt, _, _) in reader.clamps.items():
            if any(u.clamp == name for u in taken):
                lines = _whole_lines(mod, stmt)
                block = reader._block(stmt)
                if lines is not None and block is not None and len(block) > 1:
                    edits.append(ByteEdit(*lines, ""))
        return finish(ir, site, sorted(edits, key=lambda e: e.start))

    def _unclamp(self, reader: _Reader, taken: list[_Use]) -> list[ByteEdit]:
        mod = reader.mod
        leads = {int(i) for i in self.leads.split(",") if i.strip().isdigit()}
        edits: list[ByteEdit] = []
        by_load: dict[int, list[_Use]] = {}
        carried: dict[tuple[int, int], ByteEdit] = {}  # in a variable's value, once for its loads
        for use in taken:
            by_load.setdefault(id(use.load), []).append(use)
            if use.via:
                span = mod.span(use.node)
                carried[span] = ByteEdit(*span, _atom(mod.text(use.x), use.x))
        edits.extend(carried.values())
        for group in by_load.values():
            load = group[0].load
            inner = [ByteEdit(*mod.span(u.node), _atom(mod.text(u.x), u.x)) for u in group
                     if not u.via]
            new_terms: list[str] = []
            for u in group:
                term = reader.term(u)
                if _parsed_dump(term) not in {_parsed_dump(t) for t in new_terms}:
                    new_terms.append(term)
            mask = argument(load, 1, "mask")
            old = reader.terms(mask)
            where = reader.following_where(load)
            if where is not None:  # in the order the where that fills the lanes writes them
                order = [ast.dump(t) for t in _conjuncts(reader.k.resolved(where[0].args[0]))]
                new_terms.sort(key=lambda t: order.index(_parsed_dump(t))
                               if _parsed_dump(t) in order else len(order))
            added = [t for t in new_terms if _parsed_dump(t) not in old]
            other = argument(load, 2, "other")
            fill = mod.text(where[0].args[2]) if where is not None else FILL
            if mask is not None:
                if added:
                    terms = [_atom(mod.text(mask), mask), *(f"({t})" for t in added)]
                    if reader.loads.index(load) in leads:
                        terms = terms[1:] + terms[:1]
                    inner.append(ByteEdit(*mod.span(mask), " & ".join(terms)))
                if other is None:
                    inner.append(mod.insert_argument(load, len(mod.arguments(load)),
                                                     f"other={fill}"))
            else:
                joined = " & ".join(f"({t})" for t in added) if len(added) > 1 else added[0]
                tail = f", other={fill}" if other is None else ""
                inner.append(mod.insert_argument(load, len(mod.arguments(load)),
                                                 f"mask={joined}{tail}"))
            final_other = _parsed_dump(mod.text(other)) if other is not None else _parsed_dump(fill)
            text = _local(mod, load, inner)
            drop = (where is not None
                    and reader.terms(where[0].args[0]) <= old | {_parsed_dump(t) for t in new_terms}
                    and ast.dump(where[0].args[2]) == final_other)
            if drop and where[1] is None:
                edits.append(ByteEdit(*mod.span(where[0]), text))
                continue
            edits.append(ByteEdit(*mod.span(load), text))
            if drop:
                lines = _whole_lines(mod, where[1])
                if lines is not None:
                    edits.append(ByteEdit(*lines, ""))
        return edits

    # -- masked -> clamped ----------------------------------------------------------------
    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        reader = self._reader(ir, site)
        if reader is None:
            return Skipped("no kernel at the site", {"site": site.anchor})
        mod = reader.mod
        edits: list[ByteEdit] = []
        leads: list[str] = []
        for place, load in enumerate(reader.loads):
            terms = _bounded_terms(reader, load)
            if not terms:
                continue
            mask, other = argument(load, 1, "mask"), argument(load, 2, "other")
            pointer = _pointer(load)
            inner: list[ByteEdit] = []
            for term, x, bound in terms:
                pinned = f"tl.minimum({mod.text(x)}, {_operand(mod.text(bound), bound)} - 1)"
                left = term.left
                for node in _occurrences(pointer, left):
                    if left is x:
                        inner.append(ByteEdit(*mod.span(node), pinned))
                    else:
                        inner.append(ByteEdit(*mod.span(node.value), pinned))
            every = _conjuncts(mask)
            kept = [t for t in every if all(t is not term for term, _, _ in terms)]
            if kept:
                inner.append(ByteEdit(*mod.span(mask), " & ".join(
                    _atom(mod.text(t), t) if len(kept) > 1 else mod.text(t) for t in kept)))
                if every.index(kept[0]) >= len(terms):  # the removed terms stood first
                    leads.append(str(place))
            else:
                for node in (_arg_node(load, 2, "other"), _arg_node(load, 1, "mask")):
                    inner.append(mod.remove_argument(load, node))
            cond = " & ".join(_atom(mod.text(t), t) if len(terms) > 1 else mod.text(t)
                              for t, _, _ in terms)
            edits.append(ByteEdit(*mod.span(load),
                                  f"tl.where({cond}, {_local(mod, load, inner)}, {mod.text(other)})"))
        if not edits:
            return Skipped("no load masks an index of its pointer", {"kernel": site.detail.get("kernel")})
        return finish(ir, site, edits, options={"leads": ",".join(leads)})


def _occurrences(root: ast.AST, like: ast.AST) -> list[ast.AST]:
    want = ast.dump(like)
    return [n for n in ast.walk(root) if ast.dump(n) == want]


def _bounded_terms(reader: _Reader, load: ast.Call) -> list[tuple[ast.Compare, ast.AST, ast.AST]]:
    """(term, x, B) for each term `E < B` of the load's written mask whose E (x, or x with
    axes inserted) is written in the pointer and bounds every read of x's names there; only
    for a load with an `other` (the lanes' value the de-optimization keeps with a where)."""
    mask, other, pointer = argument(load, 1, "mask"), argument(load, 2, "other"), _pointer(load)
    if mask is None or other is None or pointer is None or isinstance(mask, ast.Name):
        return []
    out = []
    taken: list[ast.AST] = []  # occurrences pinned by an earlier term: a pin may not overlap one
    for term in _conjuncts(mask):
        if not (isinstance(term, ast.Compare) and len(term.ops) == 1
                and isinstance(term.ops[0], ast.Lt)):
            continue
        left, bound = term.left, term.comparators[0]
        x = left.value if _broadcast(left) is not None else left
        if not reader.k.tensorish(x) or reader.k.tensorish(bound) or _clamp(x, reader.k):
            continue
        found = _occurrences(pointer, left)
        own = names_in(x) & set(reader.k.stores)  # the kernel's variables, not `tl`
        reads = [n for n in ast.walk(pointer) if isinstance(n, ast.Name) and n.id in own]
        overlaps = any(_within(a, b) or _within(b, a) for a in found for b in taken)
        if found and not overlaps and all(any(_within(f, n) for f in found) for n in reads):
            out.append((term, x, bound))
            taken.extend(found)
    return out
