"""Triton's interpreter without the language patched again on every device-function call.

The interpreter swaps `triton.language`'s builtins for NumPy-backed ones around each launch
(`GridExecutor.__call__` calls `_patch_lang`, and undoes it when the grid has run), and again on
every call of a `@triton.jit` function inside the kernel (`InterpretedFunction.__call__`: the
kernel's helpers, and `tl.sum` and the rest of Triton's own standard library). Where the
language modules that function's globals hold are patched already, that second patch sets the
same attributes once more after walking the modules' members: about a millisecond per call,
paid once per iteration of every program where a kernel calls a helper in a loop (a quarter of
the gdn expert's interpreted time). `install` makes such a call skip it while a grid runs (its
own patch applied): only where every builtin of each of those modules (`triton.language` with
its `math`, `triton.language.core`) is swapped already, by the grid's patch or by an earlier
call's (which the interpreter never undoes). Every other call patches as before, and each
grid's patch is undone as before.

Preconditions: the interpreter's `_patch_lang(fn) -> _LangPatchScope` and `GridExecutor`
(Triton 3.x); `install` changes nothing and returns False where they are not found. Kernels run
on one thread at a time (as the interpreter's own patching assumes).
"""
from __future__ import annotations

from typing import Any

# One entry per grid running now, innermost last: [its kernel function, whether its own patch
# has been applied].
_GRIDS: list[list[Any]] = []
_INSTALLED = "_klineage_patch_once"


def install() -> bool:
    """Skip the helpers' repeated patching in this process from now on; whether it is in
    place (True also when it already was)."""
    try:
        import triton.language as tl  # noqa: PLC0415
        from triton.runtime import interpreter as interp  # noqa: PLC0415
    except ImportError:
        return False
    if getattr(interp, _INSTALLED, False):
        return True
    patch = getattr(interp, "_patch_lang", None)
    grid_class = getattr(interp, "GridExecutor", None)
    empty_scope = getattr(interp, "_LangPatchScope", None)
    if not (callable(patch) and isinstance(grid_class, type) and isinstance(empty_scope, type)
            and "__call__" in vars(grid_class)):
        return False
    is_builtin = tl.core.is_builtin

    def patched(module: Any) -> bool:
        return not any(is_builtin(v) for v in vars(module).values())

    def patched_already(fn: Any) -> bool:
        names = getattr(fn, "__globals__", None) or {}
        langs = [v for v in names.values() if v is tl or v is tl.core]
        return bool(langs) and all(patched(m) and (m is not tl or patched(tl.math)) for m in langs)

    grid_call = grid_class.__call__

    def call_grid(self: Any, *args: Any, **kwargs: Any) -> Any:
        _GRIDS.append([getattr(self, "fn", None), False])
        try:
            return grid_call(self, *args, **kwargs)
        finally:
            _GRIDS.pop()

    def patch_lang(fn: Any) -> Any:
        if _GRIDS:
            grid = _GRIDS[-1]
            if not grid[1] and fn is grid[0]:  # the grid's own patch, undone when it has run
                scope = patch(fn)
                grid[1] = True
                return scope
            if grid[1] and patched_already(fn):
                return empty_scope()
        return patch(fn)

    grid_class.__call__ = call_grid
    interp._patch_lang = patch_lang
    setattr(interp, _INSTALLED, True)
    return True
