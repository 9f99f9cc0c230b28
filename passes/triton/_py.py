"""Finding Triton constructs in Python source with byte positions (Python's `ast`).

The rules of the Triton passes match on `ast` nodes (exact, position-carrying, and the
same on Python 3.11 and 3.12) and edit bytes of the IR's source. `ast` column offsets are UTF-8
byte offsets, so spans here are byte spans of `KernelIR.source`.
"""
from __future__ import annotations

import ast
import functools
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeGuard

from passes._source import ByteEdit

if TYPE_CHECKING:
    from kir import KernelIR

JIT_NAMES = frozenset({"triton.jit", "jit", "tl.jit", "triton.language.jit"})


def dotted(expr: ast.AST) -> str:
    """`tl.math.exp2` for an Attribute chain / Name; "" for anything else."""
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        parts.append(expr.id)
        return ".".join(reversed(parts))
    return ""


def callee(call: ast.AST) -> str:
    return dotted(call.func) if isinstance(call, ast.Call) else ""


def is_cdiv(node: ast.AST, arity: int | None = None) -> TypeGuard[ast.Call]:
    """`node` is a call whose last dotted name is exactly `cdiv`: `triton.cdiv`, `tl.cdiv`,
    `triton.language.cdiv`, a module under any alias (`tr.cdiv`), a bare or user `cdiv`; not
    `my_cdiv`. With `arity`, only a call of exactly that many positional arguments."""
    if not isinstance(node, ast.Call) or callee(node).rpartition(".")[2] != "cdiv":
        return False
    return arity is None or len(node.args) == arity


class PyModule:
    """A parsed Triton module with byte spans for its nodes."""

    def __init__(self, ir: KernelIR) -> None:
        self.ir = ir
        self.source: bytes = ir.source
        # One parse per source text, shared by every PyModule of that text: the role analysis
        # (`passes.triton.roles`) caches its facts per parsed function, and an optimization run
        # asks for the roles of the same kernels hundreds of times through fresh PyModules.
        # Nothing mutates a parsed tree (a rewrite edits bytes and parses again).
        self.tree, self._lines, self.parents, self._nodes = _parsed(self.source)

    # -- positions ----------------------------------------------------------------------
    def start(self, node: ast.AST) -> int:
        return self._lines[node.lineno - 1] + node.col_offset

    def end(self, node: ast.AST) -> int:
        return self._lines[node.end_lineno - 1] + node.end_col_offset

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.start(node), self.end(node)

    def text(self, node: ast.AST) -> str:
        return self.source[self.start(node):self.end(node)].decode("utf-8")

    def stmt_span(self, node: ast.stmt) -> tuple[int, int]:
        """The statement with its decorators (for a def) and its whole lines."""
        first = node.decorator_list[0] if getattr(node, "decorator_list", None) else node
        start = self._lines[first.lineno - 1]
        end = self._lines[node.end_lineno] if node.end_lineno < len(self._lines) else len(self.source)
        return start, end

    # -- kernels and launches -----------------------------------------------------------
    def functions(self) -> list[ast.FunctionDef]:
        return [n for n in self._nodes if isinstance(n, ast.FunctionDef)]

    def kernels(self) -> list[ast.FunctionDef]:
        """Functions decorated with `triton.jit` (bare or called)."""
        return [f for f in self.functions() if any(_decorator_name(d) in JIT_NAMES
                                                   for d in f.decorator_list)]

    def decorator(self, fn: ast.FunctionDef, suffix: str) -> ast.expr | None:
        for dec in fn.decorator_list:
            if _decorator_name(dec).split(".")[-1] == suffix:
                return dec
        return None

    def launches(self, kernel: str, shared: bool = False) -> list[ast.Call]:
        """The launches of the jit kernel named `kernel`: its calls `kernel[grid](...)` anywhere
        in the module, then the launches `p[grid](...)` of the module-level functions it is
        passed to as `p` (`helper_launches`). A helper's launch counts when the helper runs
        `kernel` alone; with `shared`, also when it runs other kernels too (editing such a
        launch edits theirs: `shared_launch` says so)."""
        out = [n for n in self._nodes
               if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
               and dotted(n.func.value) == kernel]
        out += [h.call for h in helper_launches(self.tree)
                if kernel in h.passed and (shared or set(h.passed) == {kernel})]
        return out

    def shared_launch(self, call: ast.Call) -> str | None:
        """Why a rewrite cannot edit the launch `call` for one kernel: it is a helper's launch
        (`helper_launches`) that the module passes other kernels too, or a kernel it cannot
        read. None for a launch of one kernel."""
        found = next((h for h in helper_launches(self.tree) if h.call is call), None)
        if found is None or (len(set(found.passed)) == 1 and "" not in found.passed):
            return None
        runs = ", ".join(f"`{k}`" for k in sorted(set(found.passed) - {""}))
        if "" in found.passed:
            runs = f"{runs} and whatever a use of it passes unseen" if runs else \
                "whatever the uses of it pass unseen"
        return (f"the launch on line {call.lineno} is inside `{found.helper.name}`, which "
                f"launches {runs} as its parameter `{found.param}`: editing it would change the "
                "launch of every kernel it runs")

    def sharing(self, kernel: str) -> str | None:
        """Why a rewrite that edits every launch of `kernel` (its signature, its grid) cannot:
        the `shared_launch` reason of its first launch that runs other kernels too."""
        return next(filter(None, map(self.shared_launch, self.launches(kernel, shared=True))), None)

    def calls(self, root: ast.AST, names: set[str] | frozenset[str]) -> list[ast.Call]:
        """Calls under `root` whose callee's dotted name is in `names`, in source order."""
        found = [n for n in ast.walk(root) if isinstance(n, ast.Call) and callee(n) in names]
        return sorted(found, key=self.start)

    def enclosing(self, node: ast.AST, kind: type | tuple[type, ...]) -> ast.AST | None:
        cur = self.parents.get(node)
        while cur is not None and not isinstance(cur, kind):
            cur = self.parents.get(cur)
        return cur

    def kernel_of(self, node: ast.AST) -> ast.FunctionDef | None:
        kernels = set(map(id, self.kernels()))
        cur = self.parents.get(node)
        while cur is not None:
            if isinstance(cur, ast.FunctionDef) and id(cur) in kernels:
                return cur
            cur = self.parents.get(cur)
        return None

    # -- argument lists -----------------------------------------------------------------
    @staticmethod
    def arguments(call: ast.Call) -> list[ast.AST]:
        """Positional and keyword arguments in source order."""
        items: list[ast.AST] = [*call.args, *call.keywords]
        return sorted(items, key=lambda n: (n.lineno, n.col_offset))

    @staticmethod
    def keyword(call: ast.Call, name: str) -> ast.keyword | None:
        return next((k for k in call.keywords if k.arg == name), None)

    def remove_argument(self, call: ast.Call, node: ast.AST) -> ByteEdit:
        """Delete one argument with the separator before it (or after it when first)."""
        items = self.arguments(call)
        i = items.index(node)
        if i > 0:
            return ByteEdit(self.end(items[i - 1]), self.end(node), "")
        if len(items) > 1:
            return ByteEdit(self.start(node), self.start(items[1]), "")
        return ByteEdit(self.start(node), self.end(node), "")

    def insert_argument(self, call: ast.Call, position: int, text: str) -> ByteEdit:
        """Insert `text` as the argument at `position` (clamped to the argument count)."""
        items = self.arguments(call)
        position = max(0, min(position, len(items)))
        if position > 0:
            at = self.end(items[position - 1])
            return ByteEdit(at, at, ", " + text)
        if items:
            at = self.start(items[0])
            return ByteEdit(at, at, text + ", ")
        at = self.end(call) - 1  # just before the closing parenthesis
        return ByteEdit(at, at, text)


