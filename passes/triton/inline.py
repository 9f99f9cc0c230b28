"""Inlining `@triton.jit` helpers into the kernels that call them.

Triton inlines a jit helper at compile time, so a kernel with its helper's body written in
place is the same program. The passes read a kernel's own body: loads in a helper are no
descriptor sites, a K loop in a helper is no pipelining site for the caller's launch. Where a
card has no site on a kernel, the optimize loop asks again on the kernel with its helpers
inlined (`lineage.optimize.materializations`), so that what the helper hides becomes a site.

A helper is inlined at a call `name = helper(args)` or `name op= helper(args)` (a statement of
a kernel, no `*` / `**` arguments) when its body ends in its only `return value`, defines no
function and declares no `global` / `nonlocal`; one that returns nothing (an epilogue that
stores a tile) at a call that is a statement of its own. Its parameters are replaced by the
arguments where an argument is a name or a literal, else bound by an assignment first; its own
names that the kernel also uses are renamed; the call becomes the body followed by
`name = value`. A branch whose test the
arguments made literal (`if MASK_CAUSAL:` called with `True`, `if STAGE == 2:` called with `3`)
is folded to the branch that runs, as Triton folds a constexpr flag: the specialized body is
what the passes read (a mask under `if MASK_CAUSAL:` is a mask of every iteration once the flag
is `True`).
"""
from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from passes._source import ByteEdit, indent_of
from passes.triton._py import PyModule, callee

if TYPE_CHECKING:
    from kir import KernelIR


def _inlinable(fn: ast.FunctionDef) -> bool:
    """A helper that ends in its only `return value` (called as `name = helper(...)` or
    `name op= helper(...)`)."""
    if not fn.body or not isinstance(fn.body[-1], ast.Return) or fn.body[-1].value is None:
        return False
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    return len(returns) == 1 and _plain(fn)


def _procedure(fn: ast.FunctionDef) -> bool:
    """A helper that returns nothing (no `return`, or a bare one as its last statement), called
    as a statement of its own (`helper(...)`, e.g. an epilogue that stores a tile)."""
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    last_bare = bool(fn.body) and isinstance(fn.body[-1], ast.Return) and fn.body[-1].value is None
    return bool(fn.body) and (not returns or returns == [fn.body[-1]] and last_bare) and _plain(fn)


def _plain(fn: ast.FunctionDef) -> bool:
    """No nested function, lambda, `global` / `nonlocal`, `*args` / `**kwargs` or keyword-only
    or positional-only parameters."""
    nested = [n for n in ast.walk(fn) if n is not fn and isinstance(
        n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Global, ast.Nonlocal))]
    args = fn.args
    return (not nested and args.vararg is None and args.kwarg is None
            and not args.posonlyargs and not args.kwonlyargs)


def _bound(fn: ast.FunctionDef) -> set[str]:
    """Names a function binds (parameters, assignment and loop targets)."""
    out = {a.arg for a in fn.args.args}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            out.add(node.id)
    return out


class _Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, ast.expr]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.AST:
        new = self.names.get(node.id)
        if new is None:
            return node
        if isinstance(new, ast.Name) or not isinstance(node.ctx, ast.Load):
            name = new.id if isinstance(new, ast.Name) else node.id
            return ast.copy_location(ast.Name(name, node.ctx), node)
        return ast.copy_location(new, node)


_LITERAL_NODES = (ast.Constant, ast.UnaryOp, ast.BinOp, ast.BoolOp, ast.Compare, ast.unaryop,
                  ast.operator, ast.boolop, ast.cmpop)


def _literal_truth(test: ast.expr) -> bool | None:
    """The truth of a test made of literals and operators alone (`True`, `0`, `not False`,
    `3 == 2`, `3 & 2`, `1 and 0 < 4`: a flag argument the call bound, compared or masked),
    else None. Numbers and booleans only; an expression that raises is None."""
    value = _literal_value(test)
    return None if value is _NO_VALUE else bool(value)


_NO_VALUE = object()


