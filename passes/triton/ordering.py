"""Program-ordering passes of Triton kernels: grouped (L2-friendly) tile order and the
persistent grid.

The grouped order finds the program indices that walk a dot accumulator's rows and columns by
what they index (`passes.triton.untie.shape_roles`), not by their names, in 1-D grids
(`a = pid // x; b = pid % x`) and 2-D grids (one program-id axis each, which the forward rule
merges into one, on the host too).
"""
from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from passes._source import ByteEdit, finish, indent_of, line_end, line_start, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import (PyModule, callee, fresh_name, is_cdiv, literal_int, names_in,
                               walk_stmts)
from passes.triton.autotune import _module_names
from passes.triton.launch import TRITON
from passes.triton.persist import Walk, feeds_dot, loop_keywords, walk_edits, walk_of
from passes.triton.roles import (
    PID_CALLS,
    _facts,
    assignments,
    constexpr_params,
    jit_functions,
    launch_arguments,
    launch_grid,
    param_values,
    pid_names,
    program_axis,
    tile_roles,
)
from passes.triton.untie import _identifiers, shape_roles

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

def _cdivs(mod: PyModule, expr: ast.AST) -> list[ast.Call]:
    """`cdiv` calls in `expr` and in the assignments (same function) of the names it uses."""
    scope = mod.enclosing(expr, ast.FunctionDef)
    seen: set[str] = set()
    todo, calls = [expr], []
    while todo:
        node = todo.pop()
        calls += [c for c in ast.walk(node) if is_cdiv(c)]
        for name in names_in(node) - seen:
            seen.add(name)
            for stmt in ast.walk(scope) if scope is not None else []:
                if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name
                                                        for t in stmt.targets):
                    todo.append(stmt.value)
    return calls


def _target(stmt: ast.stmt) -> str | None:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    return None


def _kernel_named(mod: PyModule, name: str) -> ast.FunctionDef | None:
    return next((k for k in mod.kernels() if k.name == name), None)


def _comment_start(source: bytes, start: int) -> int:
    """The start of the comment lines directly above the line starting at `start` (at its
    indentation), or `start`: they describe that statement and go when it goes."""
    indent = indent_of(source, start).encode("utf-8")
    while start > 0:
        above = line_start(source, start - 1)
        line = source[above:start]
        if not (line.startswith(indent) and line[len(indent):].startswith(b"#")):
            break
        start = above
    return start


def _lines_span(mod: PyModule, first: ast.stmt, last: ast.stmt) -> tuple[int, int]:
    return line_start(mod.source, mod.start(first)), line_end(mod.source, mod.end(last) - 1)


# -- grouped tile order ---------------------------------------------------------------------
DEFAULT_GROUP = 8
"""The value a group-size constexpr the rule adds is launched with (Triton's GROUP_M = 8)."""


@dataclass(frozen=True, slots=True)
class _Axis:
    """One dimension of a kernel's dot accumulator as its programs index it (found by role)."""

    tile: str
    """The accumulator's block along it (`acc = tl.zeros((tile_m, tile_n))`)."""
    name: str | None
    """The name holding the block index (`offs = name * tile + tl.arange(..)`); None: the
    program id is used inline."""
    axis: int | None
    """The grid axis whose program id is the block index (a 2-D grid); None: computed."""
    sizes: tuple[str, ...]
    """The sizes its offsets are bounded by (`offs_m < M`)."""


@dataclass(frozen=True, slots=True)
class _Tiling:
    m: _Axis
    n: _Axis


@dataclass(frozen=True, slots=True)
class _RowMajor:
    """`outer = pid // count` and `inner = pid % count` in one block: consecutive programs walk
    the inner dimension; the outer one is the dimension a grouped order groups."""

    block: list[ast.stmt]
    outer: int  # index in `block` of the outer statement
    inner: int
    pid: str
    count: ast.expr
    role: str  # "m" or "n": the accumulator dimension the outer index walks


@dataclass(frozen=True, slots=True)
class _GroupShape:
    """What the grouped-ordering rule found in one kernel block."""

    block: list[ast.stmt]
    first: int  # index of the first statement of the region
    last: int   # index of the last statement (the later block index)
    pid: str    # the linear program index
    num_pid_n: str  # the block count the group size multiplies (along the inner dimension)
    outer: str  # the grouped block index
    inner: str