@dataclass(frozen=True, slots=True)
class HelperLaunch:
    """A launch `p[grid](...)` inside a module-level function `helper` of its own parameter
    `p` (`def _launch(kernel, x): kernel[grid](x, ...)`), with what each use of `helper` in
    the module passes as `p`: the dotted name written there (`_launch(my_kernel, x)`,
    `_launch(x=x, kernel=my_kernel)`, or the parameter's default), "" where a use does not
    show it (a `*args` / `**kwargs` call, an expression, the helper passed around or bound in a
    `partial`). A call of the helper that passes a kernel is a launch of that kernel, located
    at `call`, where its launch keywords are written."""

    call: ast.Call
    helper: ast.FunctionDef
    param: str
    passed: tuple[str, ...]


def helper_launches(tree: ast.Module) -> tuple[HelperLaunch, ...]:
    """Every helper launch of a parsed module (`HelperLaunch`), in source order; one level of
    helpers: a helper that hands its parameter on to another helper is not followed. Read
    once per parsed tree."""
    hit = _HELPERS.get(tree)
    if hit is None:
        hit = _HELPERS[tree] = _read_helper_launches(tree)
    return hit


_HELPERS: weakref.WeakKeyDictionary[ast.Module, tuple[HelperLaunch, ...]] = (
    weakref.WeakKeyDictionary())


def _read_helper_launches(tree: ast.Module) -> tuple[HelperLaunch, ...]:
    launching: list[tuple[ast.FunctionDef, list[tuple[ast.Call, str]]]] = []
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef) or any(_decorator_name(d) in JIT_NAMES
                                                      for d in fn.decorator_list):
            continue
        params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
        # a parameter the function rebinds no longer holds what the caller passed
        params -= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
                   and isinstance(n.ctx, (ast.Store, ast.Del))}
        calls = [(n, n.func.value.id) for n in ast.walk(fn)
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
                 and isinstance(n.func.value, ast.Name) and n.func.value.id in params]
        if calls:
            launching.append((fn, sorted(calls, key=lambda c: (c[0].lineno, c[0].col_offset))))
    if not launching:
        return ()
    names = {fn.name for fn, _ in launching}
    called: dict[str, list[ast.Call]] = {}
    loose: set[str] = set()  # helpers used other than by a call (passed, aliased, partial)
    callees: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
            called.setdefault(node.func.id, []).append(node)
            callees.add(id(node.func))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load) \
                and id(node) not in callees:
            loose.add(node.id)
    out: list[HelperLaunch] = []
    for fn, calls in launching:
        for call, param in calls:
            passed = [_passed_as(fn, use, param) for use in called.get(fn.name, [])]
            passed = [p for p in passed if p is not None] + ([""] if fn.name in loose else [])
            out.append(HelperLaunch(call, fn, param, tuple(passed)))
    return tuple(out)