def _literal_value(test: ast.expr) -> Any:
    """The value of an expression made of literals and operators alone (`_literal_truth`), else
    `_NO_VALUE`."""
    if not all(isinstance(n, _LITERAL_NODES) for n in ast.walk(test)):
        return _NO_VALUE
    if any(isinstance(n, ast.Constant) and not isinstance(n.value, (bool, int, float, type(None)))
           for n in ast.walk(test)):
        return _NO_VALUE
    if any(isinstance(n, (ast.Pow, ast.LShift)) for n in ast.walk(test)):
        return _NO_VALUE  # no arbitrary-size arithmetic
    try:
        code = compile(ast.fix_missing_locations(ast.Expression(test)), "<flag>", "eval")
        return eval(code, {"__builtins__": {}}, {})
    except Exception:  # noqa: BLE001 - a literal test that fails to evaluate stays as written
        return _NO_VALUE


class _FoldLiteralBranches(ast.NodeTransformer):
    """`if True: A else: B` -> A, `x if False else y` -> y; a block the folds emptied gets
    `pass` (`ast.NodeTransformer` splices the statement lists a visit returns)."""

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        if not isinstance(node, ast.Module) and getattr(node, "body", None) == []:
            node.body = [ast.Pass()]
        return node

    def visit_If(self, node: ast.If) -> Any:
        truth = _literal_truth(node.test)
        if truth is None:
            return self.generic_visit(node)
        return self.visit(ast.Module(node.body if truth else node.orelse, [])).body

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        truth = _literal_truth(node.test)
        if truth is None:
            return self.generic_visit(node)
        return self.visit(node.body if truth else node.orelse)


def _call_arguments(fn: ast.FunctionDef, call: ast.Call) -> dict[str, ast.expr] | None:
    params = [a.arg for a in fn.args.args]
    if len(call.args) > len(params) or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    bound = dict(zip(params, call.args))
    for kw in call.keywords:
        if kw.arg is None or kw.arg not in params or kw.arg in bound:
            return None
        bound[kw.arg] = kw.value
    defaults = dict(zip(params[len(params) - len(fn.args.defaults):], fn.args.defaults))
    for p in params:
        if p not in bound:
            if p not in defaults:
                return None
            bound[p] = defaults[p]
    return bound


def _inlined_body(fn: ast.FunctionDef, call: ast.Call, target: ast.expr | None,
                  taken: set[str], op: ast.operator | None = None) -> list[str] | None:
    """The statements (source lines, unindented) that replace `target = fn(...)` (with `op`,
    `target op= fn(...)`; with no target, the statement `fn(...)` of a procedure)."""
    bound = _call_arguments(fn, call)
    if bound is None:
        return None
    used = set(taken)
    names: dict[str, ast.expr] = {}
    prologue: list[str] = []

    def fresh(name: str) -> str:
        new, i = f"{name}_{fn.name.strip('_')}", 1
        while new in used:
            i += 1
            new = f"{name}_{fn.name.strip('_')}{i}"
        used.add(new)
        return new

    assigned = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    for param, arg in bound.items():
        simple = isinstance(arg, (ast.Name, ast.Constant))
        if simple and param not in assigned:
            names[param] = arg
        else:
            local = param if param not in taken else fresh(param)
            names[param] = ast.Name(local, ast.Load())
            prologue.append(f"{local} = {ast.unparse(arg)}")
            used.add(local)
    for name in _bound(fn) - set(bound):
        if name in taken:
            names[name] = ast.Name(fresh(name), ast.Load())
    renamed = [_Rename(names).visit(ast.parse(ast.unparse(stmt)).body[0]) for stmt in fn.body]
    body = _FoldLiteralBranches().visit(ast.Module(renamed, [])).body
    if target is None:  # a procedure: its body, without the bare `return` it may end in
        if body and isinstance(body[-1], ast.Return):
            body = body[:-1]
        return prologue + [ast.unparse(stmt) for stmt in body]
    ret = body[-1]
    assert isinstance(ret, ast.Return) and ret.value is not None
    lines = prologue + [ast.unparse(stmt) for stmt in body[:-1]]
    if op is None:
        lines.append(f"{ast.unparse(target)} = {ast.unparse(ret.value)}")
    else:  # `acc += helper(...)`: the value first, then the update
        value = fresh("value")
        lines.append(f"{value} = {ast.unparse(ret.value)}")
        lines.append(ast.unparse(ast.AugAssign(target, op, ast.Name(value, ast.Load()))))
    return lines


