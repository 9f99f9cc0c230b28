"""One constexpr that serves several roles of a dot kernel, split into one constexpr per role.

A kernel may size its accumulator's rows, its columns and its reduction step with one block
size (`acc = tl.zeros((BLOCK, BLOCK))`, `for k in range(0, tl.cdiv(K, BLOCK))`): a configuration
sweep over it can then only move all three together, and a 128x256x64 tile is out of reach.
`untie_edit(ir, kernel)` gives each role its own constexpr (`BLOCK_M`, `BLOCK_N`, `BLOCK_K`,
fresh names) and rewrites every use by the role *of that use*, found by following dimensions
through the kernel (`shape_roles`):

- a block extent (`tl.arange(0, P)`, a `tl.zeros`/`tl.full` dimension, a `block_shape` entry)
  is one dimension; broadcasting (`x[:, None] + y[None, :]`), elementwise arithmetic, loads and
  stores, `tl.where`, reductions, `tl.trans` and `tl.dot(a, b)` (a's columns are b's rows) relate
  dimensions. The accumulator's two dimensions are ``m`` and ``n``; the contraction dimension of
  the dots accumulating into it is ``k``;
- a scalar use takes the dimension it offsets: `pid * P + tl.arange(0, P)`, a loop variable
  stepped by `P` added to a block (`k0 + rk`), the offsets of a block pointer (or of a tensor
  descriptor's `load` / `store`); a multiple of one program-id expression (`pid_m * P`,
  `(pid_m + 1) * P`) is one dimension wherever it occurs;
  a block count (`tl.cdiv(M, P)`, `(M + P - 1) // P`) takes the dimension `M` bounds (`offs < M`);
  the step of the loop around the dot, and a pointer advanced in it, is ``k``.

A use whose role none of these fixes, or uses that relate two roles of one constexpr (a sum of
a row and a column block), refuse the untie with the reason; so does a tied constexpr passed to
another jit function, named in a string the untie cannot rewrite, or passed a computed value.
On the host each launch passes every new constexpr the value it passed the old one; a grid
that reads the old one from the autotuner's meta-parameters reads the new one of the role its
division or its axis says.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from passes._source import ByteEdit
from passes.triton._py import PyModule, callee, is_cdiv, literal_int, names_in
from passes.triton.roles import (
    ARANGE,
    DOT,
    DOT_ROLES,
    PID_CALLS,
    RANGE_CALLS,
    SHAPED,
    SweepRefusal,
    _dividend,
    _facts,
    _grid_axis,
    _has_dot,
    _ptr_like,
    constexpr_params,
    jit_functions,
    assignments,
    autotune_entries,
    launch_arguments,
    launch_grid,
    pid_names,
)

if TYPE_CHECKING:
    from kir import KernelIR

ONE = "1"
"""A broadcast dimension (`x[:, None]`)."""
Dim = Hashable
Shape = tuple[Dim, ...]

TL = ("triton.language.math.", "triton.language.", "tl.math.", "tl.", "libdevice.")
ELEMENTWISE = frozenset(
    {
        "abs", "ceil", "clamp", "cos", "div_rn", "erf", "exp", "exp2", "fdiv", "floor", "fma",
        "log", "log2", "maximum", "minimum", "rsqrt", "sigmoid", "sin", "sqrt", "sqrt_rn",
        "tanh", "umulhi", "where", "log1p", "expm1", "pow",
    }
)
SAME_SHAPE = frozenset({"cumsum", "cumprod", "sort", "flip", "associative_scan"})
REDUCTIONS = frozenset({"sum", "max", "min", "argmax", "argmin", "xor_sum", "reduce"})
HINTS = frozenset({"multiple_of", "max_contiguous", "max_constancy"})
TENSOR_METHODS = frozenset(
    {"reshape", "view", "trans", "permute", "broadcast_to", "expand_dims", *REDUCTIONS, *HINTS}
)
CASTS = frozenset({"to", "cast"})
CHECKS = frozenset({"static_assert", "device_assert", "static_print", "device_print"})
DESCRIPTORS = frozenset({"make_tensor_descriptor", "_experimental_make_tensor_descriptor"})


@dataclass(frozen=True, slots=True)
class _Val:
    """What the walk knows of an expression: its dimensions (None: unknown; () a scalar) and,
    for a scalar, the constexpr uses it is an offset made of (`pid * P`)."""

    shape: Shape | None
    pending: frozenset[Hashable] = frozenset()
    address: bool = False
    """Computed from a pointer: a scalar added to it is a memory offset, not a block's."""


SCALAR = _Val(())
UNKNOWN = _Val(None)


class _Classes:
    """Union-find over dimensions and constexpr uses."""

    def __init__(self) -> None:
        self.parent: dict[Hashable, Hashable] = {}

    def find(self, x: Hashable) -> Hashable:
        self.parent.setdefault(x, x)
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: Hashable, b: Hashable) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra

    def known(self, x: Hashable) -> bool:
        return x in self.parent


def _use(node: ast.Name) -> tuple[str, int, int]:
    return ("use", node.lineno, node.col_offset)


def _dim(node: ast.AST, i: int) -> tuple[str, int, int, int, int, int]:
    """Dimension `i` of the block a call makes (`tl.arange(0, T).reshape(..)` holds two calls
    starting at one position: the end tells them apart)."""
    end = (node.end_lineno or 0, node.end_col_offset or 0)
    return ("dim", node.lineno, node.col_offset, *end, i)


def _tl_name(name: str) -> str | None:
    """`exp` for `tl.exp` / `tl.math.exp` / `libdevice.exp` (None: not a Triton function)."""
    for prefix in TL:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return None


