"""One written form for the host expressions of a size, so that two ways of writing it compare
equal: `n` bound once by `n = x.numel()` is `x.numel()`; `M, N = x.shape` binds `x.shape[0]`
and `x.shape[1]`; `x.size(0)` and `len(x)` are `x.shape[0]`; the shape of a tensor made like
another (`torch.empty_like(x)`, `x.clone()`) is that tensor's, and of one made from sizes
(`torch.empty((N, M))`, `torch.zeros(N, M)`, `x.new_empty((N, M))`) those sizes'. Names are
followed through the functions around the expression, innermost first, where bound exactly
once, and a parameter of a host function called once by name to the argument that call gives
it; anything else is its own text. Used to tell which size a host block count divides
(`roles._tiles_size`) and whether the host divides a tile's size anywhere else
(`roles._divides_elsewhere`)."""

from __future__ import annotations

import ast
import copy

from passes.triton._py import PyModule, callee, literal_int

# Calls that make a tensor of another's shape: `torch.empty_like(x, ...)`, `x.clone()`.
_LIKE = frozenset({"empty_like", "zeros_like", "ones_like", "full_like", "rand_like",
                   "randn_like"})
_SAME_SHAPE_METHODS = frozenset({"clone", "contiguous", "detach", "float", "half", "to"})
# Calls that make a tensor from sizes: `torch.empty((N, M))`, `torch.empty(N, M)`,
# `x.new_zeros((N, M))`.
_FROM_SIZES = frozenset({"empty", "zeros", "ones", "full", "rand", "randn", "new_empty",
                         "new_zeros", "new_ones", "new_full"})
_DEPTH = 8


def host_form(mod: PyModule, node: ast.AST) -> str:
    """`node`'s host size written in the one form (module docstring)."""
    return ast.unparse(_Former(mod, node).visit(copy.deepcopy(node)))


class _Former(ast.NodeTransformer):
    def __init__(self, mod: PyModule, at: ast.AST, depth: int = 0) -> None:
        self.mod, self.at, self.depth = mod, at, depth
        scopes: list[ast.AST] = []
        node: ast.AST | None = at
        while (node := mod.enclosing(node, (ast.FunctionDef, ast.Lambda))) is not None:
            scopes.append(node)
        self.scopes = scopes

    def _bound(self, name: str) -> tuple[ast.AST, int | None] | None:
        """(value, element index or None) of `name`'s one binding in the innermost function
        around that binds it: `name = value`, or the element `i` of `a, name = value`."""
        for scope in self.scopes:
            stores = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name
                      and isinstance(n.ctx, ast.Store)]
            params = [a.arg for a in (*scope.args.posonlyargs, *scope.args.args,
                                      *scope.args.kwonlyargs)]
            if name in params:
                return self._argument(scope, name, params)
            if not stores:
                continue
            if len(stores) != 1:
                return None
            statement = self.mod.parents.get(stores[0])
            if isinstance(statement, (ast.Tuple, ast.List)):
                statement = self.mod.parents.get(statement)
            if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
                return None
            target = statement.targets[0]
            if target is stores[0]:
                return statement.value, None
            if isinstance(target, (ast.Tuple, ast.List)) and stores[0] in target.elts:
                return statement.value, target.elts.index(stores[0])
            return None
        return None

    def _argument(self, fn: ast.AST, name: str, params: list[str]) -> tuple[ast.AST, None] | None:
        """The argument the one call of the host function `fn` in the module gives its
        parameter `name` (`_parts(n, x.device)` gives `_parts(count, device)` its count);
        None where `fn` is called more or fewer times, or not by name."""
        if not isinstance(fn, ast.FunctionDef):
            return None
        calls = [c for c in ast.walk(self.mod.tree) if isinstance(c, ast.Call)
                 and isinstance(c.func, ast.Name) and c.func.id == fn.name]
        named = [n for n in ast.walk(self.mod.tree) if isinstance(n, ast.Name) and n.id == fn.name]
        if len(calls) != 1 or len(named) != 1 or any(isinstance(a, ast.Starred) for a in calls[0].args):
            return None
        position = params.index(name)
        if position < len(calls[0].args):
            return calls[0].args[position], None
        given = next((k.value for k in calls[0].keywords if k.arg == name), None)
        return (given, None) if given is not None else None

    def _form(self, node: ast.AST, at: ast.AST) -> ast.AST:
        """`node` in the one form, its names read where `at` (a node of the module) is."""
        if self.depth >= _DEPTH:
            return node
        return _Former(self.mod, at, self.depth + 1).visit(copy.deepcopy(node))

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if not isinstance(node.ctx, ast.Load) or self.depth >= _DEPTH:
            return node
        bound = self._bound(node.id)
        if bound is None:
            return node
        value, index = bound
        if index is None:
            return self._form(value, value)
        if isinstance(value, (ast.Tuple, ast.List)) and index < len(value.elts):
            return self._form(value.elts[index], value)
        shape = _shape_of(value)
        if shape is not None:  # `M, N = x.shape`
            return self._form(_shape_read(shape, index), value)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        name = callee(node)
        if name == "len" and len(node.args) == 1:  # len(x) -> x.shape[0]
            return self.visit(_shape_read(node.args[0], 0))
        if (isinstance(node.func, ast.Attribute) and node.func.attr == "size"
                and len(node.args) == 1 and literal_int(node.args[0]) is not None):
            return self.visit(_shape_read(node.func.value, literal_int(node.args[0])))
        return self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        index = literal_int(node.slice)
        tensor = _shape_of(node.value)
        if tensor is None or index is None or index < 0:
            return self.generic_visit(node)
        if isinstance(tensor, ast.Name) and self.depth < _DEPTH:
            bound = self._bound(tensor.id)
            if bound is not None and bound[1] is None:
                made = _made_shape(bound[0])
                if isinstance(made, list) and index < len(made):
                    return self._form(made[index], bound[0])
                if isinstance(made, ast.AST):  # a tensor of another's shape
                    return self._form(_shape_read(made, index), bound[0])
        return node


def _shape_of(node: ast.AST) -> ast.AST | None:
    """T of `T.shape` or `T.size()`."""
    if isinstance(node, ast.Attribute) and node.attr == "shape":
        return node.value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "size" and not node.args):
        return node.func.value
    return None


def _shape_read(tensor: ast.AST, index: int) -> ast.Subscript:
    """`tensor.shape[index]`."""
    return ast.Subscript(ast.Attribute(copy.deepcopy(tensor), "shape", ast.Load()),
                         ast.Constant(index), ast.Load())


def _made_shape(value: ast.AST) -> list[ast.AST] | ast.AST | None:
    """The sizes a tensor is made from (`torch.empty((N, M))`, `torch.zeros(N, M)`,
    `x.new_empty((N, M))`: [N, M]), or the tensor whose shape it takes (`torch.empty_like(x)`,
    `x.clone()`: x); None for anything else."""
    if not isinstance(value, ast.Call):
        return None
    tail = callee(value).split(".")[-1]
    if tail in _LIKE and value.args:
        return value.args[0]
    if tail in _SAME_SHAPE_METHODS and isinstance(value.func, ast.Attribute):
        return value.func.value
    if tail not in _FROM_SIZES or not value.args:
        return None
    if tail in ("full", "new_full"):
        return _sizes(value.args[:1])
    return _sizes(value.args)


def _sizes(args: list[ast.expr]) -> list[ast.AST] | None:
    """`((N, M),)` or `(N, M)` as [N, M]; None where a size is starred."""
    if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
        args = list(args[0].elts)
    return None if any(isinstance(a, ast.Starred) for a in args) else list(args)