def _passed_as(fn: ast.FunctionDef, use: ast.Call, param: str) -> str | None:
    """The dotted name the call `use` of `fn` passes as `param` ("" where it cannot be read;
    None where the call leaves it out and it has no default: that call cannot run)."""
    kw = next((k for k in use.keywords if k.arg == param), None)
    if kw is not None:
        return dotted(kw.value)
    positional = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if param in positional:
        i = positional.index(param)
        if any(isinstance(a, ast.Starred) for a in use.args[:i + 1]):
            return ""
        if i < len(use.args):
            return dotted(use.args[i])
    if any(isinstance(a, ast.Starred) for a in use.args) or any(k.arg is None for k in use.keywords):
        return ""
    defaults = dict(zip(positional[len(positional) - len(fn.args.defaults):], fn.args.defaults))
    defaults.update((a.arg, d) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults)
                    if d is not None)
    return dotted(defaults[param]) if param in defaults else None


# Parsed sources kept (a run's current states and candidates; about 2 MB for a 360-line module).
PARSED_KEPT = 64


@functools.lru_cache(maxsize=PARSED_KEPT)
def _parsed(
    source: bytes,
) -> tuple[ast.Module, list[int], dict[ast.AST, ast.AST], list[ast.AST]]:
    """(tree, line starts, parents, every node in ast.walk order) of a module's source, parsed
    once while among the `PARSED_KEPT` most recently asked for."""
    tree = ast.parse(source.decode("utf-8"))
    lines = [0]
    for i, byte in enumerate(source):
        if byte == 10:
            lines.append(i + 1)
    parents: dict[ast.AST, ast.AST] = {}
    nodes = []
    for node in ast.walk(tree):
        nodes.append(node)
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    return tree, lines, parents, nodes


def _decorator_name(dec: ast.expr) -> str:
    return dotted(dec.func) if isinstance(dec, ast.Call) else dotted(dec)


def literal_int(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def int_value(expr: ast.AST, values: dict[str, int]) -> int | None:
    """An integer expression over known names (+ - * // % <<, min, max); None if unknown."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return expr.value
    if isinstance(expr, ast.Name):
        return values.get(expr.id)
    if isinstance(expr, ast.BinOp):
        left, right = int_value(expr.left, values), int_value(expr.right, values)
        if left is None or right is None:
            return None
        ops = {ast.Add: lambda: left + right, ast.Sub: lambda: left - right,
               ast.Mult: lambda: left * right, ast.LShift: lambda: left << right,
               ast.FloorDiv: lambda: left // right if right else None,
               ast.Mod: lambda: left % right if right else None}
        op = ops.get(type(expr.op))
        return op() if op is not None else None
    if isinstance(expr, ast.Call) and callee(expr) in ("min", "max") and expr.args and not expr.keywords:
        args = [int_value(a, values) for a in expr.args]
        return None if None in args else (min(args) if callee(expr) == "min" else max(args))
    return None


def argument(call: ast.Call, position: int, name: str) -> ast.AST | None:
    """The value of `call`'s argument `name`, passed by keyword or at `position`; None when it
    is not passed."""
    kw = next((k.value for k in call.keywords if k.arg == name), None)
    return kw if kw is not None else (call.args[position] if position < len(call.args) else None)


def names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def bound_names(node: ast.AST) -> set[str]:
    """The names `node` itself binds: an assignment's targets (augmented and annotated too), a
    for loop's target, a walrus's name; nothing for any other node (not looked inside)."""
    targets: list[ast.AST] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.NamedExpr)):
        targets = [node.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def walk_stmts(body: list[ast.stmt]) -> Iterator[list[ast.stmt]]:
    """Every statement list (block) under `body`, `body` first."""
    yield body
    for stmt in body:
        for attr in ("body", "orelse", "finalbody"):
            block = getattr(stmt, attr, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield from walk_stmts(block)
        for handler in getattr(stmt, "handlers", []) or []:
            yield from walk_stmts(handler.body)


def normalized(text: str) -> str:
    """The formatting-free form of Python source (its AST dump): equal for programs that
    differ only in whitespace, comments, trailing commas or parentheses."""
    return _dump(text)


@functools.lru_cache(maxsize=64)
def _dump(text: str) -> str:
    return ast.dump(ast.parse(text))


def fresh_name(base: str, taken: set[str]) -> str:
    """`base`, or `base_2`, `base_3`, ... : the first not in `taken` (which then holds it)."""
    name, i = base, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name
