"""What Triton's JIT refuses to launch on a GPU, the interpret tier refuses to run.

Before a kernel's first launch the JIT hashes its source and all it references
(`triton.runtime.jit.DependenciesFinder`, through `JITFunction.cache_key`) and raises on a
reference to a Python function that is not a Triton one: a plain function, a NumPy or torch
function, named as a global or reached through a module object. The compiler would call such
a function once, at compile time, on IR values; Triton's interpreter calls it in every program
on the blocks' values. A kernel that computes through one (NumPy on its loads) passes on the
CPU and does not launch on a GPU; one that tells the two apart computes the operator only when
interpreted. `refusal` runs Triton's own finder over an interpreted kernel and the
`@triton.jit` functions it reaches (which the interpreter keeps as `InterpretedFunction`, not
the `JITCallable` the finder knows).

A `triton.constexpr_function` is Triton's way of calling Python from a kernel: at compile time,
on constants, for a constant. Interpreted, it is called on whatever the kernel passes; its
result must be a constant still (`constant_result`): a number, a string, a dtype, None, or a
tuple or list of those, not a block of values. Only where a kernel calls it: the host code of a
launch (a grid `lambda META: (triton.cdiv(META["n"], META["BLOCK"]),)`) gets the interpreter's
tensors for the kernel's arguments in META, where a GPU launch gives it ints, and may call
`triton.cdiv` on them (`in_kernel`: a frame of a kernel the launch hooks vetted is below the
call).

Imports nothing from the gate: the launch hooks (`gate.guards`) call it on a kernel's first
launch in the interpreter.
"""
from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any


class CompileRefusal(Exception):
    """A kernel the GPU's JIT would not launch or compile, refused before the interpreter ran
    it (`gate.channel.classify` reads it as a compile error)."""

    compile_refusal = True


def _interpreted_class() -> type | None:
    try:
        from triton.runtime.interpreter import InterpretedFunction  # noqa: PLC0415
    except ImportError:
        return None
    return InterpretedFunction


_KERNEL_FRAMES: set[tuple[str, str]] = set()
"""(file, function name) of every interpreted kernel `refusal` was asked about: the interpreter
runs a kernel as a copy of its function compiled again (another code object, the same file and
name), so its frames are told by these."""


def code_on_stack(frame: FrameType | None, match: Callable[[CodeType], bool],
                  depth: int | None = None) -> bool:
    """Whether `frame` or one of its callers (theirs, and so on: `depth` frames in all at the
    most, every one where None) runs code that `match` accepts."""
    while frame is not None and (depth is None or depth > 0):
        if match(frame.f_code):
            return True
        frame = frame.f_back
        if depth is not None:
            depth -= 1
    return False


def in_kernel(depth: int = 64) -> bool:
    """Whether a frame of a kernel `refusal` was asked about is among the `depth` frames below
    the caller's (the interpreter is running that kernel's body, or a function it called).
    Unlike `gate.guards.OpTrace._inside_reference`, the same walk, it stops at `depth` frames
    and takes each frame's file name as its code names it: the kernel's body is a few frames
    below a constexpr function's call, and the interpreter compiles it again under the very
    file name noted from the kernel's code object."""
    return code_on_stack(sys._getframe(1),
                         lambda code: (code.co_filename, code.co_name) in _KERNEL_FRAMES, depth)


VETTED_CODES: set[Any] = set()
"""The code objects (nested ones included) of every `@triton.jit` function `refusal` found no
reason to refuse, as it read them: a kernel's body and the helpers it reaches, which the
interpreter runs (a `tl.reduce` combine function as it is, not rewritten)."""


def code_objects(code: Any) -> list[Any]:
    """`code` and the code objects nested in it (its lambdas, comprehensions, functions)."""
    found = [code]
    for const in getattr(code, "co_consts", ()):
        if type(const) is type(code):
            found += code_objects(const)
    return found