@dataclass(slots=True)
class ShapeRoles:
    """The role of every use of a kernel's constexprs (see the module docstring)."""

    roles: dict[tuple[str, int, int], str | None] = field(default_factory=dict)
    """Use (`("use", line, col)`) -> "m" | "n" | "k" | None (not determined)."""
    uses: dict[str, list[ast.Name]] = field(default_factory=dict)
    """Constexpr -> its uses in the kernel body."""
    refusals: dict[str, str] = field(default_factory=dict)
    """Constexpr -> why it cannot be untied (beyond undetermined uses)."""
    pid_roles: dict[str, str] = field(default_factory=dict)
    """A program-id expression -> the role of the block it scales: `axis:N` (a program id of
    that axis), `name:X` (a name computed from program ids), `expr:...` (another expression),
    `loop:V:L` (the variable of a counted loop)."""
    size_roles: dict[str, str] = field(default_factory=dict)
    """Kernel size parameter -> the role of the blocks it bounds (`offs_m < M`)."""
    size_serves: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Kernel size parameter -> every role of the blocks it bounds (several: one size serves
    several dimensions, as `N` of a square product bounds its rows and its columns)."""

    serves: dict[tuple[str, int, int], tuple[str, ...]] = field(default_factory=dict)
    """Use -> every role its dimension serves (several: the kernel relates those roles)."""

    def roles_of(self, name: str) -> list[str]:
        """The distinct roles `name`'s uses serve, in m, n, k order."""
        found = {r for u in self.uses.get(name, ()) for r in self.serves.get(_use(u), ())}
        return [r for r in DOT_ROLES if r in found]


