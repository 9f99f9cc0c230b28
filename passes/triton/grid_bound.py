"""A launch grid sized from tensor shapes instead of from device data the host reads.

A host that sizes a grid axis from values held on the device,

    bounds = offsets.tolist()                    # or int(lengths.max()), x.max().item(), ...
    largest = max(hi - lo for lo, hi in zip(bounds[:-1], bounds[1:]))
    grid = (triton.cdiv(largest, BLOCK_M), ...)

waits for the GPU at the read (a copy to the host synchronizes) before it can issue the launch,
on every call. Where the kernel itself guards that axis against the same values,

    tile = tl.program_id(0)
    start = tl.load(offsets_ptr + g); end = tl.load(offsets_ptr + g + 1)
    if tile * BLOCK_M < end - start:      # or `if tile * BLOCK_M >= end - start: return` first
        ...every store and atomic of the kernel...

the programs past the host's count do nothing, and the axis may be sized by any upper bound of
the count: `grid-bound` writes `triton.cdiv(a.shape[0], BLOCK_M)` and drops the read.

What it proves, and refuses where it cannot (with the reason):
- The values read serve the grid only: the read is a top-level assignment of the launching
  function, every name it binds (and every name assigned from those) is read nowhere but in one
  grid axis, as the dividend X of `triton.cdiv(X, D)` or `(X + D - 1) // D`.
- The host's count covers the kernel's guard: X is the maximum over a tensor T of the form the
  kernel compares against, element `T[i]` (`int(T.max())`, `T.max().item()`, `max(T.tolist())`)
  or step `T[i + 1] - T[i]` (`max(hi - lo for lo, hi in zip(b[:-1], b[1:]))` of `b =
  T.tolist()`, `int((T[1:] - T[:-1]).max())`, `torch.diff(T).max()`); the launch passes T
  itself for the pointer the guard loads from, D for the block C of the guard `pid * C < V`,
  and V is that form over unmasked loads at one index that does not read the axis' program id.
  Every store and atomic of the kernel is under the guard (or after its early return), and the
  kernel does not read the axis' `tl.num_programs`. So a program with pid >= cdiv(X, D) has
  pid * C >= X >= V: it writes nothing, and more of them change no result.
- The bound holds for every valid input: each value V loads is a position along a dimension d
  of a tensor t the kernel addresses with it, an index that V's loads start (`rows = start +
  ...`) or that V's loads bound (a mask `rows < end`), multiplied by the stride the launch passes
  as `t.stride(d)`. A valid input keeps its positions inside the dimension they address
  (0 <= T[i] <= T[i + 1] <= t.shape[d] for steps, T[i] <= t.shape[d] for elements), so V <=
  t.shape[d] and `cdiv(t.shape[d], D)` programs cover every guard the kernel can pass.

The extra programs each load V and exit; the gate measures whether that costs more than the
synchronization saved. The de-optimization writes the read back: `n = int(T.max())` or
`n = int((T[1:] - T[:-1]).max())` before the statement holding the grid, which it reads in
place of `t.shape[d]`. Positions: `ast`'s (lines 1-indexed, byte columns 0-indexed).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, indent_of, line_start, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, callee, fresh_name, is_cdiv, literal_int, names_in
from passes.triton.launch import TRITON
from passes.triton.loop_interchange import _effect
from passes.triton.roles import (NUM_PROGRAMS, PID_CALLS, Launch, kernel_launches, launch_grid,
                                 program_axis)

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

# Calls that copy a device tensor's values to the host (by the method's name).
READS = frozenset({"tolist", "item", "cpu", "numpy"})
# Host casts that read a tensor's value when given a tensor's reduction.
CASTS = frozenset({"int", "float", "bool"})
REDUCTIONS = frozenset({"max", "amax", "min", "amin", "sum", "prod", "mean", "count_nonzero",
                        "any", "all", "argmax", "argmin"})
LOADS = frozenset({"tl.load", "triton.language.load"})
ELEMENT, STEP = "T[i]", "T[i + 1] - T[i]"


@dataclass(frozen=True, slots=True)
class _Axis:
    """One grid axis whose count is `cdiv(dividend, divisor)`."""

    index: int
    dividend: ast.expr
    divisor: ast.expr
    meta: str | None
    """The grid function's meta-parameter name (`lambda META: ...`), None for a tuple."""


