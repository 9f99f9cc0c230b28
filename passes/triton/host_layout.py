"""What a host function passes to a kernel launch, and which axis of a host tensor is dense.

`HostArgs` maps a launch's arguments to the kernel's parameters (those the kernel's autotuner
or heuristics set left out), reading a tensor's strides spread into the launch (`*x.stride()`)
axis by axis, and names the tensor and axis behind every stride argument (`x.stride(i)`,
`x.stride()[i]`).

`unit_axis` reads which axis of a host tensor the host source itself makes contiguous (stride
one), following the value back to where it is made:
- a fresh tensor (`torch.empty(shape)` and the other factories, `.contiguous()`): its last axis;
- a view that moves axes (`.t()`, `.T`, `.mT`, `.transpose(i, j)`, `.permute(...)`): the
  inner tensor's unit axis, moved;
- a name: its last assignment before the read, where that assignment is straight-line code of
  the function (not inside a branch or loop), or a check the source makes of it there
  (`assert x.stride(i) == 1`, `if x.stride(i) != 1: raise ...`);
- a call of a function of the module: the axis every one of its returns establishes, read in
  that function with its axis arguments bound to the call's literals; a return inside
  `if v.stride(i) == 1:` (or after such a check) returns a tensor whose axis i is contiguous.
Axes are ints as the source writes them (negative: from the last). Anything else reads as
unknown (None). A caller that relies on the answer for speed alone (a descriptor it checks at
run time) may use it as it is; the answer is what the source says, not a guarantee about
tensors the user passes in.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from passes.triton._py import PyModule, callee, literal_int
from passes.triton.roles import autotune_entries, heuristic_entries

FACTORIES = frozenset({"torch.empty", "torch.zeros", "torch.ones", "torch.rand", "torch.randn",
                       "torch.full", "torch.randint"})
LIKE = frozenset({"torch.empty_like", "torch.zeros_like", "torch.ones_like", "torch.rand_like",
                  "torch.randn_like", "torch.full_like"})
SWAPS = frozenset({"transpose", "swapaxes", "swapdims"})
_DEPTH = 24


class HostArgs:
    """What the launches of a kernel pass: parameter -> (argument node, tensor name and axis
    when it is `x.stride(i)`, `x.stride()[i]` or an element of `*x.stride()`)."""

    def __init__(self, mod: PyModule, kernel: ast.FunctionDef, launch: ast.Call) -> None:
        params = [a.arg for a in kernel.args.args]
        self.args: dict[str, ast.AST] = {}
        self.dims: dict[str, tuple[str, int]] = {}
        host = mod.enclosing(launch, ast.FunctionDef)
        given = {k.arg for k in launch.keywords if k.arg} | supplied(mod, kernel)
        free = [p for p in params if p not in given]
        stars = [a for a in launch.args if isinstance(a, ast.Starred)]
        plain = [a for a in launch.args if not isinstance(a, ast.Starred)]
        spread = len(free) - len(plain)
        ranks = [shape_rank(host, stride_owner(s.value)) for s in stars]
        unknown = [i for i, r in enumerate(ranks) if r is None]
        if unknown and spread > 0:
            rest = spread - sum(r for r in ranks if r is not None)
            share = rest // len(unknown) if rest > 0 and rest % len(unknown) == 0 else None
            ranks = [r if r is not None else share for r in ranks]
        self.ranks: dict[str, int] = {}
        """Tensor (as text) -> its rank, where the launch spreads its strides."""
        at = 0
        for arg in launch.args:
            if isinstance(arg, ast.Starred):
                owner, rank = stride_owner(arg.value), ranks[stars.index(arg)]
                if rank is None:
                    break
                if owner:
                    self.ranks[owner] = rank
                for d in range(rank):
                    if owner and at + d < len(free):
                        self.dims[free[at + d]] = (owner, d)
                at += rank
                continue
            if at < len(free):
                self.args[free[at]] = arg
            at += 1
        self.args.update((k.arg, k.value) for k in launch.keywords if k.arg)
        for name, node in self.args.items():
            got = stride_of(node)
            if got is not None:
                self.dims[name] = got


def supplied(mod: PyModule, kernel: ast.FunctionDef) -> set[str]:
    """The parameters the kernel's decorators set at each launch (its autotuner's
    configurations, its heuristics): a launch passes none of them."""
    tables = [c.args[0] for c in autotune_entries(mod, kernel)]
    keys = {str(k.value) for t in tables for k in t.keys if isinstance(k, ast.Constant)}  # type: ignore[attr-defined]
    return keys | set(heuristic_entries(mod, kernel)[1])


def stride_owner(node: ast.AST) -> str:
    """`x` (as text) of `x.stride()`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "stride" and not node.args:
        return ast.unparse(node.func.value)
    return ""