class _Walk:
    """Follows dimensions through one kernel body (see the module docstring)."""

    def __init__(
        self, kernel: ast.FunctionDef, functions: Mapping[str, ast.FunctionDef]
    ) -> None:
        self.kernel = kernel
        self.functions = functions
        self.tiles = set(constexpr_params(kernel))
        self.params = {a.arg for a in kernel.args.args + kernel.args.kwonlyargs}
        self.pid = pid_names(kernel)
        self.pointers = _ptr_like(kernel)
        self.loop_vars = {
            n.id
            for loop in ast.walk(kernel)
            if isinstance(loop, ast.For)
            for n in ast.walk(loop.target)
            if isinstance(n, ast.Name)
        }
        self.locals = {
            n.id
            for n in ast.walk(kernel)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        self.cls = _Classes()
        self.env: dict[str, _Val] = {}
        self.shaped: dict[str, Shape] = {}
        self.dots: list[tuple[Dim, Shape]] = []
        self.size_links: dict[str, set[Dim]] = {}
        self.dividends: list[tuple[Hashable, str]] = []
        self.step_k: set[Hashable] = set()
        self.refusals: dict[str, str] = {}
        facts = _facts(kernel, functions)
        self.accs = sorted(n for n in facts.dotted_into if n in facts.shapes)
        self.dot_loops = {
            id(loop)
            for loop in ast.walk(kernel)
            if isinstance(loop, ast.For)
            and _has_dot(loop)
            and not any(
                inner is not loop and _has_dot(inner)
                for inner in ast.walk(loop)
                if isinstance(inner, ast.For)
            )
        }
        self.in_dot_loop = 0
        self.loop_keys: dict[str, str] = {}
        once = {
            n: vs[0]
            for n, vs in assignments(kernel, augmented=True).items()
            if len(vs) == 1 and n not in self.loop_vars
        }
        self.once = once
        for name, value in once.items():
            key = _pid_key(value, self.pid)
            if key is not None and isinstance(value, ast.Call):
                self.cls.union(("pid", key), ("pid", f"name:{name}"))

    # -- dimensions ----------------------------------------------------------------------
    def unify(self, a: Shape | None, b: Shape | None) -> Shape | None:
        """The broadcast of two shapes, relating the dimensions they share."""
        if a is None or b is None:
            return None
        n = max(len(a), len(b))
        a = (ONE,) * (n - len(a)) + tuple(a)
        b = (ONE,) * (n - len(b)) + tuple(b)
        out: list[Dim] = []
        for x, y in zip(a, b):
            if x == ONE:
                out.append(y)
            elif y == ONE:
                out.append(x)
            else:
                self.cls.union(x, y)
                out.append(x)
        return tuple(out)

    def attach(self, scalar: _Val, block: _Val) -> None:
        """A scalar offset added to (compared with) a block of one dimension: its uses are
        that dimension."""
        if not scalar.pending or block.shape is None:
            return
        dims = [d for d in block.shape if d != ONE]
        if len(dims) == 1:
            for u in scalar.pending:
                self.cls.union(u, dims[0])

    def size(self, expr: ast.AST, dim: Dim) -> None:
        """`expr` is the extent of dimension `dim`."""
        for n in ast.walk(expr):
            if isinstance(n, ast.Name) and n.id in self.tiles:
                self.cls.union(_use(n), dim)

    def shape_of(self, owner: ast.AST, dims: ast.AST) -> Shape:
        elts = dims.elts if isinstance(dims, (ast.Tuple, ast.List)) else [dims]
        out: list[Dim] = []
        for i, e in enumerate(elts):
            if literal_int(e) == 1:
                out.append(ONE)
                continue
            d = _dim(owner, i)
            self.cls.find(d)
            self.size(e, d)
            out.append(d)
        return tuple(out)

    # -- expressions ---------------------------------------------------------------------
    def expr(self, node: ast.AST | None) -> _Val:
        if node is None:
            return SCALAR
        if isinstance(node, ast.Constant):
            return SCALAR
        if isinstance(node, ast.Name):
            if node.id in self.tiles:
                u = _use(node)
                self.cls.find(u)
                return _Val((), frozenset({u}))
            if node.id in self.env:
                return self.env[node.id]
            if node.id in self.pointers:
                return _Val((), address=True)
            return UNKNOWN if node.id in self.locals and node.id not in self.params else SCALAR
        if isinstance(node, ast.Attribute):
            base = self.expr(node.value)
            if node.attr == "T" and base.shape is not None:
                return _Val(tuple(reversed(base.shape)))
            return UNKNOWN
        if isinstance(node, ast.BinOp):
            return self.binop(node)
        if isinstance(node, ast.UnaryOp):
            v = self.expr(node.operand)
            return v if isinstance(node.op, (ast.USub, ast.UAdd)) else _Val(v.shape)
        if isinstance(node, ast.Compare):
            vals = [self.expr(node.left), *(self.expr(c) for c in node.comparators)]
            sides = [node.left, *node.comparators]
            shape: Shape | None = ()
            for v in vals:
                shape = self.unify(shape, v.shape)
            for side, v in zip(sides, vals):
                if v.shape == () and shape:
                    self.attach(v, _Val(shape))
                    if isinstance(side, ast.Name) and side.id not in self.tiles:
                        dims = [d for d in shape if d != ONE]
                        if len(dims) == 1:
                            self.size_links.setdefault(side.id, set()).add(dims[0])
            return _Val(shape)
        if isinstance(node, ast.BoolOp):
            shape = ()
            for v in node.values:
                shape = self.unify(shape, self.expr(v).shape)
            return _Val(shape)
        if isinstance(node, ast.IfExp):
            self.expr(node.test)
            a, b = self.expr(node.body), self.expr(node.orelse)
            return _Val(self.unify(a.shape, b.shape))
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, (ast.Tuple, ast.List)):
            for e in node.elts:
                self.expr(e)
            return UNKNOWN
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expr(child)
        return UNKNOWN

    def binop(self, node: ast.BinOp) -> _Val:
        left, right = self.expr(node.left), self.expr(node.right)
        shape = self.unify(left.shape, right.shape)
        op = node.op
        if isinstance(op, ast.Mult):
            for side, other in ((node.left, node.right), (node.right, node.left)):
                if isinstance(side, ast.Name) and side.id in self.tiles:
                    key = (
                        self.loop_keys[other.id]
                        if isinstance(other, ast.Name) and other.id in self.loop_keys
                        else _pid_key(other, self.pid)
                    )
                    if key is not None:
                        self.cls.union(_use(side), ("pid", key))
        if isinstance(op, ast.FloorDiv):
            size = _first_term(node.left)
            if isinstance(size, ast.Name):
                for n in [*ast.walk(node.right), *ast.walk(node.left)]:
                    if isinstance(n, ast.Name) and n.id in self.tiles:
                        self.dividends.append((_use(n), size.id))
        address = left.address or right.address
        if isinstance(op, (ast.Add, ast.Sub)):
            if not address:
                for a, b in ((left, right), (right, left)):
                    if a.shape == () and b.shape:
                        self.attach(a, b)
            pending = left.pending | right.pending if shape == () else frozenset()
            return _Val(shape, pending, address)
        if shape == () and isinstance(op, ast.Mult):
            # a block index times a block size is an offset along that block's dimension,
            # made of that size alone (the group size inside `pid_m` of `pid_m * BLOCK_M` is
            # no offset along m); times anything else (a stride) it is a memory offset
            for side, other in ((node.left, node.right), (node.right, node.left)):
                if isinstance(side, ast.Name) and side.id in self.tiles and self.index(other):
                    return _Val((), frozenset({_use(side)}))
        return _Val(shape, address=address and isinstance(op, (ast.Add, ast.Sub)))

    def index(self, expr: ast.AST) -> bool:
        """A count of blocks: a literal, a constexpr, or computed from a program id or a loop
        variable (`pid_m`, `pid_m + 1`, `pid // tiles_n`); not a stride."""
        if literal_int(expr) is not None:
            return True
        if isinstance(expr, ast.Name) and expr.id in self.tiles:
            return True
        return _pid_key(expr, self.pid) is not None or bool(names_in(expr) & self.loop_vars)

    def subscript(self, node: ast.Subscript) -> _Val:
        base = self.expr(node.value)
        index = node.slice
        items = index.elts if isinstance(index, ast.Tuple) else [index]
        if base.shape is None:
            for it in items:
                self.expr(it)
            return UNKNOWN
        dims = list(base.shape)
        out: list[Dim] = []
        for it in items:
            if isinstance(it, ast.Slice) and it.lower is None and it.upper is None:
                if not dims:
                    return UNKNOWN
                out.append(dims.pop(0))
            elif isinstance(it, ast.Constant) and it.value is None:
                out.append(ONE)
            elif literal_int(it) is not None and dims:
                dims.pop(0)
            else:
                self.expr(it)
                return UNKNOWN
        return _Val(tuple(out + dims), address=base.address)

    def call(self, node: ast.Call) -> _Val:
        name = callee(node)
        short = _tl_name(name)
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        if (
            short is None
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in TENSOR_METHODS
            and not (isinstance(node.func.value, ast.Name) and node.func.value.id in self.functions)
        ):
            # `x.reshape(a, b)`, `x.sum(1)`: the tl function of the same name on `x`
            as_fn = ast.Call(
                func=ast.Attribute(value=ast.Name(id="tl", ctx=ast.Load()), attr=node.func.attr),
                args=[node.func.value, *node.args],
                keywords=node.keywords,
            )
            return self.call(ast.copy_location(as_fn, node))
        if isinstance(node.func, ast.Name) and node.func.id in self.functions:
            passed = {
                n.id for a in [*node.args, *kw.values()] for n in ast.walk(a)
                if isinstance(n, ast.Name) and n.id in self.tiles
            }
            for p in passed:
                self.refusals.setdefault(p, f"{p} is passed to the jit function {node.func.id}")
            for a in [*node.args, *kw.values()]:
                self.expr(a)
            return UNKNOWN
        if name in PID_CALLS or short == "num_programs":
            return SCALAR
        if name in ARANGE and len(node.args) >= 2:
            d = _dim(node, 0)
            self.cls.find(d)
            self.size(node.args[0], d)
            self.size(node.args[1], d)
            return _Val((d,))
        if name in SHAPED and node.args:
            for a in [*node.args[1:], *kw.values()]:
                self.expr(a)
            return _Val(self.shape_of(node, node.args[0]))
        if short in ("zeros_like", "full_like") and node.args:
            for a in node.args[1:]:
                self.expr(a)
            return _Val(self.expr(node.args[0]).shape)
        if short == "make_block_ptr":
            return self.block_ptr(node, kw)
        if short in DESCRIPTORS:
            return self.block_ptr(node, kw, ("base", "shape", "strides", "block_shape"))
        if (
            short is None
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("load", "store")
            and node.args
        ):
            desc = self.expr(node.func.value)
            if desc.shape:  # a tensor descriptor: `desc.load([i, j])`, `desc.store([i, j], x)`
                self.offsets(desc.shape, node.args[0])
                for a in node.args[1:]:
                    self.unify(desc.shape, self.expr(a).shape)
                return _Val(desc.shape) if node.func.attr == "load" else UNKNOWN
        if short == "advance" and len(node.args) >= 2:
            ptr = self.expr(node.args[0])
            self.offsets(ptr.shape, node.args[1])
            return ptr
        if name in DOT and len(node.args) >= 2:
            return self.dot(node, kw)
        if short in ("load", "store"):
            return self.memory(node, short, kw)
        if short in ("trans", "permute") and node.args:
            x = self.expr(node.args[0])
            rest = node.args[1:] or [kw[k] for k in ("dims",) if k in kw]
            order = [literal_int(e) for e in rest[0].elts] if rest and isinstance(
                rest[0], (ast.Tuple, ast.List)) else [literal_int(e) for e in rest]
            if x.shape is None:
                return UNKNOWN
            if not order:
                return _Val(tuple(reversed(x.shape)))
            if all(o is not None and o < len(x.shape) for o in order):
                return _Val(tuple(x.shape[o] for o in order))  # type: ignore[index]
            return UNKNOWN
        if short in REDUCTIONS and node.args:
            return self.reduce(node, kw)
        if short in ("reshape", "view", "broadcast_to") and node.args:
            self.expr(node.args[0])
            dims = node.args[1] if len(node.args) == 2 else ast.Tuple(elts=node.args[1:])
            dims = kw.get("shape", dims)
            return _Val(self.shape_of(node, dims))
        if short == "expand_dims" and len(node.args) >= 2:
            x = self.expr(node.args[0])
            ax = literal_int(node.args[1])
            if x.shape is None or ax is None:
                return UNKNOWN
            ax = ax if ax >= 0 else len(x.shape) + 1 + ax
            return _Val(x.shape[:ax] + (ONE,) + x.shape[ax:])
        if short in HINTS and node.args:
            x = self.expr(node.args[0])
            for a in node.args[1:]:
                for n in ast.walk(a):
                    if isinstance(n, ast.Name) and n.id in self.tiles:
                        self.attach(_Val((), frozenset({_use(n)})), x)
            return x
        if short in ELEMENTWISE or short in SAME_SHAPE:
            vals = [self.expr(a) for a in node.args]
            for v in kw.values():
                self.expr(v)
            if short in SAME_SHAPE:
                return _Val(vals[0].shape) if vals else UNKNOWN
            shape: Shape | None = ()
            for v in vals:
                shape = self.unify(shape, v.shape)
            return _Val(shape)
        if is_cdiv(node, 2):
            self.expr(node.args[0])
            self.expr(node.args[1])
            size = _first_term(node.args[0])
            if isinstance(size, ast.Name):
                for n in [*ast.walk(node.args[1]), *ast.walk(node.args[0])]:
                    if isinstance(n, ast.Name) and n.id in self.tiles:
                        self.dividends.append((_use(n), size.id))
            return SCALAR
        if short in CHECKS:
            for a in [*node.args, *kw.values()]:
                self.expr(a)
            return UNKNOWN
        if isinstance(node.func, ast.Attribute) and node.func.attr in CASTS:
            x = self.expr(node.func.value)
            for a in [*node.args, *kw.values()]:
                self.expr(a)
            return _Val(x.shape)
        if name in ("min", "max", "int", "float", "bool", "abs"):
            for a in node.args:
                self.expr(a)
            return SCALAR
        if isinstance(node.func, ast.Attribute):
            self.expr(node.func.value)
        for a in [*node.args, *kw.values()]:
            self.expr(a)
        return UNKNOWN

    def offsets(self, shape: Shape | None, offsets: ast.AST) -> None:
        if shape is None or not isinstance(offsets, (ast.Tuple, ast.List)):
            self.expr(offsets)
            return
        for i, e in enumerate(offsets.elts):
            v = self.expr(e)
            if i < len(shape) and v.shape == () and shape[i] != ONE:
                for u in v.pending:
                    self.cls.union(u, shape[i])

    def block_ptr(
        self,
        node: ast.Call,
        kw: Mapping[str, ast.AST],
        fields: tuple[str, ...] = ("base", "shape", "strides", "offsets", "block_shape", "order"),
    ) -> _Val:
        """A block pointer (or, with its fields, a tensor descriptor): its block's shape, the
        sizes its `shape` names linked to the block's dimensions."""
        got = dict(zip(fields, node.args))
        got.update({k: v for k, v in kw.items() if k in fields})
        block = got.get("block_shape")
        if block is None:
            for v in got.values():
                self.expr(v)
            return UNKNOWN
        shape = self.shape_of(node, block)
        sizes = got.get("shape")
        if isinstance(sizes, (ast.Tuple, ast.List)) and len(sizes.elts) == len(shape):
            for i, e in enumerate(sizes.elts):
                self.expr(e)
                if isinstance(e, ast.Name) and e.id not in self.tiles and shape[i] != ONE:
                    self.size_links.setdefault(e.id, set()).add(shape[i])
        elif sizes is not None:
            self.expr(sizes)
        for k in ("base", "strides", "order"):
            if k in got:
                self.expr(got[k])
        if "offsets" in got:
            self.offsets(shape, got["offsets"])
        return _Val(shape)

    def dot(self, node: ast.Call, kw: Mapping[str, ast.AST]) -> _Val:
        a, b = self.expr(node.args[0]), self.expr(node.args[1])
        acc_node = node.args[2] if len(node.args) >= 3 else kw.get("acc")
        acc = self.expr(acc_node) if acc_node is not None else None
        for k, v in kw.items():
            if k != "acc":
                self.expr(v)
        if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
            return UNKNOWN
        if len(a.shape) == 2:
            self.cls.union(a.shape[1], b.shape[0])
            out: Shape = (a.shape[0], b.shape[1])
            contraction = a.shape[1]
        elif len(a.shape) == 3:
            self.cls.union(a.shape[0], b.shape[0])
            self.cls.union(a.shape[2], b.shape[1])
            out = (a.shape[0], a.shape[1], b.shape[2])
            contraction = a.shape[2]
        else:
            return UNKNOWN
        self.dots.append((contraction, out))
        if acc is not None:
            out = self.unify(out, acc.shape) or out
        return _Val(out)

    def memory(self, node: ast.Call, short: str, kw: Mapping[str, ast.AST]) -> _Val:
        ptr = self.expr(node.args[0]) if node.args else UNKNOWN
        shape = ptr.shape
        rest = [*node.args[1:], *(v for k, v in kw.items() if k in ("mask", "other", "value"))]
        for a in rest:
            v = self.expr(a)
            if v.shape == () and shape:
                self.attach(v, _Val(shape))
            shape = self.unify(shape, v.shape)
        for k, v in kw.items():
            if k not in ("mask", "other", "value"):
                self.expr(v)
        return _Val(ptr.shape) if short == "load" else UNKNOWN

    def reduce(self, node: ast.Call, kw: Mapping[str, ast.AST]) -> _Val:
        x = self.expr(node.args[0])
        axis_node = node.args[1] if len(node.args) >= 2 else kw.get("axis")
        for a in node.args[2:]:
            self.expr(a)
        if x.shape is None:
            return UNKNOWN
        if axis_node is None:
            return SCALAR
        ax = literal_int(axis_node)
        if ax is None:
            return UNKNOWN
        ax = ax if ax >= 0 else len(x.shape) + ax
        keep = kw.get("keep_dims")
        if isinstance(keep, ast.Constant) and keep.value:
            return _Val(x.shape[:ax] + (ONE,) + x.shape[ax + 1 :])
        return _Val(x.shape[:ax] + x.shape[ax + 1 :])

    # -- statements ----------------------------------------------------------------------
    def block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.stmt(stmt)

    def bind(self, target: ast.AST, value: ast.AST | None, val: _Val) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = val
            if (
                isinstance(value, ast.Call)
                and callee(value) in SHAPED
                and val.shape is not None
                and target.id not in self.shaped
            ):
                self.shaped[target.id] = val.shape
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                for t, v in zip(target.elts, value.elts):
                    self.bind(t, v, self.expr(v))
            else:
                for t in target.elts:
                    self.bind(t, None, UNKNOWN)
        else:
            self.expr(target)

    def stmt(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign):
            tuple_value = isinstance(node.value, (ast.Tuple, ast.List))
            val = UNKNOWN if tuple_value else self.expr(node.value)
            for t in node.targets:
                self.bind(t, node.value, val)
            if self.in_dot_loop and len(node.targets) == 1:
                t = node.targets[0]
                if (
                    isinstance(t, ast.Name)
                    and isinstance(node.value, ast.BinOp)
                    and isinstance(node.value.op, (ast.Add, ast.Sub))
                    and isinstance(node.value.left, ast.Name)
                    and node.value.left.id == t.id
                ):
                    self.advance(node.value.right)
        elif isinstance(node, ast.AnnAssign):
            val = self.expr(node.value) if node.value is not None else UNKNOWN
            self.bind(node.target, node.value, val)
        elif isinstance(node, ast.AugAssign):
            target = self.expr(node.target)
            value = self.expr(node.value)
            shape = self.unify(target.shape, value.shape)
            if value.shape == () and target.shape and not target.address:
                self.attach(value, target)
            if isinstance(node.target, ast.Name):
                pending = target.pending | value.pending if shape == () else frozenset()
                keep = target.shape if target.shape is not None else shape
                self.env[node.target.id] = _Val(keep, pending, target.address)
            if self.in_dot_loop and isinstance(node.op, (ast.Add, ast.Sub)):
                self.advance(node.value)
        elif isinstance(node, ast.For):
            self.loop(node)
        elif isinstance(node, ast.While):
            for _ in range(2):
                self.expr(node.test)
                self.block(node.body)
            self.block(node.orelse)
        elif isinstance(node, ast.If):
            self.expr(node.test)
            self.block(node.body)
            self.block(node.orelse)
        elif isinstance(node, ast.With):
            for item in node.items:
                self.expr(item.context_expr)
            self.block(node.body)
        elif isinstance(node, (ast.Expr, ast.Return)):
            self.expr(node.value)
        elif isinstance(node, ast.Assert):
            self.expr(node.test)

    def advance(self, value: ast.AST) -> None:
        """A value added to a name in the loop around the dot steps it along k (a pointer
        advanced by `P * stride`)."""
        if isinstance(value, ast.Call):
            return
        for n in ast.walk(value):
            if isinstance(n, ast.Name) and n.id in self.tiles:
                self.step_k.add(_use(n))

    def loop(self, node: ast.For) -> None:
        it = node.iter
        var = node.target.id if isinstance(node.target, ast.Name) else None
        pending: frozenset[Hashable] = frozenset()
        if isinstance(it, ast.Call) and callee(it) in RANGE_CALLS:
            vals = [self.expr(a) for a in it.args]
            for k in it.keywords:
                self.expr(k.value)
            if len(vals) >= 2:
                start = vals[0]
                step = vals[2] if len(vals) >= 3 else SCALAR
                pending = start.pending | step.pending
            if id(node) in self.dot_loops and len(it.args) >= 3:
                for n in ast.walk(it.args[2]):
                    if isinstance(n, ast.Name) and n.id in self.tiles:
                        self.step_k.add(_use(n))
            counted = len(it.args) == 1 or (len(it.args) == 2 and literal_int(it.args[0]) == 0)
            if var is not None and it.args and counted:
                # `for j in range(cdiv(X, P))`: j counts P-blocks, `j * P` offsets by them
                key = f"loop:{var}:{node.lineno}"
                self.loop_keys[var] = key
                stop = it.args[-1]
                if isinstance(stop, ast.Name) and stop.id in self.once:
                    stop = self.once[stop.id]
                divisor = None
                if is_cdiv(stop):
                    divisor = stop.args[1] if len(stop.args) == 2 else None
                elif isinstance(stop, ast.BinOp) and isinstance(stop.op, ast.FloorDiv):
                    divisor = stop.right
                if divisor is not None:
                    for n in ast.walk(stop):
                        if isinstance(n, ast.Name) and n.id in self.tiles:
                            self.cls.union(_use(n), ("pid", key))
        else:
            self.expr(it)
        if var is not None:
            self.env[var] = _Val((), pending) if isinstance(it, ast.Call) else UNKNOWN
        else:
            self.bind(node.target, None, UNKNOWN)
        inner = id(node) in self.dot_loops
        self.in_dot_loop += inner
        for _ in range(2):
            self.block(node.body)
        self.in_dot_loop -= inner
        if var is not None:
            self.loop_keys.pop(var, None)
        self.block(node.orelse)

    # -- result --------------------------------------------------------------------------
    def run(self) -> ShapeRoles:
        self.block(self.kernel.body)
        cls = self.cls
        planes = [self.shaped[a] for a in self.accs if len(self.shaped.get(a, ())) == 2]
        m_dims = [p[0] for p in planes]
        n_dims = [p[1] for p in planes]
        m_roots = {cls.find(d) for d in m_dims}
        n_roots = {cls.find(d) for d in n_dims}
        k_dims = [
            c for c, out in self.dots
            if len(out) == 2 and cls.find(out[0]) in m_roots and cls.find(out[1]) in n_roots
        ]
        for group in (m_dims, n_dims, k_dims):
            for d in group[1:]:
                cls.union(group[0], d)
        if k_dims:
            for u in self.step_k:
                cls.union(u, k_dims[0])
        for u, size in self.dividends:
            roots = {cls.find(d) for d in self.size_links.get(size, ())}
            if len(roots) == 1:
                cls.union(u, next(iter(roots)))
        roles_at: dict[Hashable, set[str]] = {}
        for role, dims in (("m", m_dims), ("n", n_dims), ("k", k_dims)):
            if dims:
                roles_at.setdefault(cls.find(dims[0]), set()).add(role)

        def role_of(x: Hashable) -> str | None:
            found = roles_at.get(cls.find(x), set()) if cls.known(x) else set()
            return next(iter(found)) if len(found) == 1 else None

        out = ShapeRoles()
        for node in ast.walk(ast.Module(body=self.kernel.body, type_ignores=[])):
            if isinstance(node, ast.Name) and node.id in self.tiles:
                out.uses.setdefault(node.id, []).append(node)
                u = _use(node)
                out.roles[u] = role_of(u)
                serves = roles_at.get(cls.find(u), set()) if cls.known(u) else set()
                out.serves[u] = tuple(r for r in DOT_ROLES if r in serves)
                if len(serves) > 1:
                    self.refusals.setdefault(
                        node.id,
                        "the kernel's arithmetic relates its "
                        + " and ".join(out.serves[u]) + " dimensions",
                    )
        out.refusals = dict(self.refusals)
        for key in [k for k in cls.parent if isinstance(k, tuple) and k[0] == "pid"]:
            if isinstance(key[1], str):
                role = role_of(key)
                if role is not None:
                    out.pid_roles[key[1]] = role
        for size, dims in self.size_links.items():
            roles = {role_of(d) for d in dims}
            if len(roles) == 1 and None not in roles:
                out.size_roles[size] = next(iter(roles))  # type: ignore[arg-type]
            if roles - {None}:
                out.size_serves[size] = tuple(r for r in DOT_ROLES if r in roles)
        return out


