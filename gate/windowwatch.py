"""No code of the candidate's but its kernels runs inside a sealed launch on the CPU tiers.

The sealed call's inputs hold their real values only while one of the candidate's launches
runs (`gate.guards.Seal`); on the CPU tiers that launch runs in a forked child
(`Seal.isolated`), whose tensors come back. The interpreter runs a kernel's body there as
Python, and with it whatever else of the candidate's the launch reaches: a grid given as a
callable (or as objects whose `__index__` the launch reads), a kernel's pre-run hooks, a
`triton.constexpr_function` (host Python, with module globals), a method the candidate bound
onto the interpreter's objects, a hook `os.register_at_fork` runs in the child, a rewritten
body put into the interpreter's cache in place of the vetted one. Any of them reads the real
inputs there and writes the answer into a tensor the child brings back.

So, in a sealed launch's child, a profile function (set by a fork hook the gate registers
before candidate code loads, so that it runs before any hook of the candidate's) ends the
child at the first call of a function of the candidate's files that is not a kernel body the
gate had the interpreter rewrite (`allow`) or a `@triton.jit` function as Triton's
dependency finder read it (`interpdeps.VETTED_CODES`: a `tl.reduce` combine function runs as
written): the parent reads that exit (`BREACH_EXIT`) as host code reading the inputs
(`Seal.breach`). For the launches that stay honest:

- a kernel's pre-run hooks and a callable grid are called by the gate before the window
  opens, in the interpreter's order (hooks first), on the arguments as the interpreter hands
  them (`plain_grid`); every grid entry is read as an integer there, and the launch itself
  runs with no hooks (`hooks_off`): a hook that keeps the launch's options for its grid (the
  persistent-grid rewrite's) sees what it would inside, the inputs still sealed;
- a kernel body (and each `@triton.jit` function it calls) runs as the gate rewrote it from
  the code its function holds at that call (`install_rewrites`): the interpreter's own cache,
  which any code can write, is not read, and a code object swapped under a kernel after its
  first launch is checked by Triton's dependency finder again (`gate.interpdeps`);
- a constexpr function's result is kept by its arguments (`gate.interpdeps`), as the compiler
  calls it once per specialization: the sealed call, on the shapes of a correctness call,
  calls none.

The profile function is called at every call, return and C call in the child (the
interpreter makes millions in a launch), so a call of a file already judged not the
candidate's costs it one read of the frame's code (`frame.f_code` raises an audit event, which
the gate's audit hook passes over first) and one look-up of the code's file name: the code
object itself is not hashed (a hash of its constants) on that path.

A fork hook that is a callable of C (`functools.partial` over a NumPy ufunc) runs without a
Python frame: `Seal.isolated` compares what the launch brings back with its bytes before the
fork, in the child before the launch. What it cannot see: such a hook that writes elsewhere
(memory the kernel then reads through a raw address).

Imports `gate.interpdeps` alone of the gate's: `gate.guards` imports it (its fork hook is
registered then, before candidate code loads) and names the candidate's folders
(`candidate_dirs`, as the audit hook is armed).
"""
from __future__ import annotations

import contextlib
import operator
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import CodeType
from typing import Any

from gate.interpdeps import VETTED_CODES, code_objects

BREACH_EXIT = 86
"""The exit status of a sealed launch's child that ran candidate code beside its kernel."""

_KERNEL_CODES: set[CodeType] = set()
_ARMED: list[Callable[[str], None]] = []  # set just before a sealed launch forks: how to end it
_FILES: dict[str, bool] = {}  # file name -> under a candidate folder (cleared, never rebound)
_DIRS: list[str] = []


def allow(fn: Any) -> None:
    """`fn` (a kernel body as the gate had it rewritten) and the code nested in it may run
    in a sealed launch's child."""
    code = getattr(fn, "__code__", None)
    if isinstance(code, CodeType):
        _KERNEL_CODES.update(code_objects(code))


def candidate_dirs(dirs: tuple[str, ...]) -> None:
    """The folders candidate code loads from (resolved), as the audit hook is armed with them."""
    _DIRS[:] = dirs
    _FILES.clear()


def _candidate_file(filename: str) -> bool:
    found = _FILES.get(filename)
    if found is None:
        resolved = str(Path(filename).resolve())
        found = _FILES[filename] = any(resolved.startswith(d + os.sep) for d in _DIRS)
    return found


def _judge(frame: Any, code: CodeType) -> None:
    """Ends the child where `code` (about to run in `frame`) is the candidate's other than a
    kernel's."""
    if _ARMED and _candidate_file(code.co_filename) and code not in _KERNEL_CODES and \
            code not in VETTED_CODES:
        _ARMED[0](f"{code.co_name} ({Path(code.co_filename).name}:{frame.f_lineno}), code of the "
                  f"candidate's other than its kernels, ran inside a sealed launch (its inputs' "
                  f"real values in memory)")