def stride_of(node: ast.AST) -> tuple[str, int] | None:
    """(x as text, i) of `x.stride(i)` or `x.stride()[i]` (i a literal, maybe negative)."""
    index: ast.AST | None = None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "stride" and len(node.args) == 1:
        owner, index = node.func.value, node.args[0]
    elif isinstance(node, ast.Subscript) and stride_owner(node.value):
        owner, index = node.value.func.value, node.slice  # type: ignore[attr-defined]
    else:
        return None
    try:
        value = ast.literal_eval(index)
    except ValueError:
        return None
    return (ast.unparse(owner), value) if isinstance(value, int) else None


def shape_rank(host: ast.AST | None, tensor: str) -> int | None:
    """The rank of host tensor `tensor` where the host unpacks its shape (`b, m, k = x.shape`)."""
    if host is None or not tensor:
        return None
    for node in ast.walk(host):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "shape" and ast.unparse(node.value.value) == tensor:
            return len(node.targets[0].elts)
    return None


# -- which axis is contiguous ----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Unit:
    """The contiguous axis of a tensor: as the source writes it (negative: from the last), or
    counted from the first where the source also says the rank."""

    axis: int
    rank: int | None = None

    def at(self, rank: int | None) -> Unit:
        """The same axis, counted from the first where `rank` (or its own) is known."""
        rank = self.rank if self.rank is not None else rank
        return Unit(self.axis % rank, rank) if rank else self


def unit_axis(mod: PyModule, fn: ast.FunctionDef, node: ast.AST, at: int,
              env: dict[str, int] | None = None, depth: int = 0) -> Unit | None:
    """The axis of the tensor `node` evaluates to (read in host function `fn` at byte `at`)
    that the source makes contiguous, or None (module docstring). `env` binds names of `fn`
    to axis literals (a called function's arguments)."""
    if depth > _DEPTH:
        return None
    env = env if env is not None else {}
    if isinstance(node, ast.Name):
        return _name_axis(mod, fn, node.id, at, env, depth)
    if isinstance(node, ast.Attribute) and node.attr in ("T", "mT"):
        inner = unit_axis(mod, fn, node.value, at, env, depth + 1)
        if inner is None or (node.attr == "T" and inner.rank not in (None, 2)):
            return None
        return _swapped(inner.at(2 if node.attr == "T" else None), -2, -1)
    if not isinstance(node, ast.Call):
        return None
    name = callee(node)
    if name in FACTORIES:
        return Unit(-1).at(_factory_rank(node))
    if name in LIKE and node.args:
        fmt = next((k.value for k in node.keywords if k.arg == "memory_format"), None)
        inner = unit_axis(mod, fn, node.args[0], at, env, depth + 1)
        if fmt is not None:
            rank = inner.rank if inner is not None else None
            return Unit(-1).at(rank) if ast.unparse(fmt).endswith("contiguous_format") else None
        return inner
    if isinstance(node.func, ast.Attribute):
        return _method_axis(mod, fn, node, at, env, depth)
    if isinstance(node.func, ast.Name):
        called = next((f for f in mod.functions() if f.name == node.func.id
                       and f not in mod.kernels()), None)
        if called is not None and called is not fn:
            return _returned_axis(mod, called, node, _env_at(mod, fn, at, env), depth + 1)
    return None


def _factory_rank(call: ast.Call) -> int | None:
    """The rank of `torch.empty((a, b))` / `torch.empty(a, b)` / `torch.full((a, b), v)`."""
    size = next((k.value for k in call.keywords if k.arg == "size"), None)
    first = size if size is not None else call.args[0] if call.args else None
    if isinstance(first, (ast.Tuple, ast.List)):
        return len(first.elts) if not any(isinstance(e, ast.Starred) for e in first.elts) else None
    if callee(call) in ("torch.full", "torch.randint") or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    return len(call.args) if call.args else None