def _pid_axis(node: ast.AST | None) -> int | None:
    """The axis of `tl.program_id(axis)` (a literal; also cast, `.to(tl.int64)`), else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to":
        return _pid_axis(node.func.value)
    if not (isinstance(node, ast.Call) and callee(node) in PID_CALLS):
        return None
    return program_axis(node)


def _tiling(mod: PyModule, kernel: ast.FunctionDef) -> _Tiling | str:
    """Which program index walks the rows (m) and which the columns (n) of the kernel's dot
    accumulator, read from how the offsets of its loads and store are built (`shape_roles`),
    never from names; the reason when that cannot be told."""
    functions = jit_functions(mod)
    facts = _facts(kernel, functions)
    accs = sorted(facts.shapes[n] for n in facts.dotted_into if n in facts.shapes)
    if not (accs and facts.dot_loop):
        # an accumulator updated some other way (`tl.sum` of a broadcast product, as the
        # tensor-core step's de-optimization leaves it): its rows and columns by the store
        return _stored_tiling(kernel, facts) or "no tl.dot accumulator"
    if not all(accs[0]):
        return "the accumulator's blocks are not named"
    found = shape_roles(kernel, functions)
    assigns = assignments(kernel, augmented=True)
    axes = []
    for role, tile in zip(("m", "n"), accs[0]):
        keys = [k for k, r in found.pid_roles.items() if r == role and not k.startswith("loop:")]
        if not keys:
            return f"no program index walks the accumulator's {role} blocks"
        if any(k.startswith("expr:") for k in keys):
            return f"the {role} block index is an expression, not a name or a program id"
        on_axes = {int(k[len("axis:"):]) for k in keys if k.startswith("axis:")}
        names = sorted(k[len("name:"):] for k in keys if k.startswith("name:"))
        if len(on_axes) > 1 or len(names) > 1:
            return f"several program indices walk the {role} blocks: {', '.join(sorted(keys))}"
        axis = next(iter(on_axes), None)
        if axis is not None and names and \
                [_pid_axis(v) for v in assigns.get(names[0], [])] != [axis]:
            return f"the {role} block index {names[0]} mixes program-id axis {axis} with others"
        # a size bounding this dimension alone; else one bounding it among others (a square
        # product's one size): the grid still counts this dimension's blocks by it
        sizes = tuple(sorted(s for s, r in found.size_roles.items() if r == role)) or \
            tuple(sorted(s for s, r in found.size_serves.items() if role in r))
        axes.append(_Axis(tile, names[0] if names else None, axis, sizes))
    m, n = axes
    if (m.axis is None) != (n.axis is None):
        return "one of the m and n block indices is a program id, the other is computed"
    if m.axis is not None and m.axis == n.axis:
        return f"the m and n blocks are both walked by program-id axis {m.axis}"
    return _Tiling(m, n)


def _stored_tiling(kernel: ast.FunctionDef, facts: Any) -> _Tiling | None:
    """m and n of a 2-D accumulator (`acc = tl.zeros((A, B))`, updated inside a loop) read from
    the `tl.store` that writes it: the offsets indexed `[:, None]` walk its rows, those indexed
    `[None, :]` its columns, and the one local each is computed from, itself computed from a
    program id, is the block index. None when that is not one name per dimension."""
    once = assignments(kernel, augmented=True)
    pid = pid_names(kernel)
    loops = [n for n in ast.walk(kernel) if isinstance(n, ast.For)]
    updated = {t.id for loop in loops for n in ast.walk(loop)
               if isinstance(n, (ast.Assign, ast.AugAssign))
               for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
               if isinstance(t, ast.Name)}
    accs = {n: shape for n, shape in facts.shapes.items() if n in updated and all(shape)}

    def index_of(name: str) -> str | None:
        values = once.get(name, [])
        if len(values) != 1:
            return None
        found = {n for n in names_in(values[0]) if n in once and n in pid}
        return next(iter(found)) if len(found) == 1 else None

    for node in ast.walk(kernel):
        if not (isinstance(node, ast.Call) and callee(node).endswith("store") and len(node.args) >= 2):
            continue
        stored = names_in(node.args[1]) & set(accs)
        if len(stored) != 1:
            continue
        tile_m, tile_n = accs[next(iter(stored))]
        rows, cols = set(), set()
        for sub in ast.walk(node.args[0]):
            if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) and \
                    isinstance(sub.slice, ast.Tuple) and len(sub.slice.elts) == 2:
                first, second = sub.slice.elts
                none_second = isinstance(second, ast.Constant) and second.value is None
                none_first = isinstance(first, ast.Constant) and first.value is None
                if isinstance(first, ast.Slice) and none_second:
                    rows.add(sub.value.id)
                elif none_first and isinstance(second, ast.Slice):
                    cols.add(sub.value.id)
        if len(rows) != 1 or len(cols) != 1:
            continue
        m, n = index_of(next(iter(rows))), index_of(next(iter(cols)))
        if m is None or n is None or m == n:
            continue
        axes = [_pid_axis(once[x][0]) if len(once.get(x, [])) == 1 else None for x in (m, n)]
        return _Tiling(_Axis(str(tile_m), m, axes[0], ()), _Axis(str(tile_n), n, axes[1], ()))
    return None


def _row_major(kernel: ast.FunctionDef, tiling: _Tiling) -> _RowMajor | None:
    """The row-major tile order of a 1-D grid: the m and n block indices are the quotient and
    the remainder of one program index by one count (either way round), each assigned once."""
    m, n = tiling.m.name, tiling.n.name
    if m is None or n is None or tiling.m.axis is not None:
        return None
    assigns = assignments(kernel, augmented=True)
    if len(assigns.get(m, [])) != 1 or len(assigns.get(n, [])) != 1:
        return None
    for block in walk_stmts(kernel.body):
        at = {t: i for i, s in enumerate(block) if (t := _target(s)) in (m, n)}
        if len(at) != 2:
            continue
        for role, outer, inner in (("m", at[m], at[n]), ("n", at[n], at[m])):
            q, r = block[outer].value, block[inner].value
            if (isinstance(q, ast.BinOp) and isinstance(q.op, ast.FloorDiv)
                    and isinstance(q.left, ast.Name)
                    and _remainder(r, q, m if role == "m" else n)):
                return _RowMajor(block, outer, inner, q.left.id, q.right, role)
    return None


def _remainder(r: ast.AST, q: ast.BinOp, quotient: str) -> bool:
    """`r` is the remainder of the division `q` (`pid // count`): `pid % count`, or
    `pid - quotient * count` with `quotient` the name `q` is assigned to."""
    if not isinstance(r, ast.BinOp):
        return False
    if isinstance(r.op, ast.Mod):
        return ast.dump(q.left) == ast.dump(r.left) and ast.dump(q.right) == ast.dump(r.right)
    if isinstance(r.op, ast.Sub) and ast.dump(r.left) == ast.dump(q.left) \
            and isinstance(r.right, ast.BinOp) and isinstance(r.right.op, ast.Mult):
        for a, b in ((r.right.left, r.right.right), (r.right.right, r.right.left)):
            if isinstance(a, ast.Name) and a.id == quotient and ast.dump(b) == ast.dump(q.right):
                return True
    return False


def _tl_alias(kernel: ast.FunctionDef) -> str:
    """How the kernel names `triton.language` (from its program-id calls)."""
    for node in ast.walk(kernel):
        if isinstance(node, ast.Call) and callee(node) in PID_CALLS:
            return callee(node).rsplit(".", 1)[0]
    return "tl"


def _triton_alias(mod: PyModule) -> str | None:
    """The name the module imports `triton` as (None: not imported as a module)."""
    for node in mod.tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "triton":
                    return a.asname or a.name
    return None


def _live(kernel: ast.FunctionDef) -> set[str]:
    """Names whose value the kernel uses: read outside a plain assignment, or read by the
    assignment of a name it uses (a name only dead assignments read is not live)."""
    deps: dict[str, set[str]] = {}
    inside: set[int] = set()
    for node in ast.walk(ast.Module(body=kernel.body, type_ignores=[])):
        name = _target(node) if isinstance(node, ast.stmt) else None
        if name is not None:
            deps.setdefault(name, set()).update(names_in(node.value))
            inside |= {id(n) for n in ast.walk(node.value)}
    todo = [n.id for n in ast.walk(ast.Module(body=kernel.body, type_ignores=[]))
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in inside]
    live: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in live:
            live.add(name)
            todo.extend(deps.get(name, ()))
    return live


def _group_param(mod: PyModule, kernel: ast.FunctionDef) -> str | None:
    """A group-size constexpr the kernel has: one it does not use (a de-optimized kernel keeps
    it), else one in the role `group`; either run with an int of at least 2 (a group of one
    block is no grouping)."""
    roles = tile_roles(kernel, jit_functions(mod))
    live = _live(kernel)
    unused = [p for p in constexpr_params(kernel) if p not in live and p not in roles]
    grouping = [p for p, r in roles.items() if r == "group"]
    values = param_values(mod, kernel, unused + grouping)
    for names in (unused, grouping):
        fit = [p for p in names if (values.get(p) or 0) >= 2]
        if len(fit) == 1:
            return fit[0]
    return None


def _block_count(mod: PyModule, kernel: ast.FunctionDef, axis: _Axis, before: ast.stmt,
                 block: list[ast.stmt]) -> str | None:
    """A name the kernel binds, before `before`, to the count of `axis`'s blocks:
    `tl.cdiv(S, tile)` or `(S + tile - 1) // tile` of a size S that bounds its offsets."""
    scope = [s for s in kernel.body if s.lineno < before.lineno]
    if block is not kernel.body:
        scope += [s for s in block if s.lineno < before.lineno]
    once = assignments(kernel, augmented=True)
    for stmt in scope:
        name = _target(stmt)
        if name is None or len(once.get(name, [])) != 1:
            continue
        value = stmt.value
        if is_cdiv(value, 2):
            size, tile = value.args
        elif isinstance(value, ast.BinOp) and isinstance(value.op, ast.FloorDiv):
            size, tile = value.left, value.right
            while isinstance(size, ast.BinOp) and isinstance(size.op, (ast.Add, ast.Sub)):
                size = size.left
        else:
            continue
        if isinstance(size, ast.Name) and size.id in axis.sizes and mod.text(tile) == axis.tile:
            return name
    return None


def _size_of(kernel: ast.FunctionDef, axis: _Axis, before: ast.stmt) -> str | None:
    """The one size bounding `axis`'s offsets that is bound before `before` (a parameter, or a
    name the kernel body assigns above it); with several, the one divided by the tile."""
    params = {a.arg for a in kernel.args.args + kernel.args.kwonlyargs}
    above = {t for s in kernel.body if s.lineno < before.lineno and (t := _target(s))}
    bound = [s for s in axis.sizes if s in params or s in above]
    if len(bound) > 1:
        divided = {n.args[0].id for n in ast.walk(kernel) if is_cdiv(n, 2)
                   and isinstance(n.args[0], ast.Name) and names_in(n.args[1]) == {axis.tile}}
        bound = [s for s in bound if s in divided]
    return bound[0] if len(bound) == 1 else None


@dataclass(frozen=True, slots=True)
class GroupedOrdering(Pass):
    """GROUP_M-swizzled tile order <-> row-major `pid_m = pid // num_pid_n`.

    The block indices are found by role (`_tiling`): the program indices that scale the
    offsets of the dot accumulator's rows and columns. The forward rule rewrites a 1-D grid's
    row-major order (`a = pid // x; b = pid % x`, whatever the names) into the grouped order,
    and merges a 2-D grid (`tl.program_id(0)` for one dimension, `tl.program_id(1)` for the
    other, any other axis kept, e.g. a batch) into one axis first, rewriting the host grid to
    `cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)` read from the launch. The group size is the kernel's
    own group constexpr when it has one, else a new one launched with `DEFAULT_GROUP`."""

    code: str = ""
    """The exact grouped-ordering statements to restore (recorded by a de-optimization);
    empty: the standard GROUP_M swizzle."""

    name: ClassVar[str] = "grouped-ordering"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = "GROUP_M program swizzle for L2 reuse <-> row-major tile order"
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    provides: ClassVar[tuple[str, ...]] = ("grouped-order",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("*",)

    # -- finding --------------------------------------------------------------------------
    @staticmethod
    def _grouped(mod: PyModule, kernel: ast.FunctionDef, tiling: _Tiling) -> list[_GroupShape]:
        m, n = tiling.m.name, tiling.n.name
        if m is None or n is None:
            return []
        roles = tile_roles(kernel, jit_functions(mod))
        params = [p for p, r in roles.items() if r == "group"]
        if not params:
            return []
        derived = set(params)
        changed = True
        while changed:  # every name computed (transitively) from the group size
            changed = False
            for node in ast.walk(kernel):
                name = _target(node) if isinstance(node, ast.stmt) else None
                if name and name not in derived and names_in(node.value) & derived:
                    derived.add(name)
                    changed = True
        factor = {}  # name -> the non-group factor of `name = GROUP * X`
        for node in ast.walk(kernel):
            name = _target(node) if isinstance(node, ast.stmt) else None
            if name and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Mult):
                left, right = node.value.left, node.value.right
                for a, b in ((left, right), (right, left)):
                    if isinstance(a, ast.Name) and a.id in params and isinstance(b, ast.Name):
                        factor[name] = b.id
        shapes = []
        for block in walk_stmts(kernel.body):
            targets = [_target(s) for s in block]
            if m not in targets or n not in targets:
                continue
            at = {m: targets.index(m), n: targets.index(n)}
            last = max(at.values())
            first = last
            while first > 0 and targets[first - 1] in derived:
                first -= 1
            region = block[first:last + 1]
            if not all(_target(s) in derived for s in region):
                continue
            inner = [t for t in (m, n) if isinstance(block[at[t]].value, ast.BinOp)
                     and isinstance(block[at[t]].value.op, ast.FloorDiv)]
            if len(inner) != 1:
                continue
            outer = n if inner[0] == m else m
            pid = num_pid_n = None
            for node in ast.walk(ast.Module(body=region, type_ignores=[])):
                if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv)
                        and isinstance(node.left, ast.Name) and node.left.id not in derived
                        and isinstance(node.right, ast.Name) and node.right.id in factor):
                    pid, num_pid_n = node.left.id, factor[node.right.id]
                    break
            if pid and num_pid_n:
                shapes.append(_GroupShape(block, first, last, pid, num_pid_n, outer, inner[0]))
        return shapes

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = []
        for kernel in mod.kernels():
            tiling = _tiling(mod, kernel)
            if isinstance(tiling, str):
                continue
            for shape in self._grouped(mod, kernel, tiling):
                span = _lines_span(mod, shape.block[shape.first], shape.block[shape.last])
                out.append(make_site(self.name, ir, index, span, True,
                                     {"kernel": kernel.name, "pid": shape.pid,
                                      "num_pid_n": shape.num_pid_n}))
            rows = _row_major(kernel, tiling)
            if rows is not None:
                first, last = sorted((rows.outer, rows.inner))
                locus = _lines_span(mod, rows.block[first], rows.block[last])
                out.append(make_site(self.name, ir, index, _reach(mod, kernel, locus), False,
                                     {"kernel": kernel.name, "pid": rows.pid,
                                      "num_pid_n": mod.text(rows.count),
                                      "outer": _target(rows.block[rows.outer]),
                                      "inner": _target(rows.block[rows.inner])}, locus))
            elif tiling.m.axis is not None:
                plan = self._merge_grid(mod, kernel, tiling)
                if isinstance(plan, Skipped):
                    continue
                locus = _lines_span(mod, plan[1], plan[1])
                out.append(make_site(self.name, ir, index, _reach(mod, kernel, locus), False,
                                     {"kernel": kernel.name, "grid_axes": [tiling.m.axis,
                                                                           tiling.n.axis]},
                                     locus))
        return out

    # -- de-optimization ------------------------------------------------------------------
    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        kernel = _kernel_named(mod, site.detail.get("kernel", ""))
        tiling = _tiling(mod, kernel) if kernel is not None else "no kernel at the site"
        for shape in self._grouped(mod, kernel, tiling) if not isinstance(tiling, str) else []:
            start, end = _lines_span(mod, shape.block[shape.first], shape.block[shape.last])
            if (start, end) != tuple(site.span):
                continue
            names = {_target(s) for s in shape.block[shape.first:shape.last + 1]}
            after = [s for s in shape.block[shape.last + 1:]]
            used_after = set().union(*(names_in(s) for s in after)) if after else set()
            leaked = sorted(names & used_after - {shape.outer, shape.inner})
            if leaked:
                return Skipped("the swizzle's intermediates are used later", {"names": leaked})
            indent = indent_of(mod.source, start)
            text = (f"{indent}{shape.outer} = {shape.pid} // {shape.num_pid_n}\n"
                    f"{indent}{shape.inner} = {shape.pid} % {shape.num_pid_n}\n")
            return finish(ir, site, [ByteEdit(start, end, text)],
                          options={"code": mod.source[start:end].decode("utf-8")})
        return Skipped("no grouped ordering at the site", {"site": site.anchor})

    # -- optimization ---------------------------------------------------------------------
    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        kernel = _kernel_named(mod, site.detail.get("kernel", ""))
        if kernel is None:
            return Skipped("no kernel at the site", {"site": site.anchor})
        tiling = _tiling(mod, kernel)
        if isinstance(tiling, str):
            return Skipped(tiling, {"kernel": kernel.name})
        if "grid_axes" in site.detail:
            if self.code:
                return Skipped("a recorded swizzle is for a 1-D grid; this kernel has a 2-D one",
                               {"kernel": kernel.name})
            plan = self._merge_grid(mod, kernel, tiling)
            if isinstance(plan, Skipped):
                return plan
            return finish(ir, site, plan[0])
        rows = _row_major(kernel, tiling)
        if rows is None or any(key in site.detail and site.detail[key] != _target(rows.block[i])
                               for key, i in (("outer", rows.outer), ("inner", rows.inner))):
            return Skipped("no row-major tile order at the site", {"site": site.anchor})
        first, last = sorted((rows.outer, rows.inner))
        start = line_start(mod.source, mod.start(rows.block[first]))
        indent = indent_of(mod.source, start)
        if self.code:
            made = self._recorded(mod, kernel, rows, indent)
        else:
            made = self._template(mod, kernel, tiling, rows, indent)
        if isinstance(made, Skipped):
            return made
        text, edits = made
        if last == first + 1:
            edits.append(ByteEdit(*_lines_span(mod, rows.block[first], rows.block[last]), text))
        else:  # the whole swizzle where the first index was computed
            between = set().union(*(_stored(s) for s in rows.block[first + 1:last]))
            read = names_in(rows.block[rows.outer].value) | names_in(rows.block[rows.inner].value)
            if between & read:
                return Skipped("the statements between the block indices change what they read",
                               {"names": sorted(between & read)})
            edits.append(ByteEdit(*_lines_span(mod, rows.block[first], rows.block[first]), text))
            edits.append(ByteEdit(*_lines_span(mod, rows.block[last], rows.block[last]), ""))
        return finish(ir, site, sorted(edits, key=lambda e: (e.start, e.end)))

    def _recorded(self, mod: PyModule, kernel: ast.FunctionDef, rows: _RowMajor,
                  indent: str) -> tuple[str, list[ByteEdit]] | Skipped:
        """The recorded swizzle at the site's indentation, when it fits the kernel: it assigns
        the kernel's block indices from the kernel's program index, and every other name it
        reads is the kernel's (a swizzle recorded on another kernel usually does not fit:
        the pass defaults then rewrite by role)."""
        code = textwrap.dedent(self.code)
        try:
            tree = ast.parse(code)
        except SyntaxError:
            return Skipped("the recorded swizzle does not parse", {})
        stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Store)}
        read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                and isinstance(n.ctx, ast.Load)}
        indices = {_target(rows.block[rows.outer]), _target(rows.block[rows.inner])}
        if not indices <= stored or rows.pid not in read:
            return Skipped("the recorded swizzle computes other block indices than the kernel's",
                           {"recorded": sorted(stored), "kernel": sorted(indices),
                            "pid": rows.pid})
        bound = ({a.arg for a in kernel.args.args + kernel.args.kwonlyargs}
                 | set().union(*(_stored(s) for s in kernel.body)) | _module_names(mod))
        missing = sorted(read - stored - bound)
        if missing:
            return Skipped("the recorded swizzle reads names the kernel does not have",
                           {"names": missing})
        text = "".join(indent + line if line.strip() else line
                       for line in code.splitlines(keepends=True))
        return (text if text.endswith("\n") else text + "\n"), []

    def _template(self, mod: PyModule, kernel: ast.FunctionDef, tiling: _Tiling,
                  rows: _RowMajor, indent: str) -> tuple[str, list[ByteEdit]] | Skipped:
        """The standard swizzle grouping the outer dimension's blocks by the group size."""
        axis = tiling.m if rows.role == "m" else tiling.n
        before = rows.block[min(rows.outer, rows.inner)]
        taken = _identifiers(mod)
        group = self._group(mod, kernel, rows.role, taken)
        if isinstance(group, Skipped):
            return group
        group_name, edits = group
        lines = []
        count = _block_count(mod, kernel, axis, before, rows.block)
        if count is None:
            size = _size_of(kernel, axis, before)
            if size is None:
                return Skipped(f"no size bounds the {rows.role} offsets where the order is "
                               f"computed: the {rows.role} blocks cannot be counted",
                               {"kernel": kernel.name, "sizes": list(axis.sizes)})
            count = fresh_name(f"num_pid_{rows.role}", taken)
            lines.append(f"{count} = {_tl_alias(kernel)}.cdiv({size}, {axis.tile})")
        per = mod.text(rows.count)
        per = f"({per})" if not isinstance(rows.count, (ast.Name, ast.Call, ast.Attribute)) else per
        pid, role = rows.pid, rows.role
        outer, inner = _target(rows.block[rows.outer]), _target(rows.block[rows.inner])
        in_group, group_id = fresh_name("num_pid_in_group", taken), fresh_name("group_id", taken)
        first, size = fresh_name(f"first_pid_{role}", taken), fresh_name(f"group_size_{role}", taken)
        lines += [
            f"{in_group} = {group_name} * {per}",
            f"{group_id} = {pid} // {in_group}",
            f"{first} = {group_id} * {group_name}",
            f"{size} = min({count} - {first}, {group_name})",
            f"{outer} = {first} + (({pid} % {in_group}) % {size})",
            f"{inner} = ({pid} % {in_group}) // {size}",
        ]
        return "".join(f"{indent}{line}\n" for line in lines), edits

    @staticmethod
    def _group(mod: PyModule, kernel: ast.FunctionDef, role: str, taken: set[str]
               ) -> tuple[str, list[ByteEdit]] | Skipped:
        """The group size: the kernel's group constexpr (`_group_param`), else a new constexpr
        (a fresh name) that every launch passes as `DEFAULT_GROUP` (and that defaults to it
        where the signature needs a default or the module never launches the kernel)."""
        found = _group_param(mod, kernel)
        if found is not None:
            return found, []
        args = kernel.args.args
        if not args:
            return Skipped("the kernel has no parameters to add a group size after", {})
        name = fresh_name(f"GROUP_{role.upper()}", taken)
        marked = [a.annotation for a in args if a.annotation is not None
                  and "constexpr" in ast.dump(a.annotation)]
        annotation = mod.text(marked[0]) if marked else f"{_tl_alias(kernel)}.constexpr"
        shared = mod.sharing(kernel.name)
        if shared is not None:  # every launch passes the new group size
            return Skipped(shared, {"kernel": kernel.name})
        launches = mod.launches(kernel.name)
        default = f" = {DEFAULT_GROUP}" if kernel.args.defaults or not launches else ""
        at = mod.end(kernel.args.defaults[-1] if kernel.args.defaults else args[-1])
        edits = [ByteEdit(at, at, f", {name}: {annotation}{default}")]
        for call in launches:
            edits.append(mod.insert_argument(call, len(mod.arguments(call)),
                                             f"{name}={DEFAULT_GROUP}"))
        return name, edits

    def _merge_grid(self, mod: PyModule, kernel: ast.FunctionDef, tiling: _Tiling
                    ) -> tuple[list[ByteEdit], ast.stmt] | Skipped:
        """A 2-D grid's m and n program ids merged into one grid axis walked in grouped order:
        the edits and the kernel statement the swizzle goes before. The lower of the two axes
        carries cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) programs (the sizes and tiles the launch
        passes), the higher one is dropped when last, else set to 1, so that any other axis
        (a batch) keeps its index and its program ids."""
        m, n = tiling.m, tiling.n
        low, high = sorted((m.axis, n.axis))
        detail = {"kernel": kernel.name}
        calls = [c for c in ast.walk(kernel) if isinstance(c, ast.Call) and callee(c) in PID_CALLS]
        if any(_pid_axis(c) is None for c in calls):
            return Skipped("a program id's axis is not a literal", detail)
        helpers = _called(kernel, jit_functions(mod))
        if any(isinstance(c, ast.Call) and (callee(c) in PID_CALLS
                                            or callee(c).endswith("num_programs"))
               for f in helpers for c in ast.walk(f)):
            return Skipped("a jit function the kernel calls reads program ids", detail)
        for c in ast.walk(kernel):
            if isinstance(c, ast.Call) and callee(c).endswith("num_programs") \
                    and program_axis(c) in (None, low, high):
                return Skipped("the kernel reads the number of programs along a merged axis",
                               detail)
        params = [a.arg for a in kernel.args.args]
        constexprs = set(constexpr_params(kernel))
        sizes = {}
        for role, axis in (("m", m), ("n", n)):
            passed = [s for s in axis.sizes if s in params]
            if len(passed) != 1:
                return Skipped(f"the size along {role} is not one kernel parameter",
                               {**detail, "sizes": list(axis.sizes)})
            if axis.tile not in constexprs:
                return Skipped(f"the {role} block {axis.tile} is not a constexpr parameter", detail)
            sizes[role] = passed[0]
        shared = mod.sharing(kernel.name)
        if shared is not None:
            return Skipped(shared, detail)
        launches = mod.launches(kernel.name)
        if not launches:
            return Skipped("the kernel is not launched in this module: its grid cannot be "
                           "merged", detail)
        taken = _identifiers(mod)
        binding: dict[int, ast.stmt] = {}  # axis -> `name = tl.program_id(axis)` (top level)
        names: dict[int, str] = {}  # axis -> the name of its block index
        for role, axis in (("m", m), ("n", n)):
            if axis.name is None:
                names[axis.axis] = fresh_name(f"pid_{role}", taken)
                continue
            stmt = next((s for s in kernel.body if _target(s) == axis.name
                         and _pid_axis(s.value) == axis.axis), None)
            if stmt is None:
                return Skipped(f"the program id {axis.name} is named inside a block", detail)
            binding[axis.axis], names[axis.axis] = stmt, axis.name
        merged = [c for c in calls if _pid_axis(c) in (low, high)]
        tops = [s for s in kernel.body if any(c in merged for c in ast.walk(s))]
        first = tops[0]
        edits: list[ByteEdit] = []
        bound = {id(_uncast(s.value)) for s in binding.values()}  # type: ignore[attr-defined]
        for c in merged:
            if id(c) not in bound:
                edits.append(ByteEdit(*mod.span(c), names[_pid_axis(c)]))
        tl = _tl_alias(kernel)
        group = self._group(mod, kernel, "m", taken)
        if isinstance(group, Skipped):
            return group
        group_name, group_edits = group
        edits += group_edits
        pid, count_m, count_n = (fresh_name("pid", taken), fresh_name("num_pid_m", taken),
                                 fresh_name("num_pid_n", taken))
        in_group, group_id = fresh_name("num_pid_in_group", taken), fresh_name("group_id", taken)
        first_m, size_m = fresh_name("first_pid_m", taken), fresh_name("group_size_m", taken)
        lines = [
            f"{pid} = {tl}.program_id({low})",
            f"{count_m} = {tl}.cdiv({sizes['m']}, {m.tile})",
            f"{count_n} = {tl}.cdiv({sizes['n']}, {n.tile})",
            f"{in_group} = {group_name} * {count_n}",
            f"{group_id} = {pid} // {in_group}",
            f"{first_m} = {group_id} * {group_name}",
            f"{size_m} = min({count_m} - {first_m}, {group_name})",
            f"{names[m.axis]} = {first_m} + (({pid} % {in_group}) % {size_m})",
            f"{names[n.axis]} = ({pid} % {in_group}) // {size_m}",
        ]
        for axis, stmt in sorted(binding.items()):  # a cast block index (`.to(tl.int64)`) keeps it
            value = stmt.value  # type: ignore[attr-defined]
            inner = _uncast(value)
            if inner is not value:
                lines.append(f"{names[axis]} = {names[axis]}{mod.text(value)[len(mod.text(inner)):]}")
        at = line_start(mod.source, mod.start(first))
        indent = indent_of(mod.source, at)
        text = "".join(f"{indent}{line}\n" for line in lines)
        for stmt in binding.values():
            span = _lines_span(mod, stmt, stmt)
            edits.append(ByteEdit(*span, text if stmt is first else ""))
        if first not in binding.values():
            edits.append(ByteEdit(at, at, text))
        for call in launches:
            grid = _merged_grid(mod, kernel, call, low, high, tiling, sizes, taken)
            if isinstance(grid, Skipped):
                return grid
            edits.append(grid)
        edits = sorted(dict.fromkeys(edits), key=lambda e: (e.start, e.end))
        return edits, first