def _first_term(expr: ast.AST) -> ast.AST:
    """The size a block count divides: `M` of `M`, `M + P - 1`, `M - 1 + P`."""
    while isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)):
        expr = expr.left
    return expr


def _pid_key(expr: ast.AST, pid: Collection[str]) -> str | None:
    """One program-id expression, for the blocks it scales (`pid_m`, `pid_m + 1` and
    `tl.program_id(0)` are keys; None: not computed from a program id)."""
    while (
        isinstance(expr, ast.BinOp)
        and isinstance(expr.op, (ast.Add, ast.Sub))
        and literal_int(expr.right) is not None
    ):
        expr = expr.left
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "to":
        return _pid_key(expr.func.value, pid)  # a cast (`.to(tl.int64)`) scales the same blocks
    if isinstance(expr, ast.Name):
        return f"name:{expr.id}" if expr.id in pid else None
    if isinstance(expr, ast.Call) and callee(expr) in PID_CALLS:
        arg = expr.args[0] if expr.args else next(
            (k.value for k in expr.keywords if k.arg == "axis"), None
        )
        ax = literal_int(arg)
        return f"axis:{ax}" if ax is not None else None
    if names_in(expr) & set(pid) or any(
        isinstance(c, ast.Call) and callee(c) in PID_CALLS for c in ast.walk(expr)
    ):
        return "expr:" + ast.dump(expr)
    return None