def _method_axis(mod: PyModule, fn: ast.FunctionDef, node: ast.Call, at: int,
                 env: dict[str, int], depth: int) -> Unit | None:
    """`x.contiguous()`, `x.t()`, `x.transpose(i, j)`, `x.permute(...)`, `x.movedim(i, j)`."""
    method, inner = node.func.attr, node.func.value  # type: ignore[attr-defined]
    if method not in ("contiguous", "t", "movedim", *SWAPS, "permute"):
        return None
    got = unit_axis(mod, fn, inner, at, env, depth + 1)
    if method == "contiguous" and not node.args and not node.keywords:
        return Unit(-1).at(got.rank if got is not None else None)
    if got is None:
        return None
    bound = _env_at(mod, fn, at, env)
    args = [_axis_int(a, bound) for a in node.args]
    if method == "t":
        return _swapped(got.at(2), 0, 1) if got.rank in (None, 2) else None
    if method in SWAPS and len(args) == 2:
        return _swapped(got, args[0], args[1])
    if method == "movedim" and len(args) == 2:
        return _moved(got, args[0], args[1])
    if method == "permute":
        if len(node.args) == 1 and isinstance(node.args[0], (ast.Tuple, ast.List)):
            args = [_axis_int(a, bound) for a in node.args[0].elts]
        if not args or any(d is None for d in args):
            return None
        rank = len(args)
        dims = [d % rank for d in args]  # type: ignore[operator]
        axis = got.at(rank).axis
        return Unit(dims.index(axis), rank) if axis in dims else None
    return None


def _swapped(unit: Unit, i: int | None, j: int | None) -> Unit | None:
    """`unit` after its tensor's axes i and j trade places (None where the axes cannot be
    compared: signs differ and the rank is unknown)."""
    if i is None or j is None:
        return None
    if unit.rank is not None:
        i, j = i % unit.rank, j % unit.rank
    elif len({unit.axis < 0, i < 0, j < 0}) != 1:
        return None
    axis = j if unit.axis == i else i if unit.axis == j else unit.axis
    return Unit(axis, unit.rank)


def _moved(unit: Unit, src: int | None, dst: int | None) -> Unit | None:
    """`unit` after `movedim(src, dst)`: axis src goes to dst, the others keep their order."""
    if src is None or dst is None or unit.rank is None:
        return None
    order = [d for d in range(unit.rank) if d != src % unit.rank]
    order.insert(dst % unit.rank, src % unit.rank)
    return Unit(order.index(unit.axis), unit.rank)


def _axis_int(node: ast.AST, env: dict[str, int]) -> int | None:
    """An axis literal: `1`, `-1`, a name bound in `env`, `k % x.dim()` (the same axis)."""
    got = literal_int(node)
    if got is not None:
        return got
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _axis_int(node.operand, env)
        return -inner if inner is not None else None
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_rank(node.right):
        return _axis_int(node.left, env)
    return None


def _is_rank(node: ast.AST) -> bool:
    """`x.dim()`, `x.ndim`, `len(x.shape)`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in ("dim", "ndimension") and not node.args:
        return True
    if isinstance(node, ast.Attribute) and node.attr == "ndim":
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" \
        and len(node.args) == 1 and isinstance(node.args[0], ast.Attribute) and node.args[0].attr == "shape"


def _env_at(mod: PyModule, fn: ast.FunctionDef, at: int, env: dict[str, int]) -> dict[str, int]:
    """`env` with the axis literals `fn` assigns before byte `at` (in source order; a name
    assigned a value that is not one is unbound)."""
    out = dict(env)
    for node in sorted((n for n in _own_nodes(fn) if isinstance(n, ast.Assign)), key=mod.start):
        if mod.end(node) > at:
            break
        for target in node.targets:
            pairs = list(zip(target.elts, node.value.elts)) if isinstance(target, ast.Tuple) \
                and isinstance(node.value, ast.Tuple) and len(target.elts) == len(node.value.elts) \
                else [(target, node.value)]
            values = [(t, _axis_int(v, out)) for t, v in pairs]
            for t, value in values:
                for name in (n.id for n in ast.walk(t) if isinstance(n, ast.Name)):
                    if value is None or not isinstance(t, ast.Name):
                        out.pop(name, None)
                    else:
                        out[name] = value
    return out


def _name_axis(mod: PyModule, fn: ast.FunctionDef, name: str, at: int, env: dict[str, int],
               depth: int) -> Unit | None:
    """The unit axis of `name` at byte `at`: a check of it before `at`, else its last
    assignment there (straight-line code of `fn` only)."""
    bound = _env_at(mod, fn, at, env)
    last = None
    for stmt in fn.body:
        if mod.end(stmt) > at:
            if mod.start(stmt) <= at and any(_assigns(s, name) and mod.end(s) <= at for s in ast.walk(stmt)
                                            if isinstance(s, ast.stmt)):
                last = None  # bound in the branch or loop the read stands in
            break
        checked = _checked_axis(stmt, name, bound)
        if checked is not None:
            last = ("check", checked)
        elif _assigns(stmt, name):
            last = ("assign", stmt) if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                and isinstance(stmt.targets[0], ast.Name) else None
        elif any(_assigns(s, name) for s in ast.walk(stmt) if isinstance(s, ast.stmt) and s is not stmt):
            last = None  # bound inside a branch or a loop: not read
    if last is None:
        return None
    if last[0] == "check":
        return Unit(last[1])  # type: ignore[arg-type]
    stmt = last[1]
    return unit_axis(mod, fn, stmt.value, mod.start(stmt), env, depth + 1)  # type: ignore[union-attr]


def _assigns(stmt: ast.stmt, name: str) -> bool:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else \
        [stmt.target] if isinstance(stmt, (ast.AugAssign, ast.AnnAssign, ast.For)) else []
    return any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t))


def _stride_test(test: ast.AST, name: str, env: dict[str, int]) -> tuple[int, bool] | None:
    """(i, whether it says stride one) of `name.stride(i) == 1` / `!= 1`."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
            and literal_int(test.comparators[0]) == 1):
        return None
    got = test.left
    if not (isinstance(got, ast.Call) and isinstance(got.func, ast.Attribute) and got.func.attr == "stride"
            and isinstance(got.func.value, ast.Name) and got.func.value.id == name and len(got.args) == 1):
        return None
    axis = _axis_int(got.args[0], env)
    return (axis, isinstance(test.ops[0], ast.Eq)) if axis is not None else None


