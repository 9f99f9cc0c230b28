"""A one-tile-per-program kernel turned persistent, read by role: no recorded loop needed.

A kernel launched over a 1-D grid whose body starts its work at `pid = tl.program_id(0)` does
one tile per program. Made persistent, it launches `min(tiles, programs the GPU holds at once)`
programs and each walks the tiles `pid, pid + programs, ...`: the body after the program id
becomes the body of `for pid in range(tl.program_id(0), TILES, tl.num_programs(0))`. TILES is the
host grid's expression read in the kernel's terms: each launch argument becomes the kernel
parameter it is passed as, `meta["P"]` the constexpr P, `triton.cdiv` `tl.cdiv`. Work the
programs share before the loop (descriptors, constants) is then done once per program.

Refused, with the reason: a grid of more than one axis (a grouped order merges them first), a
second program id or `tl.num_programs`, a `return` in the body (it would end the walk), a grid
that reads a host value the kernel does not receive, or counts tiles of a literal size (the
kernel's count would go stale when a sweep retunes the tiles: the sweep goes first and its grid
reads `meta`).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from passes._source import ByteEdit, indent_of, line_end, line_start
from passes.triton._py import PyModule, callee, fresh_name
from passes.triton.roles import launch_arguments, launch_grid

PID = frozenset({"tl.program_id", "triton.language.program_id"})
NUM_PROGRAMS = frozenset({"tl.num_programs", "triton.language.num_programs"})
CDIV = frozenset({"triton.cdiv", "cdiv", "tl.cdiv"})


@dataclass(frozen=True, slots=True)
class Walk:
    """How a kernel becomes persistent: its program-id statement, the grid node(s) to cap, and
    the kernel-side tile count."""

    kernel: ast.FunctionDef
    pid_stmt: ast.Assign
    grids: tuple[ast.AST, ...]
    tiles: str


def _axis(call: ast.Call) -> int | None:
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "axis"), None)
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, int) else None


def _one_axis(mod: PyModule, grid: ast.AST | None) -> ast.AST | str:
    """The single element of a 1-D grid (a tuple, or a lambda returning one)."""
    body = grid.body if isinstance(grid, ast.Lambda) else grid
    if isinstance(body, (ast.Tuple, ast.List)):
        if len(body.elts) != 1:
            return (f"the grid has {len(body.elts)} axes: a persistent loop walks one "
                    "(a grouped order merges them first)")
        return body.elts[0]
    return "the grid is not a tuple or a lambda returning one"


def _in_kernel_terms(mod: PyModule, node: ast.AST, args: dict[str, ast.AST], meta: str | None,
                     params: set[str]) -> str | None:
    """`node` (a host grid expression) written with the kernel's parameters, or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return str(node.value)
    by_text = {mod.text(v): p for p, v in args.items() if not isinstance(v, ast.Constant)}
    if mod.text(node) in by_text:
        return by_text[mod.text(node)]
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == meta \
            and isinstance(node.slice, ast.Constant) and node.slice.value in params:
        return str(node.slice.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
        left = _in_kernel_terms(mod, node.left, args, meta, params)
        right = _in_kernel_terms(mod, node.right, args, meta, params)
        if left is None or right is None:
            return None
        op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//"}[type(node.op)]
        return f"({left} {op} {right})"
    if isinstance(node, ast.Call) and callee(node) in CDIV and len(node.args) == 2:
        if isinstance(node.args[1], ast.Constant):
            return None  # a tile size the host writes as a literal: stale once the tiles are swept
        parts = [_in_kernel_terms(mod, a, args, meta, params) for a in node.args]
        return None if None in parts else f"tl.cdiv({parts[0]}, {parts[1]})"
    return None


def walk_of(mod: PyModule, kernel: ast.FunctionDef) -> Walk | str:
    """How `kernel` becomes persistent, or why it cannot."""
    pids = mod.calls(kernel, PID)
    stmts = [s for s in kernel.body if isinstance(s, ast.Assign) and len(s.targets) == 1
             and isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Call)
             and callee(s.value) in PID]
    if len(pids) != 1 or len(stmts) != 1 or _axis(pids[0]) != 0:
        return "the kernel does not take one program id of axis 0 in a statement of its own"
    if mod.calls(kernel, NUM_PROGRAMS):
        return "the kernel already reads tl.num_programs"
    stmt = stmts[0]
    rest = kernel.body[kernel.body.index(stmt) + 1:]
    if any(isinstance(n, ast.Return) for s in rest for n in ast.walk(s)):
        return "the body returns early: in a loop over tiles that would end the program's walk"
    launches = mod.launches(kernel.name)
    if not launches:
        return "the kernel is never launched in this module"
    params = {a.arg for a in kernel.args.args}
    grids, tiles = [], None
    for launch in launches:
        grid = launch_grid(mod, launch)
        axis = _one_axis(mod, grid)
        if isinstance(axis, str):
            return axis
        meta = grid.args.args[0].arg if isinstance(grid, ast.Lambda) and grid.args.args else None
        text = _in_kernel_terms(mod, axis, launch_arguments(mod, kernel, launch), meta, params)
        if text is None:
            return ("the grid reads a host value the kernel does not receive, or counts tiles of a "
                    f"literal size (sweep the tiles first): {mod.text(axis)}")
        if tiles is not None and text != tiles:
            return "the launches count tiles differently"
        tiles = text
        grids.append(axis)
    return Walk(kernel, stmt, tuple(grids), tiles)


def walk_edits(mod: PyModule, walk: Walk, taken: set[str]) -> list[ByteEdit]:
    """The edits that make the kernel persistent: the loop over tiles, each grid capped by the
    programs the GPU holds, and the host helper that counts them (after the imports)."""
    src = mod.source
    stmt, kernel = walk.pid_stmt, walk.kernel
    pid = stmt.targets[0].id  # type: ignore[attr-defined]
    indent = indent_of(src, mod.start(stmt))
    start = line_start(src, mod.start(stmt))
    end = line_end(src, mod.end(kernel.body[-1]) - 1)
    body_start = line_end(src, mod.end(stmt) - 1)
    body = src[body_start:end].decode("utf-8")
    step = " " * 4
    body = "".join(step + line if line.strip() else line for line in body.splitlines(keepends=True))
    header = (f"{indent}# persistent: each program walks the tiles pid, pid + programs, ...\n"
              f"{indent}for {pid} in range({mod.text(stmt.value)}, {walk.tiles}, tl.num_programs(0)):\n")
    helper = fresh_name("_resident_programs", taken)
    edits = [ByteEdit(start, end, header + body)]
    edits += [ByteEdit(*mod.span(g), f"min({mod.text(g)}, {helper}())") for g in walk.grids]
    imports = [n for n in mod.tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    at = line_end(src, mod.end(imports[-1]) - 1) if imports else 0
    has_torch = any(a.name == "torch" and a.asname is None for n in imports
                    if isinstance(n, ast.Import) for a in n.names)
    edits.append(ByteEdit(at, at, ("" if has_torch else "import torch\n") + (
        f"\n\ndef {helper}() -> int:\n"
        '    """Programs a persistent grid launches: one per SM (a few on the CPU interpreter)."""\n'
        "    if torch.cuda.is_available():\n"
        "        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count\n"
        "    return 4\n")))
    return edits