def inline_helpers(ir: KernelIR) -> KernelIR | None:
    """`ir` with every inlinable call of a `@triton.jit` helper in a kernel inlined (module
    docstring), or None when there is none. The helpers' definitions stay."""
    from kir import Edit, Span  # noqa: PLC0415

    mod = PyModule(ir)
    kernels = mod.kernels()
    helpers = {fn.name: fn for fn in kernels if _inlinable(fn)}
    procedures = {fn.name: fn for fn in kernels if _procedure(fn)}
    launched = {k.name for k in kernels if mod.launches(k.name)}
    edits: list[ByteEdit] = []
    for kernel in kernels:
        if kernel.name not in launched:
            continue
        taken = {n.id for n in ast.walk(kernel) if isinstance(n, ast.Name)} | {
            a.arg for a in kernel.args.args}
        for stmt in ast.walk(kernel):
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                    and isinstance(stmt.value, ast.Call):
                helper = helpers.get(callee(stmt.value))
                target, op = stmt.targets[0], None
            elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.value, ast.Call):
                helper = helpers.get(callee(stmt.value))
                target, op = stmt.target, stmt.op
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                helper = procedures.get(callee(stmt.value))
                target, op = None, None
            else:
                continue
            if helper is None or helper is kernel:
                continue
            lines = _inlined_body(helper, stmt.value, target, taken, op)
            if lines is None:
                continue
            if not lines:
                lines = ["pass"]
            taken |= {n.id for line in lines for n in ast.walk(ast.parse(line))
                      if isinstance(n, ast.Name)}
            start, end = mod.stmt_span(stmt)
            pad = indent_of(mod.source, mod.start(stmt))
            text = "".join(pad + ln.replace("\n", "\n" + pad) + "\n" for ln in lines)
            edits.append(ByteEdit(start, end, text))
    if not edits:
        return None
    edits.sort(key=lambda e: e.start)
    return ir.apply(Edit(Span(e.start, e.end), e.text) for e in edits)


class _FoldLiterals(_FoldLiteralBranches):
    """Also folds expressions: a sub-expression of literals alone to its value (`not True`,
    `True == 0`), then `x & True`, `x | False`, `True and x`, `False or x` to `x` and the
    absorbing cases (`x | True`, `False and x`, ...) to the literal."""

    def __init__(self) -> None:
        self.folded = 0

    def visit_If(self, node: ast.If) -> Any:
        node.test = self.visit(node.test)
        if _literal_truth(node.test) is not None:
            self.folded += 1
        return super().visit_If(node)

    def _value(self, node: ast.expr) -> ast.expr:
        """A boolean made of literals alone as its value; numbers (`-1.0e30`, `2 * 3`) stay as
        written."""
        if isinstance(node, ast.Constant):
            return node
        value = _literal_value(node)
        if not isinstance(value, bool):
            return node
        self.folded += 1
        return ast.copy_location(ast.Constant(value), node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        return self._value(node)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        return self._value(node)

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, (ast.BitAnd, ast.BitOr)):
            unit = isinstance(node.op, ast.BitAnd)  # x & True is x, x | False is x
            for lit, other in ((node.left, node.right), (node.right, node.left)):
                # with an integer x, x & True is x & 1 and x | True is x | 1
                if isinstance(lit, ast.Constant) and isinstance(lit.value, bool) \
                        and (lit.value is False or _boolean(other)):
                    self.folded += 1
                    return other if lit.value is unit else ast.Constant(not unit)
        return self._value(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        unit = isinstance(node.op, ast.And)  # True and x is x, False or x is x
        kept: list[ast.expr] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, bool):
                self.folded += 1
                if value.value is not unit:
                    return ast.Constant(not unit)
                continue
            kept.append(value)
        if not kept:
            return ast.Constant(unit)
        if len(kept) == 1:
            return kept[0]
        node.values = kept
        return node