def _profile(frame: Any, event: str, arg: Any, _files: dict[str, bool] = _FILES,
             _judge: Callable[[Any, CodeType], None] = _judge) -> None:
    if event == "call":
        code = frame.f_code
        if _files.get(code.co_filename) is not False:
            _judge(frame, code)


def _after_fork() -> None:
    if _ARMED:
        sys.setprofile(_profile)  # the audit hook lets this function alone set it (`own_call`)


def own_call(frame: Any) -> bool:
    """Whether `frame` (the caller of `sys.setprofile`) is the gate's fork hook."""
    return frame is not None and frame.f_code is _after_fork.__code__ and \
        frame.f_globals is globals()


os.register_at_fork(after_in_child=_after_fork)


def arm(end: Callable[[str], None]) -> None:
    """Just before a sealed launch forks: in the child, `end(reason)` is called at the first
    call of candidate code that is not a kernel body (it must not return: it ends the child).
    The parent calls `disarm` once the fork is done."""
    _ARMED[:] = [end]


def disarm() -> None:
    _ARMED.clear()


def install_rewrites(owns: Callable[[Any], bool], vet: Callable[[Any], None]) -> bool:
    """From now on, an interpreted `@triton.jit` function of the candidate's (`owns` its
    function) runs as the gate had it rewritten from the code its function holds at that
    call: rewritten again, and `vet`ted (Triton's dependency finder), whenever that code is
    not the one last rewritten; the interpreter's shared cache (`rewritten_fn`) is written,
    never read. False where this Triton has no interpreter."""
    try:
        import triton.runtime.interpreter as interp  # noqa: PLC0415
    except ImportError:
        return False
    cls = interp.InterpretedFunction
    if getattr(cls, "_klineage_rewrites", False):
        return True
    original = cls.rewrite
    rewriter = interp.FunctionRewriter
    made: dict[int, tuple[Any, CodeType, Any]] = {}

    def rewrite(self: Any) -> Any:
        fn = self.fn
        if not owns(fn):
            return original(self)
        code = fn.__code__
        kept = made.get(id(fn))
        if kept is None or kept[0] is not fn or kept[1] is not code:
            if kept is not None:
                vet(self)  # the code changed since the first launch's check
            body = rewriter(fn, **getattr(self, "kwargs", {})).rewrite_ast()
            allow(body)
            kept = made[id(fn)] = (fn, code, body)
        cls.rewritten_fn[fn] = kept[2]
        return kept[2]

    cls.rewrite = rewrite
    cls._klineage_rewrites = True
    return True


def plain_grid(jit_self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` with its grid as integers, read here (before a sealed launch's window opens),
    after the kernel's pre-run hooks ran here as the interpreter runs them first (on the
    arguments, keywords the kernel does not take left out; `hooks_off` keeps the launch from
    running them again): a callable grid called on the kernel's arguments as the interpreter
    hands them (its constexprs as given, the others as the interpreter's tensors), each entry
    read as an integer (`operator.index`), all under the interpreter's patch of the language
    (its tensors' operators), as the launch would read them."""
    import inspect  # noqa: PLC0415

    fn = jit_self.fn
    hooks = list(getattr(jit_self, "pre_run_hooks", None) or ())
    if hooks:
        spec = inspect.getfullargspec(fn)
        taken = {k: v for k, v in kwargs.items() if k in spec.args or k in spec.kwonlyargs}
        for hook in hooks:
            hook(*args, **taken)
    grid = kwargs.get("grid")
    if grid is None:
        return kwargs
    import triton.runtime.interpreter as interp  # noqa: PLC0415

    scope = interp._patch_lang(fn)
    try:
        if callable(grid):
            spec = inspect.getfullargspec(fn)
            given = {k: v for k, v in kwargs.items()
                     if k not in ("grid", "warmup") and (k in spec.args or k in spec.kwonlyargs)}
            constexprs = interp.GridExecutor(fn, jit_self.arg_names, grid).constexprs
            meta = inspect.getcallargs(fn, *args, **given)
            meta = {name: value if name in constexprs else interp._implicit_cvt(value)
                    for name, value in meta.items()}
            grid = grid(meta)
        if type(grid) is not tuple:
            grid = tuple(grid)
        grid = tuple(operator.index(g) for g in grid)
    finally:
        scope.restore()
    return {**kwargs, "grid": grid}


@contextlib.contextmanager
def hooks_off(jit_self: Any) -> Iterator[None]:
    """`jit_self` with no pre-run hooks while the launch runs (`plain_grid` ran them before
    the window opened); its own list put back after."""
    hooks = getattr(jit_self, "pre_run_hooks", None)
    if not hooks:
        yield
        return
    jit_self.pre_run_hooks = []
    try:
        yield
    finally:
        jit_self.pre_run_hooks = hooks