@dataclass(frozen=True, slots=True)
class _Guard:
    """The kernel's guard `pid * block < V` on one program axis: V's form over the tensor the
    pointer `pointer` points to, and the dimension (`t`, `d`: the host's tensor text and axis)
    every position V loads addresses."""

    form: str
    pointer: str
    block: str
    dims: tuple[tuple[str, int], ...]


# -- host side ---------------------------------------------------------------------------------
def _host_function(mod: PyModule, launch: Launch) -> ast.FunctionDef | None:
    fn = mod.enclosing(launch.site, ast.FunctionDef)
    return fn if isinstance(fn, ast.FunctionDef) and mod.kernel_of(launch.site) is None else None


def _single(fn: ast.FunctionDef) -> dict[str, ast.Assign]:
    """Name -> its one top-level `name = value` in `fn`, for names bound exactly once there."""
    counts: dict[str, int] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            counts[node.id] = counts.get(node.id, 0) + 1
    return {s.targets[0].id: s for s in fn.body if isinstance(s, ast.Assign)
            and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
            and counts.get(s.targets[0].id) == 1}


def _is_read(node: ast.AST) -> bool:
    """`node` copies device values to the host: `.tolist()`, `.item()`, `.cpu()`, `.numpy()`,
    or `int(...)` / `float(...)` / `bool(...)` of a tensor reduction (`t.max()`,
    `torch.max(t)`)."""
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Attribute) and node.func.attr in READS:
        return True
    return callee(node) in CASTS and len(node.args) == 1 and any(
        isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
        and c.func.attr in REDUCTIONS and not callee(c).startswith(("math.", "np.", "numpy."))
        for c in ast.walk(node.args[0]))


def _tainted(fn: ast.FunctionDef, grid: ast.AST | None) -> tuple[set[str], list[ast.Assign]]:
    """The names bound from a host read of device values (and from those, in turn), and the
    top-level assignments that bind them, in source order; the assignment of the grid itself
    (`grid = (...)`, its value `grid`) is not one of them."""
    single = _single(fn)
    names: set[str] = set()
    stmts: list[ast.Assign] = []
    for stmt in fn.body:
        if not isinstance(stmt, ast.Assign) or stmt.value is grid or len(stmt.targets) != 1 \
                or not isinstance(stmt.targets[0], ast.Name) or stmt.targets[0].id not in single:
            continue
        if any(_is_read(n) for n in ast.walk(stmt.value)) or names_in(stmt.value) & names:
            names.add(stmt.targets[0].id)
            stmts.append(stmt)
    return names, stmts


def _grid_axes(mod: PyModule, launch: Launch) -> tuple[ast.AST | None, list[_Axis]]:
    """The grid node of `launch` and its axes written `cdiv(X, D)` (others left out)."""
    grid = launch_grid(mod, launch.site)
    meta = None
    body = grid
    if isinstance(grid, ast.Lambda):
        meta = grid.args.args[0].arg if grid.args.args else None
        body = grid.body
    if not isinstance(body, (ast.Tuple, ast.List)):
        return grid, []
    out = []
    for i, e in enumerate(body.elts):
        if is_cdiv(e, 2):
            out.append(_Axis(i, e.args[0], e.args[1], meta))
        elif isinstance(e, ast.BinOp) and isinstance(e.op, ast.FloorDiv) \
                and isinstance(e.left, ast.BinOp) and isinstance(e.left.op, ast.Sub) \
                and literal_int(e.left.right) == 1 and isinstance(e.left.left, ast.BinOp) \
                and isinstance(e.left.left.op, ast.Add) \
                and ast.dump(e.left.left.right) == ast.dump(e.right):
            out.append(_Axis(i, e.left.left.left, e.right, meta))
    return grid, out