def _boolean(node: ast.expr) -> bool:
    """Whether `node` is a condition by its form (a comparison, `not`, `and` / `or`, or `&` /
    `|` of conditions): `x & True` is `x` and `x | True` is `True` only for such an `x`."""
    if isinstance(node, ast.Subscript):  # `ok[:, None]` broadcast
        return _boolean(node.value)
    if isinstance(node, (ast.Compare, ast.BoolOp)) or isinstance(node, ast.UnaryOp) \
            and isinstance(node.op, ast.Not):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
        return _boolean(node.operand)
    return isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr)) \
        and _boolean(node.left) and _boolean(node.right)


def _launch_literals(mod: PyModule, kernel: ast.FunctionDef) -> dict[str, Any]:
    """Constexpr parameters of `kernel` that every launch passes the same literal (a bool or
    an int; a parameter a launch leaves out, its literal default), by name; none where a
    launch passes `*` / `**` arguments."""
    params = [a.arg for a in kernel.args.args]
    constexpr = {a.arg for a in kernel.args.args
                 if a.annotation is not None and ast.unparse(a.annotation).endswith("constexpr")}
    launches = mod.launches(kernel.name)
    if not launches:
        return {}
    defaults = dict(zip(params[len(params) - len(kernel.args.defaults):], kernel.args.defaults))
    seen: dict[str, list[Any]] = {}
    for call in launches:
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None
                                                                       for k in call.keywords):
            return {}
        given = dict(defaults)  # a parameter a launch leaves out takes its default
        given |= {params[i]: a for i, a in enumerate(call.args) if i < len(params)}
        given |= {k.arg: k.value for k in call.keywords if k.arg in constexpr}
        for name in constexpr:
            value = given.get(name)
            literal = isinstance(value, ast.Constant) and isinstance(value.value, (bool, int))
            seen.setdefault(name, []).append(value.value if literal else _UNBOUND)
    return {name: vals[0] for name, vals in seen.items()
            if all(v is not _UNBOUND and v == vals[0] and type(v) is type(vals[0]) for v in vals)}


_UNBOUND = object()
"""A launch that passes a flag no literal (or nothing: its default)."""


def _tests_only(kernel: ast.FunctionDef, name: str) -> bool:
    """Whether `name` is read only inside the tests of `if` statements and conditional
    expressions of `kernel`."""
    inside: set[int] = set()
    for node in ast.walk(kernel):
        if isinstance(node, (ast.If, ast.IfExp)):
            inside |= {id(n) for n in ast.walk(node.test)}
    return all(id(n) in inside for n in ast.walk(kernel)
               if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load))


class _Bind(ast.NodeTransformer):
    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if isinstance(node.ctx, ast.Load) and node.id in self.values:
            return ast.copy_location(ast.Constant(self.values[node.id]), node)
        return node


def specialize_flags(ir: KernelIR) -> KernelIR | None:
    """`ir` with each launched kernel's constexpr flags that every launch binds to the same
    literal (module docstring) read as that literal, and the branches and boolean expressions
    that made literal folded; None when no kernel has such a flag whose reading folds anything.
    The parameters stay in the signatures and the launches."""
    import copy  # noqa: PLC0415

    from kir import Edit, Span  # noqa: PLC0415

    mod = PyModule(ir)
    edits: list[ByteEdit] = []
    for kernel in mod.kernels():
        flags = {name: value for name, value in _launch_literals(mod, kernel).items()
                 if isinstance(value, bool) or _tests_only(kernel, name)}
        if not flags:
            continue
        fold = _FoldLiterals()
        new = fold.visit(_Bind(flags).visit(ast.Module(copy.deepcopy(kernel.body), []))).body
        if not fold.folded:
            continue
        start = mod.stmt_span(kernel.body[0])[0]
        end = mod.stmt_span(kernel.body[-1])[1]
        pad = indent_of(mod.source, mod.start(kernel.body[0]))
        text = "".join(pad + line + "\n" for stmt in new
                       for line in ast.unparse(stmt).splitlines())
        edits.append(ByteEdit(start, end, text))
    if not edits:
        return None
    edits.sort(key=lambda e: e.start)
    return ir.apply(Edit(Span(e.start, e.end), e.text) for e in edits)