def _uncast(node: ast.AST) -> ast.AST:
    """`x` of `x.to(...)` (of any chain of casts), else `node` itself."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to":
        node = node.func.value
    return node


def _called(kernel: ast.FunctionDef, functions: dict[str, ast.FunctionDef]
            ) -> list[ast.FunctionDef]:
    """The jit functions `kernel` calls, directly or through one another."""
    out: dict[str, ast.FunctionDef] = {}
    todo = [kernel]
    while todo:
        fn = todo.pop()
        for c in ast.walk(fn):
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) \
                    and c.func.id in functions and c.func.id not in out \
                    and c.func.id != kernel.name:
                out[c.func.id] = functions[c.func.id]
                todo.append(functions[c.func.id])
    return list(out.values())


def _stored(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _reach(mod: PyModule, kernel: ast.FunctionDef, locus: tuple[int, int]) -> tuple[int, int]:
    """The bytes a forward rewrite at `locus` may touch: the kernel (its signature takes a group
    size), its launches and their grids."""
    lo, hi = mod.stmt_span(kernel)
    lo, hi = min(lo, locus[0]), max(hi, locus[1])
    for call in mod.launches(kernel.name):
        nodes = [call]
        grid = launch_grid(mod, call)
        if grid is not None:
            nodes.append(grid)
        for node in nodes:
            lo, hi = min(lo, mod.start(node)), max(hi, mod.end(node))
    return lo, hi


def _merged_grid(mod: PyModule, kernel: ast.FunctionDef, call: ast.Call, low: int, high: int,
                 tiling: _Tiling, sizes: dict[str, str], taken: set[str]) -> ByteEdit | Skipped:
    """The launch's grid with axes `low` and `high` merged (see `_merge_grid`): a lambda over
    the autotuner's meta-parameters, so that it follows the tiles whatever sets them. The
    sizes are the expressions the launch passes for the kernel's size parameters."""
    detail = {"kernel": kernel.name}
    target = launch_grid(mod, call)
    if target is None:
        return Skipped("the launch grid is not an expression bound once where the kernel is "
                       "launched", detail)
    body, meta = target, None
    if isinstance(target, ast.FunctionDef):  # `def grid(META): return (...)`
        stmts = [st for st in target.body if not (isinstance(st, ast.Expr)
                                                  and isinstance(st.value, ast.Constant))]
        if len(stmts) != 1 or not isinstance(stmts[0], ast.Return) or stmts[0].value is None \
                or len(target.args.args) != 1:
            return Skipped("the launch grid's function does more than return the grid", detail)
        body, meta = stmts[0].value, target.args.args[0].arg
    elif isinstance(target, ast.Lambda):
        if len(target.args.args) != 1:
            return Skipped("the launch grid's lambda does not take the meta-parameters", detail)
        body, meta = target.body, target.args.args[0].arg
    if not isinstance(body, (ast.Tuple, ast.List)) or not high < len(body.elts) <= 3:
        return Skipped("the launch grid is not a tuple holding the m and n axes", detail)
    args = launch_arguments(mod, kernel, call)
    passed = {role: args.get(size) for role, size in sizes.items()}
    if any(v is None for v in passed.values()):
        return Skipped("the launch does not pass the sizes along m and n as plain arguments",
                       detail)
    if meta is None:
        meta = fresh_name("meta", taken | names_in(body))
    cdiv = _triton_alias(mod)

    def count(role: str) -> str:
        size = mod.text(passed[role])
        tile = f'{meta}["{(tiling.m if role == "m" else tiling.n).tile}"]'
        return f"{cdiv}.cdiv({size}, {tile})" if cdiv else f"(({size}) + {tile} - 1) // {tile}"

    elts = [mod.text(e) for e in body.elts]
    elts[low] = f"{count('m')} * {count('n')}"
    if high == len(elts) - 1:
        del elts[high]
    else:
        elts[high] = "1"
    merged = f"({', '.join(elts)}{',' if len(elts) == 1 else ''})"
    if isinstance(target, ast.FunctionDef):  # its return value is the grid
        return ByteEdit(*mod.span(body), merged)
    text = f"lambda {meta}: {merged}"
    grid = call.func.slice  # type: ignore[attr-defined]
    if isinstance(grid, ast.Name) and target is not grid:
        host = mod.enclosing(call, ast.FunctionDef) or mod.tree
        as_grid = {id(c.func.slice)  # type: ignore[attr-defined]
                   for c in mod.launches(kernel.name)}
        readers = [n for n in ast.walk(host) if isinstance(n, ast.Name) and n.id == grid.id
                   and isinstance(n.ctx, ast.Load)]
        if all(id(r) in as_grid for r in readers):  # the bound grid serves these launches alone
            return ByteEdit(*mod.span(target), text)
    return ByteEdit(*mod.span(grid), text)


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Persistent:
    kernel: ast.FunctionDef
    loop: ast.For
    start: str   # source of the first tile (the program id)
    step_param: str | None  # the kernel parameter the loop strides by (e.g. NUM_SMS)