def _inline(node: ast.expr, single: dict[str, ast.Assign], depth: int = 0) -> ast.expr:
    """`node` with the names of `single` (bound once at the top of the host function) replaced
    by their values."""
    if depth > 8:
        return node

    class _Swap(ast.NodeTransformer):
        def visit_Name(self, n: ast.Name) -> ast.AST:  # noqa: N802 — ast API
            if n.id in single and isinstance(n.ctx, ast.Load):
                return _inline(single[n.id].value, single, depth + 1)
            return n

    return _Swap().visit(ast.parse(ast.unparse(node), mode="eval").body)


def _unwrapped(node: ast.expr) -> ast.expr:
    """`node` without scalar reads around it: `int(E)`, `float(E)`, `E.item()`, `E.cpu()`."""
    while True:
        if isinstance(node, ast.Call) and callee(node) in ("int", "float") and len(node.args) == 1:
            node = node.args[0]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("item", "cpu", "tolist", "numpy") and not node.args:
            node = node.func.value
        else:
            return node


def _step_of(node: ast.expr) -> str | None:
    """T where `node` is `T[1:] - T[:-1]`, `torch.diff(T)` or `T.diff()`."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) \
            and isinstance(node.left, ast.Subscript) and isinstance(node.right, ast.Subscript) \
            and ast.dump(node.left.value) == ast.dump(node.right.value) \
            and ast.unparse(node.left.slice) == "1:" and ast.unparse(node.right.slice) == ":-1":
        return ast.unparse(node.left.value)
    if isinstance(node, ast.Call) and callee(node) == "torch.diff" and len(node.args) == 1:
        return ast.unparse(node.args[0])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "diff" and not node.args:
        return ast.unparse(node.func.value)
    return None


def host_form(node: ast.expr) -> tuple[str, str] | None:
    """(T, form) where the inlined host value `node` is the maximum of `form` over the tensor T
    (module docstring); None for anything else."""
    node = _unwrapped(node)
    inner: ast.expr | None = None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in ("max", "amax") and not node.args and not node.keywords:
        inner = node.func.value
    elif isinstance(node, ast.Call) and callee(node) in ("torch.max", "torch.amax") \
            and len(node.args) == 1 and not node.keywords:
        inner = node.args[0]
    if inner is not None:
        step = _step_of(inner)
        if step is not None:
            return step, STEP
        return (ast.unparse(inner), ELEMENT) if isinstance(inner, ast.Name) else None
    if not (isinstance(node, ast.Call) and callee(node) == "max" and len(node.args) == 1
            and not node.keywords):
        return None
    arg = node.args[0]
    if isinstance(arg, ast.GeneratorExp) and len(arg.generators) == 1 \
            and not arg.generators[0].ifs:
        gen = arg.generators[0]
        it, target = gen.iter, gen.target
        if isinstance(target, ast.Tuple) and len(target.elts) == 2 \
                and all(isinstance(t, ast.Name) for t in target.elts) \
                and isinstance(it, ast.Call) and callee(it) == "zip" and len(it.args) == 2 \
                and all(isinstance(a, ast.Subscript) for a in it.args):
            lo, hi = (t.id for t in target.elts)
            first, second = it.args
            base = ast.dump(_unwrapped(first.value))
            if base == ast.dump(_unwrapped(second.value)) \
                    and ast.unparse(first.slice) == ":-1" and ast.unparse(second.slice) == "1:" \
                    and ast.dump(arg.elt) == ast.dump(ast.parse(f"{hi} - {lo}", mode="eval").body) \
                    and isinstance(_unwrapped(first.value), ast.Name) \
                    and first.value is not _unwrapped(first.value):
                return ast.unparse(_unwrapped(first.value)), STEP
        return None
    if arg is not _unwrapped(arg) and isinstance(_unwrapped(arg), ast.Name):
        return ast.unparse(_unwrapped(arg)), ELEMENT
    return None


# -- kernel side -------------------------------------------------------------------------------
class _Kernel:
    """A kernel's names bound once (value), its parameters and the launch's values for them."""

    def __init__(self, mod: PyModule, kernel: ast.FunctionDef, launch: Launch) -> None:
        self.mod, self.kernel = mod, kernel
        self.params = {a.arg for a in kernel.args.args}
        self.values = {k: ast.unparse(v) for k, v in launch.values().items()}
        counts: dict[str, int] = {}
        for node in ast.walk(kernel):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                counts[node.id] = counts.get(node.id, 0) + 1
        self.bound = {n.targets[0].id: n.value for n in ast.walk(kernel)
                      if isinstance(n, ast.Assign) and len(n.targets) == 1
                      and isinstance(n.targets[0], ast.Name) and counts[n.targets[0].id] == 1}

    def closure(self, node: ast.AST) -> set[str]:
        """The names `node` reads, with those the names bound once read, transitively."""
        out: set[str] = set()
        todo = list(names_in(node))
        while todo:
            name = todo.pop()
            if name in out:
                continue
            out.add(name)
            if name in self.bound:
                todo.extend(names_in(self.bound[name]))
        return out

    def pid_name(self, axis: int) -> str | None:
        found = [n for n, v in self.bound.items() if isinstance(v, ast.Call)
                 and callee(v) in PID_CALLS and program_axis(v) == axis]
        return found[0] if len(found) == 1 else None

    def load_of(self, node: ast.expr) -> tuple[str, str, int] | None:
        """(pointer parameter, index text without constants, constant) of an unmasked
        `tl.load(P + index + k)` that `node` is (through a name bound once)."""
        while isinstance(node, ast.Name) and node.id in self.bound:
            node = self.bound[node.id]
        if not (isinstance(node, ast.Call) and callee(node) in LOADS and len(node.args) == 1
                and not node.keywords):
            return None
        terms, const = [], 0
        todo = [node.args[0]]
        while todo:
            t = todo.pop()
            if isinstance(t, ast.BinOp) and isinstance(t.op, ast.Add):
                todo += [t.left, t.right]
            elif literal_int(t) is not None:
                const += literal_int(t)
            else:
                terms.append(t)
        pointers = [t for t in terms if isinstance(t, ast.Name) and t.id in self.params
                    and t.id in self.values]
        if len(pointers) != 1:
            return None
        rest = sorted(ast.unparse(t) for t in terms if t is not pointers[0])
        return pointers[0].id, " + ".join(rest) or "0", const

    def form(self, node: ast.expr, pid: str) -> tuple[str, str] | None:
        """(pointer, form) where `node` is an element or step over unmasked loads of one
        pointer at one index that does not read `pid`."""
        node = self._deref(node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
            hi, lo = self.load_of(node.left), self.load_of(node.right)
            if hi and lo and hi[:2] == lo[:2] and hi[2] == lo[2] + 1 \
                    and pid not in self.closure(ast.parse(hi[1], mode="eval")):
                return hi[0], STEP
            return None
        one = self.load_of(node)
        if one and pid not in self.closure(ast.parse(one[1], mode="eval")):
            return one[0], ELEMENT
        return None

    def _deref(self, node: ast.expr) -> ast.expr:
        while isinstance(node, ast.Name) and node.id in self.bound \
                and isinstance(self.bound[node.id], ast.BinOp):
            node = self.bound[node.id]
        return node

    def atoms(self, node: ast.expr) -> set[str]:
        """The names of `node` (through names bound to a difference) bound to single loads."""
        node = self._deref(node)
        parts = [node.left, node.right] if isinstance(node, ast.BinOp) else [node]
        return {p.id for p in parts if isinstance(p, ast.Name) and self.load_of(p)}

    def dims(self, atoms: set[str]) -> list[tuple[str, int]]:
        """The dimensions (host tensor text, axis) that every name of `atoms` is a position
        along: a load, store or atomic adds it to an index (or its mask bounds the index, or a
        name added to it, by it: `rows < end`) that the kernel multiplies by the stride the
        launch passes as `t.stride(d)`. The index's sums are read through names bound once;
        one that subtracts is left out (its position is not the atom's)."""
        found: dict[str, set[tuple[str, int]]] = {a: set() for a in atoms}
        for call in ast.walk(self.kernel):
            last = callee(call).split(".")[-1] if isinstance(call, ast.Call) else ""
            if not (call.args if isinstance(call, ast.Call) else None) \
                    or not (last in ("load", "store") or last.startswith("atomic_")):
                continue
            mask = next((k.value for k in call.keywords if k.arg == "mask"), None)
            place = {"load": 1, "store": 2}.get(last, 2)
            if mask is None and len(call.args) > place:
                mask = call.args[place]
            bounds = self._mask_bounds(mask) if mask is not None else []
            for index, dim in self._strided(call.args[0]):
                added = self._added(index)
                if added is None:
                    continue
                for atom in atoms & added:
                    found[atom].add(dim)
                for small, big in bounds:
                    if big in atoms and (small in added or small == _bare(index)):
                        found[big].add(dim)
        common = set.intersection(*found.values()) if found else set()
        return sorted(common)

    def _added(self, index: ast.expr) -> set[str] | None:
        """The names `index` adds (through names bound once to sums, and `x[:, None]`), with
        the names themselves; None where it subtracts or adds a negative literal."""
        out: set[str] = set()
        todo = [index]
        while todo:
            t = todo.pop()
            if isinstance(t, ast.Subscript):
                todo.append(t.value)
            elif isinstance(t, ast.Name):
                out.add(t.id)
                v = self.bound.get(t.id)
                if isinstance(v, ast.BinOp) and isinstance(v.op, (ast.Add, ast.Sub)):
                    todo.append(v)
            elif isinstance(t, ast.BinOp) and isinstance(t.op, ast.Add):
                todo += [t.left, t.right]
            elif isinstance(t, ast.BinOp) and isinstance(t.op, ast.Sub) \
                    or isinstance(t, ast.UnaryOp) or (literal_int(t) or 0) < 0:
                return None
        return out

    def _mask_bounds(self, mask: ast.expr) -> list[tuple[str, str]]:
        """(small, big) for each `small < big` (or <=, >, >=) of `mask` between two names
        (`x[:, None]` read as x), through names bound once to masks."""
        out = []
        for cmp in ast.walk(self._masked(mask)):
            if isinstance(cmp, ast.Compare) and len(cmp.ops) == 1 \
                    and isinstance(cmp.ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE)):
                small, big = _bare(cmp.left), _bare(cmp.comparators[0])
                if isinstance(cmp.ops[0], (ast.Gt, ast.GtE)):
                    small, big = big, small
                if small and big:
                    out.append((small, big))
        return out

    def _masked(self, mask: ast.expr) -> ast.expr:
        """`mask` with names bound once to masks (`&` of comparisons) written in."""
        bound = self.bound

        class _Swap(ast.NodeTransformer):
            def visit_Name(self, n: ast.Name) -> ast.AST:  # noqa: N802 — ast API
                v = bound.get(n.id)
                if isinstance(v, (ast.Compare, ast.BinOp)) and any(
                        isinstance(x, ast.Compare) for x in ast.walk(v)):
                    return self.visit(ast.parse(ast.unparse(v), mode="eval").body)
                return n

        return _Swap().visit(ast.parse(ast.unparse(mask), mode="eval").body)

    def _strided(self, pointer: ast.expr) -> list[tuple[ast.expr, tuple[str, int]]]:
        """(index, (tensor, axis)) for each `index * S` term of `pointer` (names bound once to
        sums written in) where the launch passes `t.stride(d)` for the parameter S."""
        out = []
        todo = [pointer]
        while todo:
            t = todo.pop()
            if isinstance(t, ast.Name) and isinstance(self.bound.get(t.id), ast.BinOp) \
                    and isinstance(self.bound[t.id].op, ast.Add):
                todo.append(self.bound[t.id])
            elif isinstance(t, ast.BinOp) and isinstance(t.op, ast.Add):
                todo += [t.left, t.right]
            elif isinstance(t, ast.BinOp) and isinstance(t.op, ast.Mult):
                for stride, index in ((t.right, t.left), (t.left, t.right)):
                    dim = self._stride_dim(stride)
                    if dim is not None:
                        out.append((index, dim))
        return out

    def _stride_dim(self, node: ast.expr) -> tuple[str, int] | None:
        if not (isinstance(node, ast.Name) and node.id in self.params and node.id in self.values):
            return None
        value = ast.parse(self.values[node.id], mode="eval").body
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                and value.func.attr == "stride" and len(value.args) == 1 \
                and literal_int(value.args[0]) is not None \
                and isinstance(value.func.value, ast.Name):
            return value.func.value.id, literal_int(value.args[0])
        return None

    def guard(self, axis: int) -> _Guard | str:
        """The guard on program axis `axis` that every effect of the kernel is under, or why
        there is none."""
        pid = self.pid_name(axis)
        if pid is None:
            return f"the kernel reads program axis {axis} through no one name"
        if any(program_axis(c) in (axis, None) for c in self.mod.calls(self.kernel, NUM_PROGRAMS)):
            return f"the kernel reads tl.num_programs({axis}): a larger grid changes what it reads"
        body = [s for s in self.kernel.body
                if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        for i, stmt in enumerate(body):
            early = isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1 \
                and isinstance(stmt.body[0], ast.Return) and stmt.body[0].value is None
            last = isinstance(stmt, ast.If) and not stmt.orelse \
                and all(_effect(self.mod, s) is None for s in body[i + 1:])
            if not (early or last):
                if _effect(self.mod, stmt) is not None:
                    return (f"line {stmt.lineno} writes memory before any guard of program axis "
                            f"{axis}")
                continue
            got = self._compare(stmt.test, pid, negated=early)
            if got is not None:
                return got
            if _effect(self.mod, stmt) is not None:
                return (f"the branch on line {stmt.lineno} writes memory under no test of "
                        f"`{pid} * BLOCK` against values the kernel loads")
        return f"no branch of the kernel holds its writes under a test of `{pid}`"

    def _compare(self, test: ast.expr, pid: str, negated: bool) -> _Guard | None:
        tests = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) \
            and not negated else [test]
        for t in tests:
            if not (isinstance(t, ast.Compare) and len(t.ops) == 1):
                continue
            op = t.ops[0]
            small, big = (t.left, t.comparators[0])
            if isinstance(op, ast.Gt if not negated else ast.LtE):
                small, big = big, small
            elif not isinstance(op, ast.Lt if not negated else ast.GtE):
                continue
            block = self._times_pid(small, pid)
            form = self.form(big, pid) if block is not None else None
            if form is None:
                continue
            dims = self.dims(self.atoms(big))
            return _Guard(form[1], form[0], block, tuple(dims))
        return None

    def _times_pid(self, node: ast.expr, pid: str) -> str | None:
        """The block parameter C where `node` is `pid * C` or `C * pid`."""
        node = self._deref(node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            for a, b in ((node.left, node.right), (node.right, node.left)):
                if isinstance(a, ast.Name) and a.id == pid and isinstance(b, ast.Name) \
                        and b.id in self.params:
                    return b.id
        return None


def _bare(node: ast.expr) -> str | None:
    """The name `node` is, with `[:, None]`-style subscripts taken off; None for others."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


# -- the plan ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Found:
    kernel: ast.FunctionDef
    launch: Launch
    host: ast.FunctionDef
    axis: _Axis


def _divisor_matches(k: _Kernel, guard: _Guard, axis: _Axis) -> bool:
    text = ast.unparse(axis.divisor)
    if axis.meta is not None and text in (f"{axis.meta}[{guard.block!r}]",
                                          f'{axis.meta}["{guard.block}"]'):
        return True
    return k.values.get(guard.block) == text


def _sites_of(mod: PyModule) -> list[tuple[_Found, bool]]:
    """(the axis, present) of each launch's grid axis that reads a host read of device values
    (present False), or is `cdiv(t.shape[d], D)` under a guard that ties it to a tensor the
    kernel loads (present True)."""
    out = []
    for kernel in mod.kernels():
        for launch in kernel_launches(mod, kernel):
            host = _host_function(mod, launch)
            if host is None or launch.partial is not None:
                continue
            grid, axes = _grid_axes(mod, launch)
            tainted, _ = _tainted(host, grid)
            for axis in axes:
                found = _Found(kernel, launch, host, axis)
                if names_in(axis.dividend) & tainted \
                        or any(_is_read(n) for n in ast.walk(axis.dividend)):
                    out.append((found, False))
                elif _shape_dim(axis.dividend) is not None:
                    k = _Kernel(mod, kernel, launch)
                    guard = k.guard(axis.index)
                    if isinstance(guard, _Guard) and _shape_dim(axis.dividend) in guard.dims \
                            and _divisor_matches(k, guard, axis):
                        out.append((found, True))
    return out


def _shape_dim(node: ast.expr) -> tuple[str, int] | None:
    """(t, d) of `t.shape[d]` / `t.size(d)`."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
            and node.value.attr == "shape" and isinstance(node.value.value, ast.Name) \
            and literal_int(node.slice) is not None:
        return node.value.value.id, literal_int(node.slice)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "size" and isinstance(node.func.value, ast.Name) \
            and len(node.args) == 1 and literal_int(node.args[0]) is not None:
        return node.func.value.id, literal_int(node.args[0])
    return None


def _refusal_or_edits(mod: PyModule, found: _Found) -> list[ByteEdit] | str:
    kernel, launch, host, axis = found.kernel, found.launch, found.host, found.axis
    grid = launch_grid(mod, launch.site)
    tainted, stmts = _tainted(host, grid)
    if names_in(axis.divisor) & tainted:
        return "the grid's divisor reads the values read from the device too"
    # The names the axis' count is computed from, and the assignments binding them.
    needed = names_in(axis.dividend) & tainted
    for s in reversed(stmts):
        if s.targets[0].id in needed:
            needed |= names_in(s.value) & tainted
    stmts = [s for s in stmts if s.targets[0].id in needed]
    inside = {id(n) for n in ast.walk(axis.dividend)}
    own = {id(n) for s in stmts for n in ast.walk(s)}
    for node in ast.walk(host):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in needed \
                and id(node) not in inside and id(node) not in own:
            return (f"`{node.id}` (read from the device) is also used on line {node.lineno} "
                    "outside the grid's count: the read serves more than the launch's size")
    got = host_form(_inline(axis.dividend, {s.targets[0].id: s for s in stmts}))
    if got is None:
        return (f"`{ast.unparse(axis.dividend)}` is not the maximum of a tensor's elements or "
                "steps: no guard of the kernel can be shown to cover it")
    tensor, form = got
    k = _Kernel(mod, kernel, launch)
    guard = k.guard(axis.index)
    if isinstance(guard, str):
        return guard
    if k.values.get(guard.pointer) != tensor:
        return (f"the kernel's guard loads `{guard.pointer}`, which the launch passes as "
                f"`{k.values.get(guard.pointer)}`, not `{tensor}`, the tensor the host reads")
    if guard.form != form:
        return (f"the host counts the maximum of `{form}` over `{tensor}`; the kernel guards "
                f"against `{guard.form}`")
    if not _divisor_matches(k, guard, axis):
        return (f"the grid divides by `{ast.unparse(axis.divisor)}`, not the block "
                f"`{guard.block}` the kernel's guard multiplies its program id by")
    if not guard.dims:
        return (f"no dimension is shown to bound the values `{guard.pointer}` holds: none is "
                "addressed or masked with them through a stride the launch passes as "
                "`t.stride(d)`")
    # A tensor the grid's statement can name: a parameter, else one bound before it.
    at = next(s for s in host.body if mod.start(s) <= mod.start(axis.dividend) < mod.end(s))
    params = {a.arg for a in host.args.args}
    before = params | {n.id for s in host.body if s.lineno < at.lineno for n in ast.walk(s)
                       if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    named = sorted((dim for dim in guard.dims if dim[0] in before),
                   key=lambda dim: dim[0] not in params)
    if not named:
        return (f"the dimensions that bound `{guard.pointer}`'s values ({guard.dims}) belong to "
                "tensors made after the grid")
    t, d = named[0]
    edits = [ByteEdit(*mod.span(axis.dividend), f"{t}.shape[{d}]")]
    for s in stmts:
        edits.append(ByteEdit(*mod.stmt_span(s), ""))
    return edits


def _restore_edits(mod: PyModule, found: _Found) -> list[ByteEdit] | str:
    k = _Kernel(mod, found.kernel, found.launch)
    guard = k.guard(found.axis.index)
    if isinstance(guard, str):
        return guard
    tensor = k.values.get(guard.pointer)
    if tensor is None or not tensor.isidentifier():
        return f"the launch passes `{tensor}` for `{guard.pointer}`: no name to read on the host"
    read = f"int({tensor}.max())" if guard.form == ELEMENT \
        else f"int(({tensor}[1:] - {tensor}[:-1]).max())"
    taken = {n.id for n in ast.walk(found.host) if isinstance(n, ast.Name)} \
        | {a.arg for a in found.host.args.args}
    name = fresh_name("largest", taken)
    stmt = next(s for s in found.host.body
                if mod.start(s) <= mod.start(found.axis.dividend) < mod.end(s))
    at = line_start(mod.source, mod.start(stmt))
    return [ByteEdit(at, at, f"{indent_of(mod.source, mod.start(stmt))}{name} = {read}\n"),
            ByteEdit(*mod.span(found.axis.dividend), name)]


@dataclass(frozen=True, slots=True)
class GridBound(Pass):
    """A grid axis counted from device values the host reads -> counted from a tensor's shape,
    the read gone, where the kernel's own guard leaves the extra programs idle. Both ways."""

    name: ClassVar[str] = "grid-bound"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = ("a grid axis sized from device values read on the host (a "
                              "synchronization each call) sized from a tensor's shape instead, "
                              "where the kernel's guard idles the extra programs")
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    # Offered without a card wherever a grid axis reads device values. The read waits for the
    # GPU each call (on an H200's grouped GEMM, 0.12 ms of kernel ran 0.205-0.235 ms end to
    # end); the shape bound launches idle programs that load their guard's values and exit,
    # which costs more where the bound is far above the data's count. A modest prior: the
    # gate weighs the two.
    prior: ClassVar[float] = 1.1

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        return [make_site(self.name, ir, index, mod.stmt_span(f.host), present,
                          {"kernel": f.kernel.name, "line": f.axis.dividend.lineno,
                           "axis": f.axis.index}, mod.span(f.axis.dividend))
                for f, present in _sites_of(mod)]

    def _at(self, ir: KernelIR, site: Site, present: bool) -> tuple[PyModule, _Found] | None:
        mod = PyModule(ir)
        for f, p in _sites_of(mod):
            if p == present and f.kernel.name == site.detail.get("kernel") \
                    and f.axis.index == site.detail.get("axis") \
                    and f.axis.dividend.lineno == site.detail.get("line"):
                return mod, f
        return None

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        got = self._at(ir, site, False)
        if got is None:
            return Skipped("no grid axis read from the device at the site", {"site": site.anchor})
        mod, found = got
        edits = _refusal_or_edits(mod, found)
        if isinstance(edits, str):
            return Skipped(edits, {"kernel": found.kernel.name, "axis": found.axis.index})
        return finish(ir, site, edits)

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        got = self._at(ir, site, True)
        if got is None:
            return Skipped("no grid axis sized from a shape under a guard at the site",
                           {"site": site.anchor})
        mod, found = got
        edits = _restore_edits(mod, found)
        if isinstance(edits, str):
            return Skipped(edits, {"kernel": found.kernel.name, "axis": found.axis.index})
        return finish(ir, site, edits)