def shape_roles(
    kernel: ast.FunctionDef, functions: Mapping[str, ast.FunctionDef] | None = None
) -> ShapeRoles:
    """The role (m, n, k or undetermined) of every use of the kernel's constexprs."""
    return _Walk(kernel, functions or {}).run()


def tied_tiles(ir: KernelIR, kernel_name: str) -> dict[str, tuple[str, ...]]:
    """Constexprs of `kernel_name` whose uses serve several of the roles m, n, k -> those
    roles (a kernel without a dot accumulator has none)."""
    mod = PyModule(ir)
    kernel = next((k for k in mod.kernels() if k.name == kernel_name), None)
    if kernel is None:
        return {}
    found = shape_roles(kernel, jit_functions(mod))
    return {
        name: tuple(found.roles_of(name))
        for name in found.uses
        if len(found.roles_of(name)) > 1
    }


def needs_untie(
    ties: Mapping[str, Collection[str]], configs: Collection[Mapping[str, int]]
) -> bool:
    """Whether some role-keyed configuration gives the roles one constexpr serves different
    values (so that the tie must be split for the configuration to be expressed)."""
    return any(
        len({cfg[r] for r in roles if r in cfg}) > 1 for cfg in configs for roles in ties.values()
    )


@dataclass(frozen=True, slots=True)
class Untie:
    """The byte edits of an untie and the constexpr each tied one became, by role."""

    edits: tuple[ByteEdit, ...]
    names: Mapping[str, Mapping[str, str]]