@dataclass(frozen=True, slots=True)
class PersistentGrid(Pass):
    """Persistent grid (programs looping over tiles: as many as the recorded host grid launched,
    or, written by role, as many as the GPU holds at once) <-> one tile per program."""

    header: str = ""
    """The loop header line to restore (recorded by a de-optimization)."""
    statements: int = 0
    """How many statements the loop body had."""
    grid_expr: str = ""
    """The host grid expression that capped the program count (e.g. `min(num_sms, tiles)`)."""
    grid_kept: str = ""
    """What the de-optimization left in its place (e.g. `tiles`)."""
    indent: str = "    "
    """The extra indentation of the loop body."""
    flatten: bool = True
    """A loop written by role where no header was recorded: `flatten=True` where its body holds a
    K loop feeding `tl.dot` from tensor descriptors (a recorded header's own literal keywords are
    carried instead, on the same condition: `persist.feeds_dot`)."""

    name: ClassVar[str] = "persistent-grid"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = "persistent tile loop over min(#SMs, tiles) programs <-> one tile per program"
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    provides: ClassVar[tuple[str, ...]] = ("persistent",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)

    def _loops(self, mod: PyModule) -> list[_Persistent]:
        out = []
        for kernel in mod.kernels():
            pid_names = {t for s in kernel.body if (t := _target(s)) and
                         callee(s.value) in ("tl.program_id", "triton.language.program_id")}
            params = {a.arg for a in kernel.args.args}
            for stmt in kernel.body:
                if not (isinstance(stmt, ast.For) and isinstance(stmt.iter, ast.Call)
                        and callee(stmt.iter) in ("range", "tl.range")
                        and isinstance(stmt.target, ast.Name) and len(stmt.iter.args) == 3):
                    continue
                first, _, step = stmt.iter.args
                starts_at_pid = (isinstance(first, ast.Name) and first.id in pid_names) or \
                    callee(first) == "tl.program_id"
                step_param = step.id if isinstance(step, ast.Name) and step.id in params else None
                by_programs = callee(step) == "tl.num_programs"
                if starts_at_pid and (step_param or by_programs):
                    out.append(_Persistent(kernel, stmt, mod.text(first), step_param))
        return out

    def _host_cap(self, mod: PyModule, found: _Persistent) -> tuple[ast.Call, ast.AST] | None:
        """The `min(<SM count>, <tiles>)` call of the launching function and its tile arg."""
        for launch in mod.launches(found.kernel.name):
            host = mod.enclosing(launch, ast.FunctionDef)
            if host is None:
                continue
            sm_names: set[str] = set()
            if found.step_param:
                params = [a.arg for a in found.kernel.args.args]
                idx = params.index(found.step_param)
                kw = mod.keyword(launch, found.step_param)
                value = kw.value if kw is not None else (
                    launch.args[idx] if idx < len(launch.args) else None)
                if value is not None:
                    sm_names |= names_in(value)
            for node in ast.walk(host):
                if not (isinstance(node, ast.Call) and callee(node) == "min" and len(node.args) == 2):
                    continue
                for a, b in (node.args, node.args[::-1]):
                    text = mod.text(a).lower()
                    if names_in(a) & sm_names or "sm" in text or "multi_processor" in text:
                        return node, b
        return None

    def _stale_tile_count(self, mod: PyModule, found: _Persistent, kept: ast.AST) -> Skipped | None:
        """One tile per program needs the host's tile count to match the kernel's: where the
        host divides by literal tile sizes, they must be the sizes the launch passes for the
        tiles the kernel counts (`tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)`)."""
        host_sizes = sorted(literal_int(c.args[1]) for c in _cdivs(mod, kept) if len(c.args) == 2
                            and literal_int(c.args[1]) is not None)
        if not host_sizes:
            return None  # computed from meta-parameters: consistent by construction
        bound = found.loop.iter.args[1]
        counted = [c.args[1].id for c in _cdivs(mod, bound)
                   if len(c.args) == 2 and isinstance(c.args[1], ast.Name)]
        launch_values: dict[str, int] = {}
        for launch in mod.launches(found.kernel.name):
            for kw in launch.keywords:
                if kw.arg and literal_int(kw.value) is not None:
                    launch_values[kw.arg] = literal_int(kw.value)
        if not counted or any(name not in launch_values for name in counted):
            return None  # the kernel's tile sizes are not literal at the launch: nothing to compare
        kernel_sizes = sorted(launch_values[name] for name in counted)
        if host_sizes != kernel_sizes:
            return Skipped("the host counts tiles of other sizes than the kernel: one tile per "
                           "program would leave tiles out",
                           {"host_sizes": host_sizes, "kernel_sizes": kernel_sizes})
        return None

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = []
        for found in self._loops(mod):
            cap = self._host_cap(mod, found)
            lo = _comment_start(mod.source, line_start(mod.source, mod.start(found.loop)))
            hi = mod.end(found.loop)
            if cap is not None:
                lo, hi = min(lo, mod.start(cap[0])), max(hi, mod.end(cap[0]))
            out.append(make_site(self.name, ir, index, (lo, hi), True,
                                 {"kernel": found.kernel.name, "tile": found.loop.target.id,
                                  "host_grid": cap is not None}, mod.span(found.loop)))
        # one-tile-per-program kernels that a recorded loop can be restored in
        restorable: set[str] = set()
        for kernel in mod.kernels():
            for i, stmt in enumerate(kernel.body):
                target = _target(stmt)
                if target and isinstance(stmt.value, ast.Name) and i + 1 < len(kernel.body):
                    source_pid = stmt.value.id
                    if any(_target(s) == source_pid and callee(s.value) == "tl.program_id"
                           for s in kernel.body[:i]):
                        out.append(make_site(self.name, ir, index,
                                             (line_start(mod.source, mod.start(stmt)), len(mod.source)),
                                             False, {"kernel": kernel.name, "tile": target},
                                             mod.span(stmt)))
                        restorable.add(kernel.name)
        # any other one-tile-per-program kernel over a 1-D grid: the loop is written by role
        looping = {f.kernel.name for f in self._loops(mod)}
        for kernel in mod.kernels():
            if kernel.name in looping | restorable:
                continue
            walk = walk_of(mod, kernel)
            if isinstance(walk, Walk):
                out.append(make_site(self.name, ir, index, (0, len(mod.source)), False,
                                     {"kernel": kernel.name, "tile": walk.tile,
                                      "role": True, "tiles": walk.tiles},
                                     mod.span(kernel.body[walk.start])))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        found = next((f for f in self._loops(mod) if f.kernel.name == site.detail.get("kernel")
                      and f.loop.target.id == site.detail.get("tile")), None)
        if found is None:
            return Skipped("no persistent tile loop at the site", {"site": site.anchor})
        loop = found.loop
        if loop.orelse or any(isinstance(n, (ast.Break, ast.Continue)) for n in ast.walk(loop)):
            return Skipped("the tile loop has break/continue/else", {"kernel": found.kernel.name})
        assigned = {t.id for n in ast.walk(loop) if isinstance(n, (ast.Assign, ast.AugAssign))
                    for t in ([n.target] if isinstance(n, ast.AugAssign) else n.targets)
                    if isinstance(t, ast.Name)}
        index_of = found.kernel.body.index(loop)
        later = set().union(*(names_in(s) for s in found.kernel.body[index_of + 1:])) \
            if index_of + 1 < len(found.kernel.body) else set()
        carried = sorted(assigned & later)
        if carried:
            return Skipped("values computed in the tile loop are used after it",
                           {"names": carried})
        shared = mod.sharing(found.kernel.name)
        if shared is not None:  # the host grid it uncaps is the other kernels' too
            return Skipped(shared, {"kernel": found.kernel.name})
        cap = self._host_cap(mod, found)
        if cap is None:
            return Skipped("cannot find the host grid capped by the SM count",
                           {"kernel": found.kernel.name})
        stale = self._stale_tile_count(mod, found, cap[1])
        if stale is not None:
            return stale
        # the loop's own comment lines go with its header (and come back with it)
        header_start = _comment_start(mod.source, line_start(mod.source, mod.start(loop)))
        body_start = line_start(mod.source, mod.start(loop.body[0]))
        header = mod.source[header_start:body_start].decode("utf-8")
        outer = indent_of(mod.source, mod.start(loop))
        inner = indent_of(mod.source, mod.start(loop.body[0]))
        body_end = line_end(mod.source, mod.end(loop) - 1)
        body = mod.source[body_start:body_end].decode("utf-8")
        dedented = "".join(line[len(inner) - len(outer):] if line.startswith(inner) else line
                           for line in body.splitlines(keepends=True))
        edits = [ByteEdit(header_start, body_end,
                          f"{outer}{loop.target.id} = {found.start}\n{dedented}"),
                 ByteEdit(*mod.span(cap[0]), mod.text(cap[1]))]
        return finish(ir, site, sorted(edits, key=lambda e: e.start), options={
            "header": header, "statements": len(loop.body),
            "grid_expr": mod.text(cap[0]), "grid_kept": mod.text(cap[1]),
            "indent": inner[len(outer):]})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        if site.detail.get("role"):
            mod = PyModule(ir)
            kernel = _kernel_named(mod, site.detail.get("kernel", ""))
            walk = walk_of(mod, kernel) if kernel is not None else "no kernel at the site"
            if isinstance(walk, str):
                return Skipped(walk, {"site": site.anchor})
            keywords = "" if not feeds_dot(walk) else \
                loop_keywords(self.header) if self.header else "flatten=True" if self.flatten else ""
            return finish(ir, site, sorted(walk_edits(mod, walk, _module_names(mod), keywords),
                                           key=lambda e: e.start))
        if not self.header:
            return Skipped("a persistent loop needs the recorded loop header and host grid "
                           "(no default: the SM count is a host-side decision)", {})
        mod = PyModule(ir)
        kernel = _kernel_named(mod, site.detail.get("kernel", ""))
        if kernel is None:
            return Skipped("no kernel at the site", {"site": site.anchor})
        i = next((i for i, s in enumerate(kernel.body) if _target(s) == site.detail.get("tile")
                  and isinstance(s.value, ast.Name)), None)
        if i is None or self.statements < 1 or i + self.statements >= len(kernel.body):
            return Skipped("the kernel does not have the recorded loop body",
                           {"statements": self.statements})
        stmt, body = kernel.body[i], kernel.body[i + 1:i + 1 + self.statements]
        start = line_start(mod.source, mod.start(stmt))
        body_start = line_start(mod.source, mod.start(body[0]))
        end = line_end(mod.source, mod.end(body[-1]) - 1)
        text = mod.source[body_start:end].decode("utf-8")
        indented = "".join((self.indent + line) if line.strip() else line
                           for line in text.splitlines(keepends=True))
        edits = [ByteEdit(start, end, self.header + indented)]
        shared = mod.sharing(kernel.name)
        if shared is not None:  # the host grid it caps is the other kernels' too
            return Skipped(shared, {"kernel": kernel.name})
        grid = self._kept_node(mod, kernel)
        if grid is None:
            return Skipped("cannot find the host grid to cap", {"grid": self.grid_kept})
        edits.append(ByteEdit(*mod.span(grid), self.grid_expr))
        return finish(ir, site, sorted(edits, key=lambda e: e.start))

    def _kept_node(self, mod: PyModule, kernel: ast.FunctionDef) -> ast.AST | None:
        for launch in mod.launches(kernel.name):
            host = mod.enclosing(launch, ast.FunctionDef)
            for node in ast.walk(host) if host is not None else []:
                if isinstance(node, ast.Tuple):
                    for elt in node.elts:
                        if mod.text(elt) == self.grid_kept:
                            return elt
        return None