def refusal(kernel: Any) -> str | None:
    """Why Triton's JIT would refuse `kernel` (an interpreted `@triton.jit` function) or a
    `@triton.jit` function it references, in Triton's words; None where it would not, or where
    `kernel` is not interpreted or this Triton has no such finder. Notes the kernel's frames
    for `in_kernel`."""
    interpreted = _interpreted_class()
    code = getattr(getattr(kernel, "fn", None), "__code__", None)
    if interpreted is not None and isinstance(kernel, interpreted) and code is not None:
        _KERNEL_FRAMES.add((code.co_filename, code.co_name))
    try:
        from triton.runtime import jit  # noqa: PLC0415
    except ImportError:
        return None
    finder = getattr(jit, "DependenciesFinder", None)
    if interpreted is None or finder is None or not isinstance(kernel, interpreted):
        return None
    seen: set[int] = set()

    class Finder(finder):  # type: ignore[misc, valid-type]
        def record_reference(self, val: Any, var_dict: Any = None, name: Any = None) -> None:
            if isinstance(val, interpreted):
                visit(val.fn)  # a @triton.jit helper: what Triton hashes, and checks, in turn
                return
            super().record_reference(val, var_dict, name)

    visited: list[Any] = []

    def visit(fn: Any) -> None:
        if id(fn) in seen:
            return
        seen.add(id(fn))
        visited.append(fn.__code__)
        src = textwrap.dedent(inspect.getsource(fn))
        start = re.search(r"^def\s+\w+\s*\(", src, re.MULTILINE)
        src = src[start.start():] if start else src
        nonlocals = inspect.getclosurevars(fn).nonlocals
        Finder(name=getattr(fn, "__qualname__", "kernel"), globals=fn.__globals__,
               nonlocals=nonlocals, src=src).visit(ast.parse(src))

    try:
        visit(kernel.fn)
    except (RuntimeError, TypeError) as exc:  # the finder's refusals
        return f"{type(exc).__name__}: {exc}"
    except (OSError, SyntaxError):  # no source to read: the interpreter cannot run it either
        return None
    for code in visited:
        VETTED_CODES.update(code_objects(code))
    return None


def constant_result(value: Any) -> bool:
    """Whether `value` is a compile-time constant (what a constexpr function may give a
    kernel)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (tuple, list)):
        return all(constant_result(v) for v in value)
    try:
        import triton.language as tl  # noqa: PLC0415
    except ImportError:
        return False
    if isinstance(value, tl.constexpr):
        return constant_result(value.value)
    return isinstance(value, tl.dtype)


def _memo_key(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The key a constexpr function's result is kept under: the function, the code it holds
    and its arguments, where all are constants (`constant_result`, the `_semantic` keyword
    left out); None otherwise (called, not kept)."""
    given = [*args, *(v for k, v in sorted(kwargs.items()) if k != "_semantic")]
    if not all(constant_result(v) for v in given):
        return None
    inner = getattr(fn, "fn", None)
    try:
        key = (id(fn), id(getattr(inner, "__code__", None)), repr(given))
        hash(key)
    except Exception:  # noqa: BLE001 — a constant whose repr fails: not kept
        return None
    return key


def install_constexpr_check(on_refusal: Callable[[str], None] | None = None) -> bool:
    """From now on in this process, a `triton.constexpr_function` called by an interpreted
    kernel (`in_kernel`) whose result is not a constant raises `CompileRefusal`, after telling `on_refusal` why
    (the caller's record holds where candidate code catches the exception); whether it is in
    place (where it already was, `on_refusal` is the first installer's)."""
    try:
        from triton import knobs  # noqa: PLC0415
        from triton.runtime.jit import ConstexprFunction  # noqa: PLC0415
    except ImportError:
        return False
    if getattr(ConstexprFunction, "_klineage_constant_check", False):
        return True
    original = ConstexprFunction.__call__
    kept: dict[Any, Any] = {}

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        key = _memo_key(self, args, kwargs) if knobs.runtime.interpret and in_kernel() else None
        if key is not None and key in kept:
            return kept[key]  # as compiled: called once per specialization (`gate.windowwatch`)
        result = original(self, *args, **kwargs)
        if key is not None and constant_result(result):
            kept[key] = result
        if knobs.runtime.interpret and not constant_result(result) and in_kernel():
            reason = (f"constexpr function {getattr(self, '__name__', '?')} returned a "
                      f"{type(result).__name__}, not a constant: a constexpr function runs at "
                      f"compile time on constants (the interpreter calls it on the kernel's values)")
            if on_refusal is not None:
                on_refusal(reason)
            raise CompileRefusal(reason)
        return result

    ConstexprFunction.__call__ = call
    ConstexprFunction._klineage_constant_check = True
    return True