def _fresh(base: str, role: str, taken: set[str]) -> str:
    suffix = role.upper() if base.upper() == base else role
    name = f"{base}_{suffix}"
    i = 2
    while name in taken:
        name = f"{base}_{suffix}{i}"
        i += 1
    taken.add(name)
    return name


def _identifiers(mod: PyModule) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(mod.tree):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.keyword) and n.arg:
            out.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.add(n.value)
    return out


def untie_edit(
    ir: KernelIR, kernel_name: str, names: Collection[str] | None = None
) -> Untie | SweepRefusal:
    """Split each tied constexpr of `kernel_name` (those `names`, default every one
    `tied_tiles` finds) into one constexpr per role; see the module docstring."""
    mod = PyModule(ir)
    kernel = next((k for k in mod.kernels() if k.name == kernel_name), None)
    if kernel is None:
        return SweepRefusal("no such kernel", {"kernel": kernel_name})
    shared = mod.sharing(kernel_name)
    if shared is not None:  # its launches pass the renamed constexprs
        return SweepRefusal(shared, {"kernel": kernel_name})
    found = shape_roles(kernel, jit_functions(mod))
    tied = [n for n in found.uses if len(found.roles_of(n)) > 1]
    if names is not None:
        tied = [n for n in tied if n in names]
    if not tied:
        return SweepRefusal(
            "no constexpr of the kernel serves several roles", {"kernel": kernel_name}
        )
    for name in tied:
        if name in found.refusals:
            return SweepRefusal(found.refusals[name], {"kernel": kernel_name, "tile": name})
        for use in found.uses[name]:
            if found.roles.get(_use(use)) is None:
                return SweepRefusal(
                    f"the role of {name} in `{_line_text(mod, use)}` is not determined",
                    {"kernel": kernel_name, "tile": name, "line": use.lineno},
                )
    taken = _identifiers(mod)
    new = {n: {r: _fresh(n, r, taken) for r in found.roles_of(n)} for n in tied}
    edits: list[ByteEdit] = []
    for name in tied:
        for use in found.uses[name]:
            role = found.roles[_use(use)] or ""
            edits.append(ByteEdit(mod.start(use), mod.end(use), new[name][role]))
    edits += _signature(mod, kernel, new)
    handled: set[int] = set()
    for dict_call in autotune_entries(mod, kernel):
        entries = dict_call.args[0]
        for k, v in zip(entries.keys, entries.values):
            if isinstance(k, ast.Constant) and k.value in new:
                value = mod.text(v)
                text = ", ".join(f'"{x}": {value}' for x in new[k.value].values())
                edits.append(ByteEdit(mod.start(k), mod.end(v), text))
                handled.add(id(k))
    for call in mod.launches(kernel.name):
        made = _launch(mod, kernel, call, new, found, handled)
        if isinstance(made, SweepRefusal):
            return made
        edits += made
    for n in ast.walk(mod.tree):
        if isinstance(n, ast.Constant) and n.value in new and id(n) not in handled:
            if mod.kernel_of(n) is kernel:
                continue
            return SweepRefusal(
                f"{n.value} is named in `{_line_text(mod, n)}`, which the untie cannot rewrite",
                {"kernel": kernel_name, "tile": n.value, "line": n.lineno},
            )
    return Untie(tuple(sorted(set(edits), key=lambda e: (e.start, e.end))), new)


