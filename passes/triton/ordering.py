"""Program-ordering passes of Triton kernels: grouped (L2-friendly) tile order and the
persistent grid.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, indent_of, line_end, line_start, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, callee, literal_int, names_in, walk_stmts
from passes.triton.launch import TRITON

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

_PID_M = re.compile(r"^pid_?m$", re.I)
_PID_N = re.compile(r"^pid_?n$", re.I)


def _cdivs(mod: PyModule, expr: ast.AST) -> list[ast.Call]:
    """`cdiv` calls in `expr` and in the assignments (same function) of the names it uses."""
    scope = mod.enclosing(expr, ast.FunctionDef)
    seen: set[str] = set()
    todo, calls = [expr], []
    while todo:
        node = todo.pop()
        calls += [c for c in ast.walk(node) if isinstance(c, ast.Call) and callee(c).endswith("cdiv")]
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


@dataclass(frozen=True, slots=True)
class _GroupShape:
    """What the grouped-ordering rule found in one kernel block."""

    block: list[ast.stmt]
    first: int  # index of the first statement of the region
    last: int   # index of the last statement (pid_m / pid_n)
    pid: str    # the linear program index
    num_pid_n: str


@dataclass(frozen=True, slots=True)
class GroupedOrdering(Pass):
    """GROUP_M-swizzled tile order <-> row-major `pid_m = pid // num_pid_n`."""

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
    preconditions: ClassVar[tuple[str, ...]] = ("group_param",)

    @staticmethod
    def _group_params(kernel: ast.FunctionDef) -> list[str]:
        return [a.arg for a in kernel.args.args if "GROUP" in a.arg.upper()]

    def _grouped(self, kernel: ast.FunctionDef) -> list[_GroupShape]:
        params = self._group_params(kernel)
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
            ms = [i for i, t in enumerate(targets) if t and _PID_M.match(t)]
            ns = [i for i, t in enumerate(targets) if t and _PID_N.match(t)]
            if not ms or not ns:
                continue
            last = max(ms[-1], ns[-1])
            first = last
            while first > 0 and targets[first - 1] in derived:
                first -= 1
            region = block[first:last + 1]
            if not all(_target(s) in derived for s in region):
                continue
            pid = num_pid_n = None
            for node in ast.walk(ast.Module(body=region, type_ignores=[])):
                if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv)
                        and isinstance(node.left, ast.Name) and node.left.id not in derived
                        and isinstance(node.right, ast.Name) and node.right.id in factor):
                    pid, num_pid_n = node.left.id, factor[node.right.id]
                    break
            if pid and num_pid_n:
                shapes.append(_GroupShape(block, first, last, pid, num_pid_n))
        return shapes

    @staticmethod
    def _row_major(block: list[ast.stmt]) -> list[tuple[int, str, str]]:
        """(index, pid, num_pid_n) of adjacent `pid_m = pid // X; pid_n = pid % X`."""
        out = []
        for i in range(len(block) - 1):
            a, b = block[i], block[i + 1]
            ta, tb = _target(a), _target(b)
            if not (ta and tb and _PID_M.match(ta) and _PID_N.match(tb)):
                continue
            va, vb = a.value, b.value
            if (isinstance(va, ast.BinOp) and isinstance(va.op, ast.FloorDiv)
                    and isinstance(vb, ast.BinOp) and isinstance(vb.op, ast.Mod)
                    and ast.dump(va.left) == ast.dump(vb.left)
                    and ast.dump(va.right) == ast.dump(vb.right)
                    and isinstance(va.left, ast.Name) and isinstance(va.right, ast.Name)):
                out.append((i, va.left.id, va.right.id))
        return out

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = []
        for kernel in mod.kernels():
            for shape in self._grouped(kernel):
                span = _lines_span(mod, shape.block[shape.first], shape.block[shape.last])
                out.append(make_site(self.name, ir, index, span, True,
                                     {"kernel": kernel.name, "pid": shape.pid,
                                      "num_pid_n": shape.num_pid_n}))
            if not self._group_params(kernel):
                continue
            for block in walk_stmts(kernel.body):
                for i, pid, npn in self._row_major(block):
                    span = _lines_span(mod, block[i], block[i + 1])
                    out.append(make_site(self.name, ir, index, span, False,
                                         {"kernel": kernel.name, "pid": pid, "num_pid_n": npn}))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        kernel = _kernel_named(mod, site.detail.get("kernel", ""))
        for shape in self._grouped(kernel) if kernel is not None else []:
            start, end = _lines_span(mod, shape.block[shape.first], shape.block[shape.last])
            if (start, end) != tuple(site.span):
                continue
            names = {_target(s) for s in shape.block[shape.first:shape.last + 1]}
            after = [s for s in shape.block[shape.last + 1:]]
            used_after = set().union(*(names_in(s) for s in after)) if after else set()
            leaked = sorted(n for n in names & used_after if not (_PID_M.match(n) or _PID_N.match(n)))
            if leaked:
                return Skipped("the swizzle's intermediates are used later", {"names": leaked})
            indent = indent_of(mod.source, start)
            m_name = next(_target(s) for s in shape.block[shape.first:shape.last + 1]
                          if _PID_M.match(_target(s) or ""))
            n_name = next(_target(s) for s in shape.block[shape.first:shape.last + 1]
                          if _PID_N.match(_target(s) or ""))
            text = (f"{indent}{m_name} = {shape.pid} // {shape.num_pid_n}\n"
                    f"{indent}{n_name} = {shape.pid} % {shape.num_pid_n}\n")
            return finish(ir, site, [ByteEdit(start, end, text)],
                          options={"code": mod.source[start:end].decode("utf-8")})
        return Skipped("no grouped ordering at the site", {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        kernel = _kernel_named(mod, site.detail.get("kernel", ""))
        if kernel is None:
            return Skipped("no kernel at the site", {"site": site.anchor})
        params = self._group_params(kernel)
        results, skip = self.check(ctx, {"group_param": bool(params)})
        if skip:
            return skip
        for block in walk_stmts(kernel.body):
            for i, pid, npn in self._row_major(block):
                start, end = _lines_span(mod, block[i], block[i + 1])
                if (start, end) != tuple(site.span):
                    continue
                if self.code:
                    text = self.code
                else:
                    made = self._template(kernel, block[i], params[0], pid, npn,
                                          indent_of(mod.source, start))
                    if isinstance(made, Skipped):
                        return made
                    text = made
                return finish(ir, site, [ByteEdit(start, end, text)], preconditions=results)
        return Skipped("no row-major tile order at the site", {"site": site.anchor})

    @staticmethod
    def _template(kernel: ast.FunctionDef, before: ast.stmt, group: str, pid: str, npn: str,
                  indent: str) -> str | Skipped:
        cdivs = [t for node in ast.walk(kernel) if isinstance(node, ast.stmt)
                 and (t := _target(node)) and callee(node.value).endswith("cdiv") and t != npn]
        num_pid_m = next((t for t in cdivs if "m" in t.lower()), None)
        if num_pid_m is None:
            return Skipped("no tile count along M (`num_pid_m = tl.cdiv(M, BLOCK_M)`) to group by",
                           {"kernel": kernel.name})
        fresh = ("num_pid_in_group", "group_id", "first_pid_m", "group_size_m")
        taken = sorted(set(fresh) & names_in(kernel))
        if taken:
            return Skipped("the standard swizzle's names are taken", {"names": taken})
        m_name, n_name = _target(before), None
        rows = [
            f"num_pid_in_group = {group} * {npn}",
            f"group_id = {pid} // num_pid_in_group",
            f"first_pid_m = group_id * {group}",
            f"group_size_m = min({num_pid_m} - first_pid_m, {group})",
            f"{m_name} = first_pid_m + (({pid} % num_pid_in_group) % group_size_m)",
            f"{n_name or m_name[:-1] + 'n'} = ({pid} % num_pid_in_group) // group_size_m",
        ]
        return "".join(f"{indent}{row}\n" for row in rows)


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Persistent:
    kernel: ast.FunctionDef
    loop: ast.For
    start: str   # source of the first tile (the program id)
    step_param: str | None  # the kernel parameter the loop strides by (e.g. NUM_SMS)


@dataclass(frozen=True, slots=True)
class PersistentGrid(Pass):
    """Persistent grid (a program per SM looping over tiles) <-> one tile per program."""

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

