"""How many elements the blocks of a Triton kernel hold under a launch configuration.

Triton refuses to compile a block of more than `MAX_ELEMS` (2**20) elements
(`TRITON_MAX_TENSOR_NUMEL`): a kernel that broadcasts three tiles into one block
(`a[:, :, None] * b[None, :, :]`, BLOCK_M x HEAD_DIM x BLOCK_N) reaches it long before a
2-D kernel does. `block_sizes` reads every block-valued expression of a kernel, and of the jit
functions it calls (followed with each call's argument shapes and integer values), under one
table of constexpr values (`passes.triton.compute._shape`). `compiles_like_written` judges a
configuration against the limit: a block whose dims are all known must fit it; a block with a
dim the source does not fix (a constexpr the host computes, such as a head dim read from an
input's shape) may grow no larger, over its known dims, than under the kernel's own
configurations, which compile: the unknown dim is at most the limit over that size.
"""
from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping

from passes.triton._py import PyModule, callee
from passes.triton.compute import (
    MAX_NUMEL,
    Shape,
    _constexpr_bindings,
    _int_value,
    _shape,
    _statements,
    bind_shapes,
)

MAX_ELEMS = MAX_NUMEL
# The elements a block's dims that the source does not fix are taken to span at most: a head dim
# or a row width the host reads from an input (a head dim is at most 256 where the common
# attention kernels accept it). Their product is also at most what the kernel's own
# configurations leave them (`compiles_like_written`).
UNKNOWN_DIMS = 256
# How deep calls into jit functions are followed.
_CALL_DEPTH = 4
_COMPOUND = (ast.For, ast.While, ast.If, ast.With)


def block_sizes(mod: PyModule, kernel: ast.FunctionDef, values: Mapping[str, int],
                functions: Mapping[str, ast.FunctionDef] | None = None) -> dict[int, tuple[int, bool]]:
    """`id(expression)` -> (the product of its block's known dims, whether a dim is unknown) for
    every block-valued expression of `kernel` and the jit `functions` it calls, under the
    constexpr `values`; the largest over the calls of a function."""
    if functions is None:
        functions = {f.name: f for f in mod.functions()}
    out: dict[int, tuple[int, bool]] = {}
    known = dict(values)
    env: dict[str, Shape] = {a.arg: () for a in kernel.args.args if a.arg not in known}
    _walk(kernel, env, known, functions, out, _CALL_DEPTH)
    return out


def _walk(fn: ast.FunctionDef, env: dict[str, Shape], values: dict[str, int],
          functions: Mapping[str, ast.FunctionDef], out: dict[int, tuple[int, bool]],
          depth: int) -> None:
    for stmt in _statements(fn.body):
        heads = ([stmt.iter] if isinstance(stmt, ast.For) else [stmt.test]
                 if isinstance(stmt, (ast.While, ast.If)) else [] if isinstance(stmt, _COMPOUND)
                 else [stmt])
        for head in heads:
            for node in ast.walk(head):
                if not isinstance(node, ast.expr):
                    continue
                shape = _shape(node, env, values)
                if shape:
                    elems = math.prod(d for d in shape if d is not None)
                    before = out.get(id(node), (0, False))
                    out[id(node)] = (max(elems, before[0]), before[1] or None in shape)
                if (isinstance(node, ast.Call) and depth > 0 and callee(node) in functions
                        and functions[callee(node)] is not fn):
                    _call(node, functions[callee(node)], env, values, functions, out, depth)
        bind_shapes(stmt, env, values)


def _call(call: ast.Call, fn: ast.FunctionDef, env: dict[str, Shape], values: dict[str, int],
          functions: Mapping[str, ast.FunctionDef], out: dict[int, tuple[int, bool]],
          depth: int) -> None:
    """Walk `fn` as `call` calls it: integer arguments as values, block arguments as shapes."""
    params = [a.arg for a in fn.args.args]
    bound = dict(zip(params, call.args))
    bound.update({k.arg: k.value for k in call.keywords if k.arg in params})
    inner_values: dict[str, int] = {}
    inner_env: dict[str, Shape] = {}
    for name in params:
        arg = bound.get(name)
        if arg is None:
            continue
        value = _int_value(arg, values)
        if value is not None:
            inner_values[name] = value
            continue
        shape = _shape(arg, env, values)
        if shape is not None:
            inner_env[name] = shape
    _walk(fn, inner_env, inner_values, functions, out, depth - 1)


def compiles_like_written(mod: PyModule, kernel: ast.FunctionDef) -> Callable[[Mapping[str, int]], bool]:
    """A judge of configurations (parameter name -> value, launch keys allowed) of `kernel`:
    whether every block it builds stays within `MAX_ELEMS` (see the module docstring). The
    values a configuration leaves out are those of the kernel's first own configuration."""
    functions = {f.name: f for f in mod.functions()}
    tables = _constexpr_bindings(mod, kernel, {})
    written: dict[int, int] = {}
    for table in tables:
        for key, (elems, _) in block_sizes(mod, kernel, table, functions).items():
            written[key] = max(written.get(key, 0), elems)

    def fits(config: Mapping[str, int]) -> bool:
        values = {**tables[0], **{k: v for k, v in config.items() if k not in ("num_warps", "num_stages")}}
        for key, (elems, unknown) in block_sizes(mod, kernel, values, functions).items():
            if unknown:  # the unknown dims at what the written configurations leave them, capped
                elems *= min(UNKNOWN_DIMS, MAX_ELEMS // max(written.get(key, 1), 1))
            if elems > MAX_ELEMS:
                return False
        return True

    return fits