def _line_text(mod: PyModule, node: ast.AST) -> str:
    line = mod.source.decode("utf-8").splitlines()[node.lineno - 1]
    return line.strip()


def _signature(
    mod: PyModule, kernel: ast.FunctionDef, new: Mapping[str, Mapping[str, str]]
) -> list[ByteEdit]:
    """Each tied parameter becomes its per-role parameters, with its annotation and default."""
    args = kernel.args
    positional = args.args
    defaults = dict(zip([a.arg for a in positional][len(positional) - len(args.defaults) :],
                        args.defaults))
    defaults.update(
        {a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None}
    )
    edits: list[ByteEdit] = []
    for a in [*positional, *args.kwonlyargs]:
        if a.arg not in new:
            continue
        end = mod.end(defaults[a.arg]) if a.arg in defaults else mod.end(a)
        text = mod.source[mod.start(a) : end].decode("utf-8")
        tail = text[len(a.arg) :]
        edits.append(
            ByteEdit(mod.start(a), end, ", ".join(f"{x}{tail}" for x in new[a.arg].values()))
        )
    return edits


def _launch(
    mod: PyModule,
    kernel: ast.FunctionDef,
    call: ast.Call,
    new: Mapping[str, Mapping[str, str]],
    found: ShapeRoles,
    handled: set[int],
) -> list[ByteEdit] | SweepRefusal:
    """One launch passes each new constexpr the value it passed the tied one."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return SweepRefusal(
            "a launch passes unpacked arguments: the untied constexprs cannot be checked",
            {"kernel": kernel.name},
        )
    args = launch_arguments(mod, kernel, call)
    edits: list[ByteEdit] = []
    for name, per_role in new.items():
        if name not in args:
            continue
        node = args[name]
        if any(isinstance(c, ast.Call) for c in ast.walk(node)):
            return SweepRefusal(
                f"the launch passes {name} a computed value", {"kernel": kernel.name, "tile": name}
            )
        value = mod.text(node)
        kw = mod.keyword(call, name)
        if kw is not None:
            text = ", ".join(f"{x}={value}" for x in per_role.values())
            edits.append(ByteEdit(mod.start(kw), mod.end(kw), text))
        else:
            text = ", ".join([value] * len(per_role))
            edits.append(ByteEdit(mod.start(node), mod.end(node), text))
    made = _meta_grid(mod, kernel, call, new, found, args, handled)
    if isinstance(made, SweepRefusal):
        return made
    return edits + made


def _meta_grid(
    mod: PyModule,
    kernel: ast.FunctionDef,
    call: ast.Call,
    new: Mapping[str, Mapping[str, str]],
    found: ShapeRoles,
    args: Mapping[str, ast.AST],
    handled: set[int],
) -> list[ByteEdit] | SweepRefusal:
    """A grid that reads a tied constexpr from the meta-parameters (`meta["BLOCK"]`) reads the
    new one of the role its division (`cdiv(M, meta["BLOCK"])`: the role M bounds) or its axis
    (the role a program id of that axis scales) says."""
    target = launch_grid(mod, call)
    if not isinstance(target, (ast.Lambda, ast.FunctionDef)):
        return []
    body = target.body
    shape = body[-1].value if isinstance(body, list) and isinstance(
        body[-1], ast.Return) else body
    host_size = {mod.text(v): k for k, v in args.items()}
    edits: list[ByteEdit] = []
    for sub in ast.walk(target):
        if not (
            isinstance(sub, ast.Subscript)
            and isinstance(sub.slice, ast.Constant)
            and sub.slice.value in new
        ):
            continue
        name = sub.slice.value
        role = None
        dividend = _dividend(target, sub)
        if dividend is not None:
            role = found.size_roles.get(host_size.get(mod.text(dividend), ""))
        if role is None and isinstance(shape, ast.AST):
            axis = _grid_axis(shape, sub)
            role = found.pid_roles.get(f"axis:{axis}") if axis is not None else None
        if role is None or role not in new[name]:
            return SweepRefusal(
                f"the launch grid reads {name} for a role that cannot be told",
                {"kernel": kernel.name, "tile": name},
            )
        edits.append(ByteEdit(mod.start(sub.slice), mod.end(sub.slice), f'"{new[name][role]}"'))
        handled.add(id(sub.slice))
    return edits

