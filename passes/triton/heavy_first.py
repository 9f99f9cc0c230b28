"""Launch order of a kernel whose work grows with a program-id axis: the heaviest programs first.

When a kernel's key loop stops at its row block's diagonal, a program's work grows with the
row block it computes. The hardware starts programs in the order of their ids, so the last
programs launched are the heaviest and the grid's tail runs them on a few SMs. Relabeling the
programs along that axis, `p -> tl.num_programs(a) - 1 - p` at every `tl.program_id(a)` of the
kernel, starts them heaviest first (the longest-processing-time order): the kernel computes
the same set of programs, each unchanged, in another order. The relabeling is refused where the
order may matter (programs that talk through atomics), where it is not the kernel's own (a jit
helper it calls reads program ids), where the kernel already reads the axis's size (it orders
or strides its programs itself), and where the row block does not rise with the axis.
"""
from __future__ import annotations

import ast

from passes._source import ByteEdit
from passes.triton._py import PyModule, callee
from passes.triton.roles import NUM_PROGRAMS, PID_CALLS, assignments, program_axis

_PASSING = frozenset({"tl.multiple_of", "tl.max_contiguous", "triton.language.multiple_of",
                      "triton.language.max_contiguous"})


def _rising(expr: ast.AST, binds: dict[str, list[ast.AST]], depth: int = 8) -> set[int] | None:
    """The program-id axes `expr` rises with (non-decreasing in each, `%` rising in runs);
    an empty set: it reads no program id; None: it falls with one, or is not plain arithmetic."""
    if depth < 0:
        return None
    if isinstance(expr, ast.Constant):
        return set()
    if isinstance(expr, ast.Name):
        values = binds.get(expr.id, [])
        if not values:
            return set()  # a parameter: the same in every program
        if len(values) != 1:
            return None
        return _rising(values[0], binds, depth - 1)
    if isinstance(expr, ast.BinOp):
        left, right = _rising(expr.left, binds, depth), _rising(expr.right, binds, depth)
        if left is None or right is None:
            return None
        if isinstance(expr.op, (ast.Add, ast.Mult)):  # sizes and strides are positive
            return left | right
        if isinstance(expr.op, (ast.Sub, ast.FloorDiv, ast.Mod)):
            return left if not right else None  # `n - pid` falls; `x // pid` is no block
        return None
    if isinstance(expr, ast.Call):
        name = callee(expr)
        if name in PID_CALLS:
            axis = program_axis(expr)
            return {axis} if axis is not None else None
        if name in _PASSING and expr.args:
            return _rising(expr.args[0], binds, depth)
        # any other call (`tl.cdiv(n, BLOCK)`) is the same in every program when what it reads is
        parts = [_rising(a, binds, depth) for a in (*expr.args, *(k.value for k in expr.keywords))]
        return set() if all(p == set() for p in parts) else None
    if isinstance(expr, ast.Attribute):
        return set()  # `X.dtype`, `BLOCK.value`: the same in every program
    return None


def heavy_first(mod: PyModule, kernel: ast.FunctionDef, base: str) -> list[ByteEdit] | str:
    """The edits that start the programs of `kernel` heaviest first, where its rows start at
    `base` (source text read in the kernel's scope) and its work grows with them; or why not."""
    try:
        expr = ast.parse(base, mode="eval").body
    except SyntaxError:
        return f"the row base {base!r} does not parse"
    axes = _rising(expr, assignments(kernel))
    if not axes or len(axes) != 1:
        return (f"the row base {base!r} does not rise with one program-id axis alone, so no "
                "launch order puts the heavy programs first")
    axis = next(iter(axes))
    calls = [c for c in ast.walk(kernel) if isinstance(c, ast.Call)]
    if any(callee(c).startswith(("tl.atomic", "triton.language.atomic")) for c in calls):
        return "the kernel's programs use atomics: their launch order may matter"
    if any(callee(c) in NUM_PROGRAMS and program_axis(c) in (axis, None) for c in calls):
        return f"the kernel reads the size of program axis {axis}: it orders its programs itself"
    helpers = {f.name: f for f in mod.kernels() if f is not kernel}
    called = {callee(c) for c in calls} & set(helpers)
    if any(callee(c) in PID_CALLS for name in called for c in ast.walk(helpers[name])
           if isinstance(c, ast.Call)):
        return "a jit helper the kernel calls reads program ids: the order is not the kernel's"
    pids = [c for c in calls if callee(c) in PID_CALLS and program_axis(c) == axis]
    if any(program_axis(c) is None for c in calls if callee(c) in PID_CALLS):
        return "a program id of an axis that is not a literal"
    prefix = callee(pids[0]).rsplit(".", 1)[0]
    return [ByteEdit(*mod.span(c), f"({prefix}.num_programs({axis}) - 1 - {mod.text(c)})")
            for c in pids]