def _checked_axis(stmt: ast.stmt, name: str, env: dict[str, int]) -> int | None:
    """i where `stmt` is `assert name.stride(i) == 1` or `if name.stride(i) != 1: raise ...`."""
    if isinstance(stmt, ast.Assert):
        got = _stride_test(stmt.test, name, env)
        return got[0] if got is not None and got[1] else None
    if isinstance(stmt, ast.If) and not stmt.orelse and stmt.body \
            and all(isinstance(s, ast.Raise) for s in stmt.body):
        got = _stride_test(stmt.test, name, env)
        return got[0] if got is not None and not got[1] else None
    return None


def _returned_axis(mod: PyModule, fn: ast.FunctionDef, call: ast.Call, caller_env: dict[str, int],
                   depth: int) -> Unit | None:
    """The unit axis every return of `fn` establishes, its parameters bound to the call's
    axis literals; None where a return says nothing or two disagree."""
    params = [a.arg for a in fn.args.args]
    env: dict[str, int] = {}
    for param, arg in zip(params, call.args):
        value = _axis_int(arg, caller_env)
        if value is not None:
            env[param] = value
    for kw in call.keywords:
        value = _axis_int(kw.value, caller_env) if kw.arg in params else None
        if value is not None:
            env[kw.arg] = value  # type: ignore[index]
    returns = [r for r in _own_nodes(fn) if isinstance(r, ast.Return)]
    units = [_return_axis(mod, fn, r, env, depth) for r in returns]
    known = [u for u in units if u is not None]
    if not known or len(known) < len(units) or len({u.axis for u in known}) != 1:
        return None
    ranks = {u.rank for u in known}
    return Unit(known[0].axis, ranks.pop() if len(ranks) == 1 else None)


def _own_nodes(fn: ast.FunctionDef) -> list[ast.AST]:
    """The nodes of `fn` outside the functions and lambdas it defines."""
    out, todo = [], list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _return_axis(mod: PyModule, fn: ast.FunctionDef, ret: ast.Return, env: dict[str, int],
                 depth: int) -> Unit | None:
    """The unit axis of one return's value: a check the branch it stands in makes of it
    (`if v.stride(i) == 1: return v`, or a check before it in its block), else its value's."""
    if ret.value is None:
        return None
    bound = _env_at(mod, fn, mod.start(ret), env)
    if isinstance(ret.value, ast.Name):
        name, node, parent = ret.value.id, ret, mod.parents.get(ret)
        while parent is not None and parent is not fn:
            block = next((getattr(parent, f) for f in ("body", "orelse")
                          if node in getattr(parent, f, [])), [])
            checked = _last_check(block[:block.index(node)] if node in block else [], name, bound)
            if checked is not None:
                return Unit(checked)
            if isinstance(parent, ast.If) and node in parent.body:
                got = _stride_test(parent.test, name, bound)
                if got is not None and got[1]:
                    return Unit(got[0])
            node, parent = parent, mod.parents.get(parent)
        checked = _last_check(fn.body[:fn.body.index(node)] if node in fn.body else [], name, bound)
        if checked is not None:
            return Unit(checked)
    return unit_axis(mod, fn, ret.value, mod.start(ret), env, depth + 1)


def _last_check(block: list[ast.stmt], name: str, env: dict[str, int]) -> int | None:
    """The axis the last check of `name` among `block`'s statements says is contiguous, where
    no statement after it binds `name` again."""
    for stmt in reversed(block):
        checked = _checked_axis(stmt, name, env)
        if checked is not None:
            return checked
        if any(_assigns(s, name) for s in ast.walk(stmt) if isinstance(s, ast.stmt)):
            return None
    return None
