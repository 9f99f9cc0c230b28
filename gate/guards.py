"""Anti-cheat instruments installed in the gate's worker process before candidate code loads.

Imported only inside a worker (it imports torch). What it provides:
- `Captured`: the torch functions the worker uses after the candidate is imported, taken
  before, so a candidate that rebinds `torch.Tensor.cpu` or `torch.equal` cannot change them;
- `TamperWatch`: identities of the functions a candidate could patch to fool a check or a timer
  (torch, numpy, time, builtins, triton's launch and bench paths, CUDA driver launch calls, the
  gate's own modules); `changed()` names the ones rebound since the snapshot (an entry torch's
  own `_disable_dynamo` wrapper was put around is put back instead);
- `LaunchMonitor`: hooks the Triton JIT launch path (`JITFunction.run`, the interpreter's
  `InterpretedFunction.run`), `cuda.bindings.driver.cuLaunchKernel[Ex]`, CuPy's `RawKernel` /
  `RawModule` and the functions of a `load_inline` extension to count launches of the
  candidate's own kernels, check their stream, and suppress them (knockout);
- `KernelLog`: the GPU kernels that actually ran during the candidate's calls (CUPTI activity
  through torch's Kineto profiler, one CUDA-only session per call), for
  `gate.foreign.attribute_kernels`;
- `OpTrace`: a torch dispatch mode that records every compute op the candidate runs (allocation,
  views and copies are allowed; a `torch.library.custom_op` operator is looked into: its Python
  implementation runs under the trace), notes calls made from inside the case's reference, and
  fills each tensor the candidate allocates with poison (NaN for floats);
- `Seal`: the sealed call, in which the float inputs hold poison except while the candidate's
  own kernels run (the launch hooks of `LaunchMonitor` open it around each launch; the op trace
  records the host copies of inputs that it replays then).
"""
from __future__ import annotations

import builtins
import contextlib
import gc
import os
import pickle
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import FunctionType, MethodType, ModuleType
from typing import Any

import torch
from torch import _compile
from torch import _ops as _torch_ops
from torch._library import custom_ops as _custom_ops
from torch._library import simple_registry as _simple_registry
from torch.utils import _pytree
from torch.utils._python_dispatch import TorchDispatchMode

from gate import windowwatch
from gate.hostbytes import HostBytes, odd_contents  # noqa: F401 — the worker's, through this module
from gate.interpdeps import code_on_stack


@dataclass(frozen=True, slots=True)
class Captured:
    """Functions the worker calls after candidate import, bound before it."""

    clone: Callable[..., Any]
    cpu: Callable[..., Any]
    contiguous: Callable[..., Any]
    view: Callable[..., Any]
    numpy: Callable[..., Any]
    fill_: Callable[..., Any]
    copy_: Callable[..., Any]
    equal: Callable[..., bool]
    untyped_storage: Callable[..., Any]
    storage_ptr: Callable[..., int]
    is_floating_point: Callable[..., bool]
    is_complex: Callable[..., bool]
    tensor_type: type
    frombuffer: Callable[..., Any]
    synchronize: Callable[[], None] | None
    current_stream: Callable[[], Any] | None
    perf_counter: Callable[[], float]

    @staticmethod
    def take() -> Captured:
        cuda = torch.cuda.is_available()
        return Captured(
            clone=torch.Tensor.clone, cpu=torch.Tensor.cpu, contiguous=torch.Tensor.contiguous,
            view=torch.Tensor.view, numpy=torch.Tensor.numpy, fill_=torch.Tensor.fill_,
            copy_=torch.Tensor.copy_, equal=torch.equal,
            untyped_storage=torch.Tensor.untyped_storage, storage_ptr=torch.UntypedStorage.data_ptr,
            is_floating_point=torch.Tensor.is_floating_point, is_complex=torch.Tensor.is_complex,
            tensor_type=torch.Tensor, frombuffer=torch.frombuffer,
            synchronize=torch.cuda.synchronize if cuda else None,
            current_stream=torch.cuda.current_stream if cuda else None,
            perf_counter=time.perf_counter,
        )


# ---------------------------------------------------------------------------------------------
# Tampering

# torch's `_disable_dynamo` wrapper (its code and module), taken before candidate code loads.
# In eager mode it calls the function it wraps, after importing torch._dynamo at its first call.
# torch puts it around each custom_op kernel, and torch._dynamo's import (which torch.library's
# triton_op brings) puts it around `torch.manual_seed`.
_LAZY_DYNAMO = _compile._disable_dynamo(lambda: None)
_LAZY_DYNAMO_CODE, _LAZY_DYNAMO_GLOBALS = _LAZY_DYNAMO.__code__, _LAZY_DYNAMO.__globals__


def lazy_dynamo_wrapped(value: Any) -> list[Any]:
    """The functions `value` reaches through torch's `_disable_dynamo` wrappers (torch's code
    and module globals), the one it calls first; empty where it is not such a wrapper; eight at
    most. The wrapper calls the dynamo-disabled form it reads from an attribute of the wrapped
    function (`__dynamo_disable`), which any code may set: a caller that must not run code of a
    candidate's calls the wrapped function itself."""
    chain: list[Any] = []
    while len(chain) < 8 and isinstance(value, FunctionType) and \
            value.__code__ is _LAZY_DYNAMO_CODE and value.__globals__ is _LAZY_DYNAMO_GLOBALS:
        cells = dict(zip(value.__code__.co_freevars, value.__closure__ or ()))
        try:
            value = cells["fn"].cell_contents
        except (KeyError, ValueError):
            break
        chain.append(value)
    return chain


# torch's tables of per-operator Python dispatch rules, bound before candidate code loads. torch
# hands an operator called under a dispatch mode (or on a tensor subclass) to the rule its table
# holds for the mode's class instead of to the mode's `__torch_dispatch__`, the mode off: the
# rules of `torch.library.register_torch_dispatch` and a custom op's `register_torch_dispatch`
# (found by torch's `find_torch_dispatch_rule`), and an operator's `python_key_table` (`py_impl`:
# a higher-order operator's always, an OpOverload's under the Python dispatcher).
_RULES = _simple_registry.singleton
_RULE_ENTRY, _RULE_HOLDER = _simple_registry.SimpleOperatorEntry, _simple_registry.GenericTorchDispatchRuleHolder
_OPS, _HIGHER_ORDER_OPS = torch.ops, _torch_ops._higher_order_ops


def _may_be(key: Any, own: dict[int, str]) -> str | None:
    """The name of the class of `own` (id -> name) that torch's lookup of it in a rule table
    would find at `key`; a description where `key`'s class defines an equality of its own (the
    lookup would run it; this check does not); None where it is none of them."""
    if id(key) in own:
        return own[id(key)]
    return None if type(key).__eq__ is object.__eq__ else "a key of its own equality"


def _operators() -> list[Any]:
    """torch's operator objects: the higher-order operators, and every OpOverload of the
    namespaces of `torch.ops` (those looked up so far: torch dispatches through these)."""
    found = list(_HIGHER_ORDER_OPS.values())
    namespace_type, packet_type, op_type = (_torch_ops._OpNamespace, _torch_ops.OpOverloadPacket,
                                            _torch_ops.OperatorBase)
    for namespace in list(vars(_OPS).values()):
        if issubclass(type(namespace), namespace_type):
            for packet in list(vars(namespace).values()):
                if issubclass(type(packet), packet_type):
                    found += [op for op in list(vars(packet).values())
                              if issubclass(type(op), op_type)]
    return found


def dispatch_rules(own: dict[int, str]) -> list[str]:
    """Where torch would hand an operator called under one of the classes `own` (id -> name:
    dispatch modes, tensor subclasses) to a Python rule instead of to the class: one line per
    operator and class, and one per table not as torch made it (swapped, or of another class)."""
    out = []
    registry = vars(_RULES)
    entries = registry.get("_data")
    if _simple_registry.singleton is not _RULES or set(registry) != {"_data"} or \
            type(entries) is not dict:
        out.append("torch._library.simple_registry.singleton")
        entries = {}
    for qualname, entry in list(entries.items()):
        holder = vars(entry).get("torch_dispatch_rules") if type(entry) is _RULE_ENTRY else None
        table = vars(holder).get("_data") if type(holder) is _RULE_HOLDER and \
            "find" not in vars(holder) else None
        if type(table) is not dict:
            out.append(f"the torch dispatch rules of {qualname}")
            continue
        out += [f"{qualname}'s dispatch under {name} (a torch dispatch rule)"
                for name in filter(None, (_may_be(key, own) for key in list(table)))]
    if torch.ops is not _OPS or _torch_ops._higher_order_ops is not _HIGHER_ORDER_OPS:
        out.append("torch.ops")
    for op in _operators():
        table = vars(op).get("python_key_table")
        if type(table) is not dict:
            out.append(f"the Python dispatch rules of {op}")
        elif table:
            out += [f"{op}'s dispatch under {name} (a Python dispatch rule)"
                    for name in filter(None, (_may_be(key, own) for key in list(table)))]
    return out


def _watched_modules() -> list[tuple[str, Any]]:
    owners: list[tuple[str, Any]] = [
        ("torch", torch), ("torch.Tensor", torch.Tensor), ("torch._C.TensorBase", torch._C.TensorBase),
        ("torch.linalg", torch.linalg), ("torch.nn.functional", torch.nn.functional),
        ("torch.testing", torch.testing), ("torch.cuda", torch.cuda),
        ("torch.cuda.Event", torch.cuda.Event), ("torch.cuda.Stream", torch.cuda.Stream),
        ("time", time), ("builtins", builtins),
        # the lookup of the dispatch rules above that torch calls, and its classes
        ("torch._library.simple_registry", _simple_registry),
        ("torch._library.simple_registry.SimpleLibraryRegistry", _simple_registry.SimpleLibraryRegistry),
        ("torch._library.simple_registry.SimpleOperatorEntry", _RULE_ENTRY),
        ("torch._library.simple_registry.GenericTorchDispatchRuleHolder", _RULE_HOLDER),
    ]
    for name in ("numpy", "numpy.linalg", "numpy.testing", "triton", "triton.testing",
                 "triton.runtime.jit", "triton.runtime.autotuner", "triton.runtime.interpreter",
                 "multiprocessing.connection", "pickle", "cuda.bindings.driver"):
        module = sys.modules.get(name)
        if module is not None:
            owners.append((name, module))
    jit = sys.modules.get("triton.runtime.jit")
    if jit is not None:
        owners.append(("triton.runtime.jit.JITFunction", jit.JITFunction))
    autotuner = sys.modules.get("triton.runtime.autotuner")
    if autotuner is not None:
        owners += [("triton.Autotuner", autotuner.Autotuner), ("triton.Heuristics", autotuner.Heuristics)]
    interp = sys.modules.get("triton.runtime.interpreter")
    if interp is not None:
        owners.append(("triton.InterpretedFunction", interp.InterpretedFunction))
    conn = sys.modules.get("multiprocessing.connection")
    if conn is not None:
        owners.append(("Connection", conn.Connection))
    owners += [(name, mod) for name, mod in list(sys.modules.items())
               if name == "gate" or name.startswith("gate.")]
    return owners


def _entries(owner: Any) -> Iterable[tuple[str, Any]]:
    try:
        items = list(vars(owner).items())
    except TypeError:
        return []
    return [(k, v) for k, v in items if callable(v) or isinstance(v, (ModuleType, type, staticmethod,
                                                                      classmethod, property))]


def _code_of(value: Any) -> Any:
    """The code object a watched entry runs (a function's, or the function under a static /
    class method), or None: swapping `__code__` keeps a function's identity."""
    fn = value.__func__ if isinstance(value, (staticmethod, classmethod, MethodType)) else value
    return fn.__code__ if isinstance(fn, FunctionType) else None


def _own_classes(name: str, module: ModuleType) -> list[tuple[str, type]]:
    """The classes a gate module defines: their methods are the gate's code too."""
    return [(f"{name}.{key}", value) for key, value in list(vars(module).items())
            if isinstance(value, type) and getattr(value, "__module__", None) == name]


class TamperWatch:
    """Identity snapshot of watched functions; `changed()` lists what was rebound or removed.

    Watched: the attributes of the modules and classes of `_watched_modules`, the methods of
    every class a gate module defines, the code object under each watched function (a
    `__code__` swap keeps the function's identity), and the instance attributes of objects
    added with `watch_instance` (an attribute rebound or added there: a method shadowed, a
    module of the gate's swapped for a stand-in), and torch's per-operator dispatch rules for
    the gate's dispatch classes (`dispatch_rules`: torch runs such a rule in place of the op
    trace, which then never sees the operator).

    torch rebinds one watched function itself: importing torch._dynamo (as torch.library's
    `triton_op` does) wraps `torch.manual_seed` in torch's `_disable_dynamo` wrapper. An entry
    found so wrapped (torch's code around the very function the snapshot holds, whoever put it
    there) is put back by `changed()` and not reported: the gate's later calls reach the
    function itself, never the attribute through which the wrapper calls it
    (`lazy_dynamo_wrapped`)."""

    def __init__(self) -> None:
        self._owners = _watched_modules()
        self._owners += [own for name, mod in list(self._owners)
                         if isinstance(mod, ModuleType) and (name == "gate" or name.startswith("gate."))
                         for own in _own_classes(name, mod)]
        self._before: dict[str, dict[str, Any]] = {name: dict(_entries(owner))
                                                   for name, owner in self._owners}
        self._ids: dict[str, dict[str, tuple[int, int]]] = {
            name: {key: (id(value), id(_code_of(value))) for key, value in self._before[name].items()}
            for name, _ in self._owners}
        self._keep = [(value, _code_of(value)) for _, owner in self._owners
                      for _, value in _entries(owner)]
        self._modules = {name: id(mod) for name, mod in self._owners if isinstance(mod, ModuleType)}
        self._instances: list[tuple[str, Any, dict[str, int], frozenset[str]]] = []
        # The gate's dispatch classes (its op trace): a rule torch would run in place of one
        # (`dispatch_rules`) hides operators from it.
        self._dispatchers = {id(owner): name for name, owner in self._owners
                             if isinstance(owner, type) and _GATE_MODULE.match(name)
                             and hasattr(owner, "__torch_dispatch__")}
        self._rules = frozenset(dispatch_rules(self._dispatchers))

    def watch_instance(self, name: str, obj: Any, mutable: Iterable[str] = ()) -> None:
        """Watch the instance attributes of `obj` from now on (those in `mutable` may change)."""
        state = {k: id(v) for k, v in vars(obj).items()}
        self._keep.append(list(vars(obj).values()))
        self._instances.append((name, obj, state, frozenset(mutable)))

    def changed(self, gate_only: bool = False) -> list[str]:
        """What was rebound or removed since the snapshot; with `gate_only`, of the gate's own
        modules, classes and watched instances alone (torch's device queries are answered by
        stand-ins while an emulated host runs). An entry torch's `_disable_dynamo` wrapper was
        put around is put back first (the class's docstring)."""
        out = []
        for name, owner in self._owners:
            if gate_only and not _GATE_MODULE.match(name):
                continue
            current = dict(_entries(owner))
            for key, (ident, code) in self._ids[name].items():
                value = current.get(key)
                before = self._before[name][key]
                if value is not before and any(f is before for f in lazy_dynamo_wrapped(value)):
                    try:
                        setattr(owner, key, before)
                        value = before
                    except (AttributeError, TypeError):  # an owner that refuses it: reported
                        pass
                if value is None or id(value) != ident or id(_code_of(value)) != code:
                    out.append(f"{name}.{key}")
        for name, ident in self._modules.items():
            if gate_only and not _GATE_MODULE.match(name):
                continue
            if id(sys.modules.get(name)) != ident:
                out.append(f"sys.modules[{name!r}]")
        for name, obj, state, mutable in self._instances:
            now = vars(obj)
            out += [f"{name}.{key}" for key in set(state) | set(now)
                    if key not in mutable and (key not in now or id(now[key]) != state.get(key))]
        out += [rule for rule in dispatch_rules(self._dispatchers) if rule not in self._rules]
        return sorted(set(out))


class GateRefusal(PermissionError):
    """Raised into candidate code by `AuditGuard` when it refuses an operation."""

    gate_refusal = True


class _Refused(GateRefusal, RuntimeError):
    """A refused `sys.addaudithook` (a RuntimeError: Python then drops the new hook quietly)."""


# Audit events of a new process (or program): refused where candidate code starts one itself
# (a child may signal the gate, or compute out of every hook's sight); a library it calls
# (Triton running ptxas) may.
PROCESS_STARTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                  "os.fork", "os.forkpty")
# Operations no kernel's host code needs and that reach into the gate's process: a hook that
# runs candidate code inside the gate's own frames (and while its kernels run), a walk of the
# interpreter's heap to the gate's objects, a code object swapped under a function, a signal
# to a process that is not the worker's.
AUDITED = frozenset({"sys.settrace", "sys.setprofile", "sys._settraceallthreads",
                     "sys._setprofileallthreads", "sys.monitoring.register_callback",
                     "sys.addaudithook", "gc.get_objects",
                     "gc.get_referrers", "gc.get_referents", "object.__setattr__",
                     "object.__delattr__", "os.kill", "os.killpg", *PROCESS_STARTS})
# Ways out of a sealed launch's forked child (`Seal.isolated`) other than the memory the seal
# brings back, refused there to candidate code: a file opened for writing, the file system's
# names and times, a socket, a signal, a file mapping, a raw foreign call (`AuditGuard.isolate`).
CHILD_AUDITED = frozenset({"open", "os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.symlink",
                           "os.link", "os.utime", "os.chmod", "os.chown", "os.truncate",
                           "os.setxattr", "os.removexattr", "socket.__new__", "os.kill",
                           "os.killpg", "signal.pthread_kill", "mmap.__new__",
                           "ctypes.call_function", "ctypes.dlsym", "ctypes.dlopen"})
_HOOKED = AUDITED | CHILD_AUDITED  # every event the hook acts on
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_CODE_ATTRS = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
_GATE_MODULE = re.compile(r"gate(\.|$)")


class AuditGuard:
    """A Python audit hook (`sys.addaudithook`, which nothing can remove) that, once `arm`ed
    before candidate code loads, refuses the operations of `AUDITED` that candidate code
    could use to reach into the gate: it raises `GateRefusal` into the caller and records a
    one-line finding (`findings`), which the worker rejects as tampering even where the
    candidate caught the exception. Refused: tracing and profiling hooks (`sys.settrace`,
    `sys.setprofile`, their all-threads forms and `sys.monitoring` callbacks, Python 3.12; they
    would run candidate code in the gate's frames), further audit
    hooks, the heap walks of `gc` (`get_objects`, `get_referrers`, `get_referents`),
    replacing the code object, defaults or keyword defaults of one of the gate's functions
    (its identity unchanged, so that a swap undone before a check is seen by none),
    `os.kill` / `os.killpg` of a process outside the worker's process group (stopping or
    killing the gate itself; signal 0, a liveness probe, is allowed), and starting a process
    (`PROCESS_STARTS`) where the code that asks for it, the standard library's frames passed
    over, is the candidate's (under one of `arm`'s folders; the gate's own forks and a
    library's, e.g. Triton's ptxas, are allowed).
    What it cannot see (no audit event): rebinding an attribute of a class or module, which
    `TamperWatch` reports, and walking frames from a traceback."""

    _installed: AuditGuard | None = None

    def __init__(self) -> None:
        self.armed = False
        self.isolating = False
        self._names: dict[str, bool] = {}  # file name -> under a candidate folder
        self._base: Any = None  # the frame a sealed launch's child started from (`isolate`)
        self.candidate_dirs: tuple[str, ...] = ()
        self.findings: list[str] = []

    @classmethod
    def install(cls) -> AuditGuard:
        """The process's guard (one hook per process: a second install returns the first)."""
        if cls._installed is None:
            guard = cls()
            sys.addaudithook(guard._hook)
            cls._installed = guard
        return cls._installed

    def arm(self, candidate_dirs: Iterable[str] = ()) -> None:
        """Refuse from now on (candidate code is about to load from `candidate_dirs`)."""
        self.candidate_dirs = tuple(str(Path(d).resolve()) for d in candidate_dirs if d)
        windowwatch.candidate_dirs(self.candidate_dirs)
        self.armed = True

    def _started_by_candidate(self) -> bool:
        """Whether the nearest caller outside the standard library (and this module) is code
        of the candidate's; the gate's own code and other libraries are not."""
        import sysconfig  # noqa: PLC0415

        paths = sysconfig.get_paths()
        stdlib = str(Path(paths["stdlib"]).resolve())
        libraries = {str(Path(paths[k]).resolve()) + os.sep for k in ("purelib", "platlib")}
        gate_dir = str(Path(__file__).resolve().parent)
        own = {AuditGuard._hook.__code__, AuditGuard._refusal.__code__,
               AuditGuard._started_by_candidate.__code__}
        frame = sys._getframe(1)
        while frame is not None:
            name = str(Path(frame.f_code.co_filename).resolve())
            if frame.f_code in own or name.startswith(stdlib) or \
                    frame.f_code.co_filename.startswith("<frozen"):
                frame = frame.f_back
                continue
            if name.startswith(gate_dir + os.sep) or any(name.startswith(d) for d in libraries):
                return False
            return any(name.startswith(d + os.sep) for d in self.candidate_dirs)
        return False

    def isolate(self, base: Any) -> None:
        """In a sealed launch's forked child, from now on: refuse `CHILD_AUDITED` to candidate
        code called from within the launch (above the frame `base`: its kernel's body, run as
        Python by the interpreter), whose way back is the seal's shared mapping alone."""
        self.isolating = True
        self._base = base

    def _candidate_on_stack(self) -> bool:
        """Whether code of the candidate's is among the callers within the launch (a library
        it called, NumPy's `save`, acts for it)."""
        frame = sys._getframe(1)
        names = self._names
        while frame is not None and frame is not self._base:
            filename = frame.f_code.co_filename
            found = names.get(filename)
            if found is None:
                found = names[filename] = any(str(Path(filename).resolve()).startswith(d + os.sep)
                                              for d in self.candidate_dirs)
            if found:
                return True
            frame = frame.f_back
        return False

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event not in _HOOKED:  # most events: the window watch's reads of `frame.f_code`
            return
        if event == "sys.setprofile" and windowwatch.own_call(sys._getframe(1)):
            return  # the gate's watch over a sealed launch's child (`gate.windowwatch`)
        if self.isolating and event in CHILD_AUDITED:
            why = self._child_refusal(event, args)
            if why is not None:
                raise GateRefusal(f"the gate refuses {why} in candidate code")
        if not self.armed or event not in AUDITED:
            return
        why = self._refusal(event, args)
        if why is None:
            return
        self.findings.append(why)
        raise (_Refused if event == "sys.addaudithook" else GateRefusal)(
            f"the gate refuses {why} in candidate code")

    # Python looks this attribute up on every audit hook at every audited event; where it is
    # missing, each look-up raises and clears an AttributeError: a quarter of the window
    # watch's cost, which reads `frame.f_code` (an event) at every Python call in a sealed
    # launch's child. False: no tracing inside the hook, as without it.
    _hook.__cantrace__ = False  # type: ignore[attr-defined]

    def _child_refusal(self, event: str, args: tuple[Any, ...]) -> str | None:
        if event == "open":
            mode, flags = (tuple(args[1:]) + (None, None))[:2]
            writes = (isinstance(flags, int) and flags & _WRITE_FLAGS) or \
                (isinstance(mode, str) and any(c in mode for c in "wax+"))
            if not writes:
                return None
        if not self._candidate_on_stack():
            return None
        return f"{event} in a sealed launch's process (a way out of it other than its tensors)"

    def _refusal(self, event: str, args: tuple[Any, ...]) -> str | None:
        if event in ("object.__setattr__", "object.__delattr__"):
            target, attr = (args + (None, None))[:2]
            if attr not in _CODE_ATTRS or not isinstance(target, FunctionType) or \
                    not _GATE_MODULE.match(str(getattr(target, "__module__", "") or "")):
                return None  # libraries set defaults of functions they make (namedtuple)
            return f"replacing {attr} of the gate's {target.__qualname__}"
        if event in ("os.kill", "os.killpg"):
            target, sig = (args + (None, None))[:2]
            if sig == 0 or not isinstance(target, int):
                return None
            try:
                group = target if event == "os.killpg" else \
                    os.getpgrp() if target in (0, os.getpid()) else os.getpgid(target)
            except OSError:
                return None  # no such process: the call fails by itself
            if group == os.getpgrp():
                return None
            return f"{event}({target}, {sig}) (a process outside the gate's worker)"
        if event in PROCESS_STARTS:
            if not self._started_by_candidate():
                return None
            return f"{event} (a process of its own: it could signal the gate, or compute out of sight)"
        return f"{event} (it reaches into the gate's own process)"


# ---------------------------------------------------------------------------------------------
# Launches

class LaunchSuppressed(RuntimeError):
    """Raised by a suppressed launch in `raise` mode (the fault-injection run)."""


@dataclass(slots=True)
class LaunchMonitor:
    """Counts and optionally suppresses launches of kernels defined under `candidate_dir`.

    `mode` is "run" (launch), "silent" (skip the launch, as if it did nothing) or "raise"
    (raise `LaunchSuppressed`). CUDA driver launches are all the candidate's: the gate and the
    reference never call the driver directly.
    """

    candidate_dir: str
    mode: str = "run"
    seal: Seal | None = None
    """The sealed call's seal (`Seal`), opened around each launch; None outside that call."""
    launches: int = 0
    tuning: int = 0
    side_stream: list[str] = field(default_factory=list)
    gate_stream: int | None = None
    names: set[str] = field(default_factory=set)
    """Names of the kernels the candidate launched through the hooked paths (every mode),
    as the compiled kernel / the driver names them: what `KernelLog` attributes to it."""
    tuners: dict[int, Any] = field(default_factory=dict)
    """The candidate's own autotuners that ran (`triton.autotune`), by id, in launch order."""
    isolate: bool = False
    """Kernels run in this process (the interpreter, the CUDA emulator): a launch of the
    sealed call runs in a forked child (`Seal.isolated`)."""
    pin: tuple[Any, Any] | None = None
    """(autotuner, configuration): that autotuner's choice is forced to that configuration
    (`_wrap_bench`), as if it had timed fastest; None: autotuners choose as they do."""
    kept: dict[int, set[int]] = field(default_factory=dict)
    """By autotuner id, the ids of the configurations its own pruning (`prune_configs_by`)
    kept on its calls since the caller last cleared this (`_wrap_prune`)."""
    sequence: list[tuple[str, Any]] = field(default_factory=list)
    """The launches since the caller last cleared this, in order: (kernel, what else names the
    launch: a Triton launch's grid and scalar arguments), the call's launch signature
    (`launch_signature`)."""
    host_bytes: HostBytes | None = None
    """On the CPU tiers, what each Triton launch's buffers hold before it and after it
    (`gate.hostbytes`); None: not read."""
    given: list[tuple[Any, ...]] = field(default_factory=list)
    """Beside `sequence`, per launch: its arguments as given (`HostBytes.before`), empty where
    none was read (no `host_bytes`, a launch skipped)."""
    refused: str | None = None
    """Why Triton's JIT would not launch a kernel the candidate launched in the interpreter
    (`gate.interpdeps.refusal`), the first such; None: none was."""
    _owned: dict[str, bool] = field(default_factory=dict)
    _vetted: dict[tuple[int, int, int], str | None] = field(default_factory=dict)

    def vet(self, kernel: Any) -> None:
        """Refuse (`interpdeps.CompileRefusal`) an interpreted kernel the GPU's JIT would not
        launch, and note it in `refused` (a candidate that catches the refusal is refused
        still); each kernel object is read once for each code object its function holds (a code
        swapped under it after a launch is read again)."""
        from gate import interpdeps  # noqa: PLC0415

        fn = getattr(kernel, "fn", None)
        key = (id(kernel), id(fn), id(getattr(fn, "__code__", None)))  # a code swapped: again
        if key not in self._vetted:
            self._vetted[key] = interpdeps.refusal(kernel)
        reason = self._vetted[key]
        if reason is not None:
            name = getattr(kernel, "__name__", "kernel")
            self.note_refusal(f"{name}: {reason}")
            raise interpdeps.CompileRefusal(
                f"Triton's JIT would not launch {name} on a GPU ({reason}); the interpreter "
                f"runs what it references on the host")

    def note_refusal(self, reason: str) -> None:
        """Keep the first reason a kernel was refused for (`refused`)."""
        self.refused = self.refused or reason

    def reset(self, mode: str = "run", inputs: Iterable[Any] = ()) -> None:
        """A new call's counts, on `inputs` (their storages are not read: `host_bytes`)."""
        self.mode, self.launches = mode, 0
        self.side_stream.clear()
        self.sequence.clear()
        self.given.clear()
        if self.host_bytes is not None:
            self.host_bytes.skipping(inputs)

    def owns(self, fn: Any) -> bool:
        code = getattr(fn, "__code__", None)
        if code is None:
            return False
        # Resolving a path is a system call; launches are hot (timed), file names are few.
        owned = self._owned.get(code.co_filename)
        if owned is None:
            owned = str(Path(code.co_filename).resolve()).startswith(self.candidate_dir)
            self._owned[code.co_filename] = owned
        return owned

    def _on_launch(self, what: str, stream: int | None, detail: Any = (),
                   kernel: str | None = None) -> None:
        self.launches += 1
        self.sequence.append((kernel or what, detail))
        if self.gate_stream is not None and stream is not None and stream != self.gate_stream:
            self.side_stream.append(f"{what} on stream {stream:#x}, gate stream {self.gate_stream:#x}")
        if self.mode == "raise":
            raise LaunchSuppressed(f"launch of {what} suppressed by the gate")

    def sealing(self, *args: Any, **kwargs: Any) -> Any:
        """Around one launch of the candidate's kernel, given the launch's arguments: the sealed
        call's inputs hold their real values, and tensors passed to the kernel are sealed from
        then on (`Seal.launch`); a no-op outside that call."""
        if self.seal is None:
            return contextlib.nullcontext()
        return self.seal.launch([*args, *kwargs.values()])

    @staticmethod
    def _patch(owner: Any, name: str, new: Any) -> None:
        # For the worker's lifetime: the process ends with the candidate, nothing to undo.
        setattr(owner, name, new)

    def install_triton(self) -> None:
        import triton.runtime.jit as jit

        classes = [jit.JITFunction]
        if "triton.runtime.interpreter" in sys.modules or _interpreting():
            import triton.runtime.interpreter as interp

            classes.append(interp.InterpretedFunction)
            windowwatch.install_rewrites(self.owns, self.vet)
        for cls in classes:
            self._patch(cls, "run", self._wrap_triton(cls.run))
        import triton.runtime.autotuner as autotuner

        if hasattr(autotuner.Autotuner, "_bench"):
            self._patch(autotuner.Autotuner, "_bench", self._wrap_bench(autotuner.Autotuner._bench))
        self._patch(autotuner.Autotuner, "run", self._wrap_tuner(autotuner.Autotuner.run))
        if hasattr(autotuner.Autotuner, "prune_configs"):
            self._patch(autotuner.Autotuner, "prune_configs",
                        self._wrap_prune(autotuner.Autotuner.prune_configs))

    def _wrap_tuner(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Records each autotuner of the candidate's that runs (`tuners`), so that every one of
        its configurations can be checked, not only the one it picks (`worker.configs`)."""
        monitor = self

        def run(tuner: Any, *args: Any, **kwargs: Any) -> Any:
            if monitor.owns(getattr(tuner_kernel(tuner), "fn", None)):
                monitor.tuners.setdefault(id(tuner), tuner)
            return original(tuner, *args, **kwargs)

        return run

    def _wrap_prune(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Records which configurations an autotuner's pruning keeps on each call (`kept`):
        one it drops there is never run there, whatever its timing would be."""
        monitor = self

        def prune(tuner: Any, *args: Any, **kwargs: Any) -> Any:
            configs = original(tuner, *args, **kwargs)
            monitor.kept.setdefault(id(tuner), set()).update(id(c) for c in configs)
            return configs

        return prune

    def _wrap_bench(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Autotuning: Triton's own benchmarking is not the candidate's computation, so the op
        trace pauses during it (it may use torch for its statistics). The interpreter cannot
        time configurations at all: there every configuration ties and the first one runs.
        While `pin` names this autotuner, its configuration times fastest and no other runs."""
        monitor = self
        interpreting = _interpreting()

        def bench(tuner: Any, *args: Any, **kwargs: Any) -> Any:
            if monitor.pin is not None and monitor.pin[0] is tuner:
                fast = kwargs.get("config") is monitor.pin[1]
                return [0.0, 0.0, 0.0] if fast else [float("inf")] * 3
            if interpreting:
                return [1.0, 1.0, 1.0]
            monitor.tuning += 1
            try:
                return original(tuner, *args, **kwargs)
            finally:
                monitor.tuning -= 1

        return bench

    def _wrap_triton(self, original: Callable[..., Any]) -> Callable[..., Any]:
        monitor = self

        def run(jit_self: Any, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("warmup") or not monitor.owns(getattr(jit_self, "fn", None)):
                return original(jit_self, *args, **kwargs)
            stream = None
            if monitor.gate_stream is not None:
                stream = int(torch.cuda.current_stream().cuda_stream)
            if monitor.isolate:
                monitor.vet(jit_self)
            name = getattr(jit_self.fn, "__name__", "kernel")
            monitor.names.add(name)
            monitor._on_launch(name, stream, launch_detail(args, kwargs))
            if monitor.mode == "silent":
                monitor.given.append(())
                return None
            if monitor.isolate:  # the grid read here, not by the interpreter inside the launch
                kwargs = windowwatch.plain_grid(jit_self, args, kwargs)
            with monitor.sealing(*args, **kwargs):
                # read as the kernel gets them: in the sealed call, with real values restored
                read = None
                if monitor.host_bytes is not None:
                    given, read = monitor.host_bytes.before([*args, *kwargs.values()])
                    monitor.given.append(given)
                else:
                    monitor.given.append(())
                try:
                    # isolated: plain_grid ran the pre-run hooks, the launch runs none
                    with windowwatch.hooks_off(jit_self) if monitor.isolate else contextlib.nullcontext():
                        if monitor.seal is not None and monitor.isolate:
                            # the interpreter runs the kernel's body as Python in this process
                            kernel = monitor.seal.isolated(
                                lambda: original(jit_self, *args, **kwargs), [*args, *kwargs.values()])
                        else:
                            kernel = original(jit_self, *args, **kwargs)
                finally:
                    if read is not None:
                        monitor.host_bytes.after(read)
            compiled = getattr(kernel, "name", None)
            if isinstance(compiled, str):
                monitor.names.add(compiled)
            return kernel

        return run

    def install_cuda(self) -> None:
        try:
            from cuda.bindings import driver
        except ImportError:
            return
        ok = driver.CUresult.CUDA_SUCCESS
        monitor = self

        def wrap(original: Callable[..., Any], stream_of: Callable[[tuple[Any, ...]], Any],
                 function_of: Callable[[tuple[Any, ...]], Any],
                 dims_of: Callable[[tuple[Any, ...]], Any]) -> Any:
            def launch(*args: Any, **kwargs: Any) -> Any:
                try:
                    stream = int(stream_of(args))
                except (TypeError, ValueError, IndexError, AttributeError):
                    stream = None
                kernel, dims = None, ()
                try:
                    function = function_of(args)
                    kernel = monitor._name_function(driver, function)
                    dims = tuple(int(v) for v in dims_of(args))  # grid, block, shared bytes
                except (TypeError, ValueError, IndexError, AttributeError):
                    pass
                monitor._on_launch(f"{original.__name__}", stream, dims, kernel=kernel)
                if monitor.mode == "silent":
                    return (ok,)
                with monitor.sealing():
                    if monitor.seal is not None and monitor.isolate:
                        # an emulated kernel runs in this process, on host memory
                        return monitor.seal.isolated(lambda: original(*args, **kwargs))
                    return original(*args, **kwargs)

            launch.__name__ = original.__name__
            return launch

        if hasattr(driver, "cuLaunchKernel"):
            self._patch(driver, "cuLaunchKernel", wrap(driver.cuLaunchKernel, lambda a: a[8],
                                                       lambda a: a[0], lambda a: a[1:8]))
        if hasattr(driver, "cuLaunchKernelEx"):
            self._patch(driver, "cuLaunchKernelEx", wrap(
                driver.cuLaunchKernelEx, lambda a: a[0].hStream, lambda a: a[1],
                lambda a: [getattr(a[0], k) for k in ("gridDimX", "gridDimY", "gridDimZ", "blockDimX",
                                                      "blockDimY", "blockDimZ", "sharedMemBytes")]))

    def install_extensions(self) -> None:
        """Every function of a module `torch.utils.cpp_extension.load_inline` builds is a launch
        path of the candidate's own kernels (its C++ launches them with `<<<...>>>`, which no
        Python hook sees): each call counts as a launch, opens the seal, and is refused in the
        knockout runs (a suppressed call raises `LaunchSuppressed` in both modes: its result
        is made in C++ and cannot be left out)."""
        import torch.utils.cpp_extension as cpp_extension

        original = cpp_extension.load_inline
        monitor = self

        def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                monitor._on_launch(f"extension function {name}", None)
                if monitor.mode == "silent":
                    raise LaunchSuppressed(f"call of extension function {name} suppressed by the gate")
                with monitor.sealing(*args, **kwargs):
                    return fn(*args, **kwargs)

            call.__name__ = name
            return call

        def load_inline(*args: Any, **kwargs: Any) -> Any:
            module = original(*args, **kwargs)
            for name in [n for n in dir(module) if not n.startswith("_")]:
                fn = getattr(module, name)
                if callable(fn) and not isinstance(fn, type):
                    setattr(module, name, wrap(name, fn))
            return module

        self._patch(cpp_extension, "load_inline", load_inline)

    def install_cupy(self) -> None:
        """CuPy's compilers of the candidate's own source (`cupy.RawKernel`, the functions of a
        `cupy.RawModule`) give kernels whose launches are counted, stream-checked, sealed and
        suppressed like a driver launch; the kernel's name joins `names`."""
        import cupy

        real_kernel, real_module = cupy.RawKernel, cupy.RawModule
        monitor = self

        class Kernel:
            def __init__(self, inner: Any, name: str) -> None:
                object.__setattr__(self, "_inner", inner)
                object.__setattr__(self, "_name", str(name))

            def __call__(self, grid: Any, block: Any, args: Any, **kwargs: Any) -> Any:
                stream = kwargs.get("stream")
                ptr = getattr(stream if stream is not None else cupy.cuda.get_current_stream(),
                              "ptr", None)
                monitor.names.add(self._name)
                monitor._on_launch(self._name, int(ptr) if ptr is not None else None)
                if monitor.mode == "silent":
                    return None
                with monitor.sealing():
                    return self._inner(grid, block, args, **kwargs)

            def __getattr__(self, key: str) -> Any:
                return getattr(self._inner, key)

            def __setattr__(self, key: str, value: Any) -> None:
                setattr(self._inner, key, value)

        class Module:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                object.__setattr__(self, "_inner", real_module(*args, **kwargs))

            def get_function(self, name: str) -> Kernel:
                return Kernel(self._inner.get_function(name), name)

            def __getattr__(self, key: str) -> Any:
                return getattr(self._inner, key)

        def raw_kernel(code: str, name: str, *args: Any, **kwargs: Any) -> Kernel:
            return Kernel(real_kernel(code, name, *args, **kwargs), name)

        self._patch(cupy, "RawKernel", raw_kernel)
        self._patch(cupy, "RawModule", Module)

    def _name_function(self, driver: Any, function: Any) -> str | None:
        """The (mangled) name of a launched CUfunction, asked of the driver at every launch: a
        handle is the driver's to hand out again once its module is unloaded, so a name kept
        by handle could name another kernel (and a kernel told apart by its name pass as
        another)."""
        if not hasattr(driver, "cuFuncGetName"):
            return None
        err, raw = driver.cuFuncGetName(function)
        name = raw.decode() if isinstance(raw, bytes) else str(raw)
        if err != driver.CUresult.CUDA_SUCCESS or not name:
            return None
        self.names.add(name)
        return name


class KernelLog:
    """GPU kernels (and driver memcpy / memset activities) that ran inside `window()`s.

    Each candidate call runs inside a window: a device synchronize, the start of a profiler
    session that records CUDA activity alone (CUPTI's kernel, memcpy and memset records; no CPU
    ops, shapes, stacks or memory), the call, another synchronize, the session's end. So every
    kernel the call launched on any stream (a library's included) is recorded, and nothing the
    gate runs between calls is. `kernels` holds the names collected so far (in order, repeats
    dropped). Off the GPU, or where the profiler cannot start, it records nothing and
    `available` is False (`reason` says why); `lost` says why when it had started before
    (in `warm_up`, before candidate code loaded) and then failed to.

    The sessions are driven through torch's Kineto bindings, bound when the log is made (before
    candidate code loads), not through `torch.profiler.profile`, whose first start imports
    torch._inductor and with it torch._dynamo (4.8 s with torch 2.11 on an H100 machine, and a
    rebinding of `torch.manual_seed`). A session costs a few milliseconds; the first one, which
    initializes CUPTI, about 0.15 s."""

    def __init__(self, synchronize: Callable[[], None] | None) -> None:
        self.synchronize = synchronize
        self.available = synchronize is not None
        self.kernels: list[str] = []
        # GPU nanoseconds per kernel name recorded since the caller last cleared it (what a
        # profile of the candidate's calls says about where its time goes; judges nothing)
        self.time_ns: dict[str, int] = {}
        # where the caller sets a list: each device activity's (start ns, end ns, name) on the
        # GPU's timeline, in the order recorded; None again where an activity had no times
        self.spans: list[tuple[int, int, str]] | None = None
        # the names of the kernel `learn_marker` issued (the gate's GPU lead: `torch.cuda._sleep`)
        self.marker: frozenset[str] = frozenset()
        self.reason: str | None = None  # why the profiler is unavailable, when it is
        self.seconds = 0.0  # wall seconds spent starting, stopping and reading the profiler
        self.windows = 0  # windows recorded (sessions run)
        self.lost: str | None = None
        self._started = False
        self._open = False
        self._kineto: _Kineto | None = None
        if self.available:
            try:
                self._kineto = _Kineto.bind()
            except Exception as exc:  # a torch without Kineto's CUDA activity
                self._unavailable(exc)

    def _unavailable(self, exc: BaseException) -> None:
        self.available, self.reason = False, f"{type(exc).__name__}: {exc}"
        if self._started:
            self.lost = self.reason

    def warm_up(self) -> None:
        """One empty window, before candidate code loads: the first session initializes CUPTI,
        and a profiler that starts here and not later was stopped from starting by the
        candidate (`lost`)."""
        with self.window():
            pass
        self.kernels.clear()
        self.windows = 0

    def learn_marker(self, issue: Callable[[], Any]) -> None:
        """`marker`: the names of the kernels `issue()` launches, recorded in a window of
        their own (before candidate code loads): the gate's own marks on the GPU's timeline."""
        before, times = list(self.kernels), dict(self.time_ns)
        self.kernels.clear()
        with self.window():
            issue()
        self.marker = frozenset(self.kernels)
        self.kernels[:], self.time_ns = before, times
        self.windows = max(0, self.windows - 1)

    def window(self) -> Any:
        if not self.available or self._open:
            return contextlib.nullcontext()
        log = self

        @contextlib.contextmanager
        def run() -> Any:
            kineto = log._kineto
            assert log.synchronize is not None and kineto is not None
            log.synchronize()
            t0 = time.perf_counter()
            try:
                kineto.start()
            except Exception as exc:  # no CUPTI: attribution is off, said in a flag
                log._unavailable(exc)
                yield
                return
            log._open = log._started = True
            log.seconds += time.perf_counter() - t0
            try:
                yield
            finally:
                log.synchronize()
                t1 = time.perf_counter()
                log._open = False
                log.windows += 1
                log._collect(kineto.stop())
                log.seconds += time.perf_counter() - t1

        return run()

    def _collect(self, events: list[Any]) -> None:
        assert self._kineto is not None
        cuda = self._kineto.cuda
        seen = set(self.kernels)
        device = 0
        for ev in events:
            if ev.device_type() != cuda:
                continue
            # a user range (the candidate's own record_function) mirrored on the GPU's
            # timeline is an annotation, no kernel
            annotation = getattr(ev, "is_user_annotation", None)
            kind = str(ev.activity_type()) if hasattr(ev, "activity_type") else ""
            if (annotation is not None and annotation()) or "annotation" in kind:
                continue
            device += 1
            name = ev.name()
            try:
                self.time_ns[name] = self.time_ns.get(name, 0) + max(0, int(ev.duration_ns()))
            except Exception:  # noqa: BLE001 — a Kineto without durations: names still count
                pass
            if self.spans is not None:
                try:
                    self.spans.append((int(ev.start_ns()), int(ev.end_ns()), name))
                except Exception:  # noqa: BLE001 — no times on the timeline: none kept
                    self.spans = None
            if name not in seen:
                seen.add(name)
                self.kernels.append(name)
        if os.environ.get("KLINEAGE_GATE_DEBUG") == "1":
            print(f"klineage gate kernel log: window {self.windows}, {device} device events; "
                  f"names so far: {self.kernels}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class _Kineto:
    """Torch's profiler entry points (`torch._C._autograd`) and a CUDA-only configuration."""

    prepare: Callable[..., Any]
    enable: Callable[..., Any]
    disable: Callable[[], Any]
    config: Any
    activities: frozenset[Any]
    cuda: Any  # torch.autograd.DeviceType.CUDA

    @staticmethod
    def bind() -> _Kineto:
        from torch._C import _autograd  # noqa: PLC0415
        from torch.autograd import profiler  # noqa: PLC0415

        # The configuration torch builds for `profile(use_cpu=False, use_device="cuda")`.
        template = profiler.profile(use_cpu=False, use_device="cuda", use_kineto=True)
        activities = frozenset(template.kineto_activities)
        if activities != {profiler.ProfilerActivity.CUDA}:
            raise RuntimeError(f"the profiler records no CUDA activity here "
                               f"(activities {sorted(map(str, activities))})")
        return _Kineto(_autograd._prepare_profiler, _autograd._enable_profiler,
                       _autograd._disable_profiler, template.config(), activities,
                       torch.autograd.DeviceType.CUDA)

    def start(self) -> None:
        self.prepare(self.config, set(self.activities))
        self.enable(self.config, set(self.activities))

    def stop(self) -> list[Any]:
        return list(self.disable().events())


def launch_detail(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """What names a Triton launch besides its kernel: its grid (where given as numbers) and
    its scalar arguments (flags, sizes, constexprs), not its tensors. Integers the size of an
    address are left out (a pointer passed as a number moves from call to call); a float is
    kept as `(FLOAT_ARG, its repr)` (NaN equals itself), as one drawn with the inputs (a
    scalar input) differs between input sets."""
    grid = kwargs.get("grid")
    values: list[Any] = [grid if isinstance(grid, tuple) else None]
    for value in (*args, *(v for k, v in kwargs.items() if k not in ("grid", "warmup"))):
        if isinstance(value, bool) or (isinstance(value, int) and abs(value) < 1 << 40) \
                or isinstance(value, str):
            values.append(value)
        elif isinstance(value, float):
            values.append((FLOAT_ARG, repr(value)))
        elif not isinstance(value, torch.Tensor):
            values.append(type(value).__name__)
    return tuple(values)


FLOAT_ARG = "float"


@dataclass(frozen=True, slots=True)
class LaunchSignature:
    """What a call launched (`LaunchMonitor.sequence`), compared between the gate's calls of
    one variant: an honest candidate launches the same kernels whatever values its inputs hold
    (`kernels`), the same kernels, grids and integer arguments on inputs whose integers are
    the same (`shape`), and the very same sequence on inputs that differ in floats alone
    (`sequence`)."""

    kernels: frozenset[str]
    shape: tuple[Any, ...]
    sequence: tuple[Any, ...]
    contents: tuple[Any, ...] = field(default=(), compare=False)
    """Per launch, its buffers as given (`LaunchMonitor.given`): on the CPU tiers, the sealed
    call's are held to the correctness calls' (`gate.hostbytes.odd_contents`)."""

    @classmethod
    def of(cls, sequence: list[tuple[str, Any]], contents: Iterable[Any] = ()) -> LaunchSignature:
        shape = tuple((name, tuple(v for v in detail if not (isinstance(v, tuple) and v[:1] == (FLOAT_ARG,))))
                      for name, detail in sequence)
        return cls(frozenset(name for name, _ in sequence), shape, tuple(sequence), tuple(contents))


def odd_floats(calls: list[tuple[Any, ...]], call: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """`call` (a launch sequence) where a float argument that held one value in every one of
    `calls` holds another, else None. The sequences launch alike but for floats
    (`odd_launches` found none odd among their shapes)."""
    for j, (_, detail) in enumerate(call):
        for k, value in enumerate(detail):
            if not (isinstance(value, tuple) and value[:1] == (FLOAT_ARG,)):
                continue
            held = {c[j][1][k] for c in calls if j < len(c) and k < len(c[j][1])}
            if len(held) == 1 and value not in held:
                return call
    return None


def odd_launches(calls: list[tuple[Any, ...]]) -> tuple[Any, ...] | None:
    """The first of `calls` (launch sequences, in call order) that breaks their likeness, or
    None: every call launches the same kernels in the same order with the same kinds of
    arguments, and each argument holds one value throughout or rises at every call (a counter:
    an epoch a kernel's flags are compared against, so that they need no reset)."""
    if not calls:
        return None
    first = calls[0]
    for call in calls[1:]:
        if len(call) != len(first) or any(a[0] != b[0] or len(a[1]) != len(b[1])
                                           for a, b in zip(call, first)):
            return call
    for j, (_, detail) in enumerate(first):
        for k in range(len(detail)):
            values = [call[j][1][k] for call in calls]
            if all(v == values[0] for v in values):
                continue
            if all(type(v) is int for v in values) and all(b > a for a, b in zip(values, values[1:])):
                continue
            return next(call for call, v in zip(calls, values) if v != values[0])
    return None


def tuner_kernel(tuner: Any) -> Any:
    """The `JITFunction` under an autotuner (through heuristics and other wrappers)."""
    fn = getattr(tuner, "fn", None)
    for _ in range(8):
        if fn is None or hasattr(fn, "arg_names") and hasattr(getattr(fn, "fn", None), "__code__"):
            return fn
        fn = getattr(fn, "fn", None)
    return fn


def tuner_config_text(config: Any) -> str:
    """A configuration as `BLOCK_M=64 BLOCK_N=64 num_warps=4 num_stages=3`."""
    kwargs = dict(getattr(config, "kwargs", {}) or {})
    for key in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        value = getattr(config, key, None)
        if value is not None and not (key == "num_ctas" and value == 1):
            kwargs[key] = value
    return " ".join(f"{k}={v}" for k, v in kwargs.items())


def _interpreting() -> bool:
    import os

    return os.environ.get("TRITON_INTERPRET", "0") == "1"


# ---------------------------------------------------------------------------------------------
# The torch op trace

ALLOC_OPS = frozenset({"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"})
ALLOWED_OPS = ALLOC_OPS | frozenset({
    # other factories and fills: no information about the inputs flows into them
    "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
    "new_full", "scalar_tensor", "arange", "fill_", "zero_",
    # views and aliasing
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "t", "transpose",
    "permute", "expand", "slice", "select", "unsqueeze", "squeeze", "unbind", "split",
    "split_with_sizes", "chunk", "narrow", "alias", "detach", "unfold", "view_as_real",
    "view_as_complex", "diagonal", "movedim", "lift_fresh", "set_", "resolve_conj",
    "resolve_neg", "_conj", "_neg_view",
    # copies (into the candidate's own buffers) and scalar reads
    "copy_", "_to_copy", "clone", "lift_fresh_copy", "_copy_from", "_copy_from_and_resize",
    "_local_scalar_dense", "record_stream", "is_pinned", "_has_compatible_shallow_copy_type",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
})


# Allowed ops that may copy a device's values into host memory (`host_read`).
HOST_READ_OPS = frozenset({"_local_scalar_dense", "_to_copy", "copy_", "_copy_from",
                           "_copy_from_and_resize"})


def host_read(name: str, args: Any, out: Any) -> str | None:
    """What an allowed copy op reads of a device's floating-point values into host memory
    (`x.cpu()`, `x.item()`, `cpu_buffer.copy_(x)`, `x.tolist()`), as "op: N dtype values", or
    None where it reads none. A candidate's host code needs the shapes of its tensors, not
    their values: what it reads of them it can compute an answer from. Integer and bool
    tensors are left out (indices and lengths size launches)."""
    src = dst = None
    if name == "_local_scalar_dense":
        src = args[0] if args else None
    elif name == "_to_copy":
        src, dst = (args[0] if args else None), out
    elif name == "copy_":
        dst, src = (args[0], args[1]) if len(args) > 1 else (None, None)
    elif name in ("_copy_from", "_copy_from_and_resize"):
        src, dst = (args[0], args[1]) if len(args) > 1 else (None, None)
    if not isinstance(src, torch.Tensor) or src.device.type == "cpu" or \
            not (src.is_floating_point() or src.is_complex()):
        return None
    if dst is not None and (not isinstance(dst, torch.Tensor) or dst.device.type != "cpu"):
        return None
    return f"{name}: {src.numel()} {str(src.dtype).replace('torch.', '')} values"


class OpTrace(TorchDispatchMode):
    """Records the torch ops run while active. `violations` holds compute ops (op names);
    `reference_calls` the ops that ran inside the case's reference function; `host_reads` the
    copies of a device's floating-point values into host memory (`host_read`). With `poison`,
    every tensor from an allocation op is filled with NaN (floats) or the dtype's minimum."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Otherwise torch wraps __torch_dispatch__ in a dynamo guard whose first call imports
        # torch._dynamo: seconds per worker, plus triton before TRITON_INTERPRET is honoured,
        # plus a rebinding of torch.manual_seed that the tamper watch would report.
        return False

    def __init__(self, reference_code: tuple[str, str], poison: bool,
                 paused: Callable[[], bool] = lambda: False, seal: Seal | None = None) -> None:
        super().__init__()
        self.reference_code = reference_code
        self.poison = poison
        self.paused = paused
        self.seal = seal
        self.violations: list[str] = []
        self.reference_calls: list[str] = []
        self.host_reads: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kernel = custom_op_kernel(func, args, kwargs or {})
        if kernel is not None:
            # Torch hands the mode an operator whole: what runs inside it would be unseen. Its
            # implementation is Python, so it runs here under this trace (the mode is off inside
            # this method: entered again), judged as if the candidate had called it itself.
            with self:
                return kernel(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        out = func(*args, **(kwargs or {}))
        seal = self.seal
        if seal is not None and seal.busy:  # the gate's own restores, replays and poison
            return out
        if self.paused():
            return out
        if name not in ALLOWED_OPS:
            self.violations.append(name)
            if self._inside_reference():
                self.reference_calls.append(name)
            return out
        if self.poison and name in ALLOC_OPS and isinstance(out, torch.Tensor) and out.numel():
            poison_(out)
        if name in HOST_READ_OPS:
            read = host_read(name, args, out)
            if read is not None:
                self.host_reads.append(read)
        if seal is not None and not seal.launching:
            seal.observe(name, func, args, kwargs or {}, out)
        return out

    def _inside_reference(self) -> bool:
        """Whether the case's reference function is among the callers of the op being
        dispatched. Unlike `gate.interpdeps.in_kernel`, the same walk, it goes through every
        frame and compares each file name resolved: torch's own layers may stand deep between
        the reference and the op, and `reference_code` holds its file's resolved path."""
        file, name = self.reference_code
        return code_on_stack(sys._getframe(2), lambda code: code.co_name == name
                             and str(Path(code.co_filename).resolve()) == file)


# torch.library.custom_op's records, taken before candidate code loads: an operator's
# `CustomOpDef` holds the Python functions registered as its kernels.
_CUSTOM_OP_DEF = _custom_ops.CustomOpDef
_CUSTOM_OP_DEFS = _custom_ops.OPDEFS


def custom_op_kernel(func: Any, args: Any, kwargs: Any) -> Callable[..., Any] | None:
    """The Python function that `torch.library.custom_op` (or `register_kernel`) made the
    kernel of the operator `func` for the device its tensor arguments are on, the device-type
    kernel or else the default one, as the dispatcher picks; None where there is none: an
    operator defined otherwise (aten's, one of a compiled extension, a `torch.library.Library`
    registration) is not looked into, and its arguments on more than one accelerator. Whatever
    is returned is Python that a candidate could call itself: run under the op trace, it is
    judged as such (the records it is found in may be the candidate's to edit)."""
    opdef = _CUSTOM_OP_DEFS.get(getattr(func, "_name", None) or "")
    if type(opdef) is not _CUSTOM_OP_DEF or opdef._opoverload is not func:
        return None
    devices = set()
    for leaf in _pytree.tree_leaves((args, kwargs)):
        if isinstance(leaf, torch.Tensor):
            devices.add(leaf.device.type)
        elif isinstance(leaf, torch.device):
            devices.add(leaf.type)
    accelerators = devices - {"cpu"}
    if len(accelerators) > 1:
        return None
    device = next(iter(accelerators)) if accelerators else "cpu" if devices else None
    kernels = opdef._backend_fns
    kernel = kernels.get(device) if device in kernels else kernels.get(None)
    kernel = (lazy_dynamo_wrapped(kernel) or [kernel])[-1]  # the wrapper only imports torch._dynamo
    return kernel if callable(kernel) else None


def poison_(t: torch.Tensor) -> None:
    """Fill `t` with a value no correct kernel leaves behind: NaN, or the dtype's minimum."""
    if t.is_floating_point() or t.is_complex():
        t.fill_(float("nan"))
    elif t.dtype != torch.bool:
        t.fill_(torch.iinfo(t.dtype).min)


# ---------------------------------------------------------------------------------------------
# The sealed call

# Allowed ops that write into an argument (name -> the destination's position) and those that
# return a copy of their first argument: what host code does with its inputs before a launch.
SEAL_WRITE_OPS = {"copy_": 0, "fill_": 0, "zero_": 0, "_copy_from": 1, "_copy_from_and_resize": 1}
SEAL_COPY_OPS = frozenset({"_to_copy", "clone", "lift_fresh_copy"})
# Ops that make a new tensor of the candidate's (sealed from then on, `Seal.adopt`).
SEAL_NEW_OPS = ALLOC_OPS | frozenset({"zeros", "zeros_like", "new_zeros", "ones", "ones_like",
                                       "new_ones", "full", "full_like", "new_full"})


@dataclass(slots=True)
class _Sealed:
    tensor: torch.Tensor
    real: torch.Tensor  # its bytes (uint8, flat) while a kernel of the candidate runs, masked
    # between launches (`masked`)
    ptr: int  # its storage's address
    is_input: bool
    masked: bool = False  # `real` is masked under the seal's current key
    poisoned: bool = False  # holds the poison the seal wrote (until host code writes into it)
    made: bool = False  # made during the call (allocated there, a host copy): not the
    # candidate's state across calls
    before: torch.Tensor | None = None  # a buffer of the candidate's from before the call: its
    # bytes when first sealed, put back after the call where the call's set comes again (`again`)


def _seal_off(keep: Any) -> None:
    """In a sealed launch's forked child, before the launch: its only way back to the parent is
    `keep` (the seal's shared mapping). Every other writable shared mapping (an anonymous
    `mmap`, shared memory) becomes a private copy of itself; the descriptors the child inherits
    are closed, its standard streams going to the null device (a pipe or file made before the
    fork, or a stream redirected into one); and the audit hook refuses candidate code the
    other ways out (`AuditGuard.isolate`)."""
    import ctypes  # noqa: PLC0415
    import mmap  # noqa: PLC0415

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    anchor = ctypes.c_char.from_buffer(keep)
    kept_at = ctypes.addressof(anchor)
    del anchor
    with open("/proc/self/maps", "rb") as maps:
        lines = maps.read().decode("ascii", "replace").splitlines()
    for line in lines:
        fields = line.split()
        low, high = (int(v, 16) for v in fields[0].split("-"))
        perms = fields[1]
        if perms[1] != "w" or perms[3] != "s" or low <= kept_at < high:
            continue
        data = ctypes.string_at(low, high - low)
        prot = mmap.PROT_READ | mmap.PROT_WRITE | (mmap.PROT_EXEC if perms[2] == "x" else 0)
        fixed = 0x10  # MAP_FIXED (Linux)
        if libc.mmap(low, high - low, prot, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | fixed, -1, 0) != low:
            raise OSError(ctypes.get_errno(), "a shared mapping could not be made private")
        ctypes.memmove(low, data, high - low)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    guard = AuditGuard._installed
    if guard is not None:
        guard.isolate(sys._getframe(1))


class SealBreach(RuntimeError):
    """Raised from a launch of the sealed call that the seal refuses to open (`Seal.breach`)."""


def _hold_signals() -> Any:
    """While a sealed launch's window is open, Python's signal handlers are deferred: each
    one set is replaced by one that notes the signal (Python runs handlers in the main thread
    whichever thread the signal reached, so masking signals in one thread does not hold them
    back). (handlers, signals noted) for `_release_signals`; None off the main thread, where
    handlers cannot be set."""
    import signal  # noqa: PLC0415
    import threading  # noqa: PLC0415

    if threading.current_thread() is not threading.main_thread():
        return None
    held: dict[int, Any] = {}
    noted: list[int] = []
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
            if callable(handler):
                signal.signal(sig, lambda signum, frame: noted.append(signum))
                held[sig] = handler
        except (ValueError, OSError, RuntimeError):
            continue
    return held, noted


def _release_signals(state: Any) -> None:
    """The handlers back, then each signal noted meanwhile handled (on poison, after the
    window)."""
    if state is None:
        return
    import signal  # noqa: PLC0415

    held, noted = state
    for sig, handler in held.items():
        signal.signal(sig, handler)
    for sig in noted:
        held[sig](sig, None)


def _local_keys() -> Callable[[], tuple[int, int]]:
    """Keys for a seal without a parent to hold them (in-process use): each window's pair,
    chained, kept here."""
    import secrets  # noqa: PLC0415

    chain = [secrets.randbits(63)]

    def keys() -> tuple[int, int]:
        current, chain[0] = chain[0], secrets.randbits(63)
        return current, chain[0]

    return keys


class Seal:
    """The sealed call: every floating-point input holds poison (NaN) except while one of the
    candidate's own kernels runs, so that an answer computed by host code between launches
    (NumPy, Python lists, raw memory, torch out of the op trace's sight) is computed from
    poison. Integer and bool inputs (indices, lengths, masks) are left as they are: host code
    may size its launches from them, and no sentinel is safe to read for every kernel.

    Host copies of the inputs (`x.contiguous()`, `x.to(dtype)`, `empty_like` + `copy_`) are
    poison too when they are made; the op trace reports each allowed copy whose source shares
    storage with an input or an earlier copy, and each fill / copy into such a copy
    (`observe`). At a launch (`launch`), after the inputs' real values are restored, the copies
    recorded since the last launch are replayed in order and their real values kept; after it,
    each copy's values are kept as the kernel left them (a kernel may write into a copy of an
    input) and every sealed tensor holds poison again, also when the launch raised. A copy the
    op trace does not see (a thread, a forked child, NumPy, ctypes) is not replayed.

    The candidate's own buffers, of every dtype, are sealed as well: each one the op trace sees
    it allocate during the call (`adopt`) and each tensor passed to one of its launches
    (allocated before the call too, or wrapping NumPy memory), as a whole storage. So what a
    kernel writes (a copy of the inputs among it, also as integer bits) is poison to host code
    between launches too (an integer buffer holds its dtype's minimum, a bool one True); it is
    kept, restored at the next launch and for the outputs. Host code that writes into such a
    buffer between launches, traced or not, keeps what it wrote; host code that reads a
    kernel's result between launches (a count to size the next grid) reads poison. With `again`
    (a call whose set comes again), the buffers from before the call hold after it what they
    held when first sealed (`outputs`).

    The real values the seal keeps are themselves out of host code's reach: between launches
    each is masked (its bytes XOR a pad drawn from a key, `heldcompare.xor_pad_`); `keys()`
    gives each window the key they are masked under and a fresh one to mask them under after
    it (the worker asks the parent, which alone keeps the chain, `gate.runner`), and the keys
    are dropped when the window closes. The inputs' real values may arrive masked already
    (`masked`: the bytes of each floating-point input in order, masked under the chain's first
    key, the inputs themselves holding poison), so that they never exist in the clear in the
    worker while candidate code can run.

    While a launch's window is open no candidate code may run beside it: Python's signal
    handlers are deferred (a handler runs after the window, on poison), the cyclic garbage
    collector is off and whatever the seal lets go of is let go after the poison (a finalizer
    or weakref callback of candidate code runs on poison), and `check` (the
    worker's, called as the window opens and before it closes) names a reason to refuse, e.g.
    a thread of the candidate's alive or the gate's code tampered with; the first reason is
    kept in `breach` (the worker rejects the call), and a window refused as it opens raises
    `SealBreach` without restoring anything.

    The gate's own ops run with `busy` set: the op trace neither checks, poisons nor records
    them. Every torch function used is one of `Captured`'s, bound before candidate code loaded.
    Slotted: no instance attribute can shadow a method.
    """

    __slots__ = ("cap", "busy", "launching", "launches", "replayed", "entries", "pending", "ptrs",
                 "breach", "check", "keys", "input_ptrs", "graveyard", "written", "again",
                 "tensor_types")

    def __init__(self, inputs: tuple[Any, ...], cap: Captured,
                 check: Callable[[], tuple[str, str] | None] | None = None,
                 keys: Callable[[], tuple[int, int]] | None = None,
                 masked: list[torch.Tensor] | None = None, again: bool = False) -> None:
        self.cap = cap
        # torch's tensors, and the gate's own stand-in for a tensor on the emulated GPU
        # (`hostview.target_tensors`: host code of the emulate tier copies out of and into those)
        from gate.hostview import target_tensor_type  # noqa: PLC0415

        self.tensor_types = (cap.tensor_type, target_tensor_type())
        self.again = again
        self.busy = False
        self.launching = 0
        self.launches = 0
        self.replayed = 0  # host copies replayed
        self.entries: list[_Sealed] = []
        self.pending: list[tuple[Any, tuple[Any, ...], dict[str, Any], torch.Tensor, bool]] = []
        self.ptrs: set[int] = set()
        self.breach: tuple[str, str] | None = None  # (failure kind value, reason)
        self.written = 0  # launches that left an input other than it was (`_mask`)
        self.check = check
        self.keys = keys if keys is not None else _local_keys()
        # what the gate lets go of while a window is open, let go once the inputs hold poison
        # again: a finalizer or weakref callback of candidate code on it runs then
        self.graveyard: list[Any] = []
        # every input's storage: those not sealed (integers, bools) stay as they are
        self.input_ptrs = {self._ptr(x) for x in inputs if type(x) is cap.tensor_type and x.numel()}
        sealed = [x for x in inputs if self.sealable(cap, x)]
        if masked is not None and len(masked) != len(sealed):
            raise ValueError(f"{len(masked)} masked values for {len(sealed)} sealed inputs")
        for i, x in enumerate(sealed):
            self._add(x, is_input=True, real=None if masked is None else masked[i])

    @staticmethod
    def sealable(cap: Captured, t: Any) -> bool:
        """Whether `t` is sealed as an input: a non-empty floating-point or complex tensor."""
        return type(t) is cap.tensor_type and t.numel() > 0 and \
            (cap.is_floating_point(t) or cap.is_complex(t))

    def _ptr(self, t: torch.Tensor) -> int:
        return self.cap.storage_ptr(self.cap.untyped_storage(t))

    @staticmethod
    def kept_bytes(cap: Captured, t: torch.Tensor) -> torch.Tensor:
        """A copy of `t`'s values as flat bytes (in its logical order), zero-padded to whole
        32-bit words: masked on a GPU by the gate's one allowed kernel
        (`heldcompare.xor_pad_`), not by torch's random and bitwise kernels, which the kernel
        attribution of the sealed call would name as foreign."""
        flat = cap.view(cap.contiguous(t), -1).view(torch.uint8)
        kept = torch.zeros(-(-flat.numel() // 4) * 4, dtype=torch.uint8, device=t.device)
        cap.copy_(kept[:flat.numel()], flat)
        return kept

    def _bytes(self, t: torch.Tensor) -> torch.Tensor:
        return self.kept_bytes(self.cap, t)

    def _plain(self, t: torch.Tensor) -> torch.Tensor:
        """`t` as torch's own tensor over the same memory (a stand-in for an emulated GPU's
        tensor says it lives on `cuda`; the seal's own ops run where the memory is)."""
        return t if type(t) is self.cap.tensor_type else t.as_subclass(self.cap.tensor_type)

    def _same_view(self, a: torch.Tensor, b: torch.Tensor) -> bool:
        """Whether `a` and `b` are one view of the same memory (the same tensor, or the same
        view through another Python object: `_plain`)."""
        return a is b or (a.data_ptr() == b.data_ptr() and a.dtype == b.dtype
                          and tuple(a.shape) == tuple(b.shape) and a.stride() == b.stride())

    def _add(self, t: torch.Tensor, *, is_input: bool, real: torch.Tensor | None = None,
             made: bool = False) -> None:
        t = self._plain(t)
        ptr = self._ptr(t)
        masked = real is not None
        before = self._bytes(t) if self.again and not (is_input or made) else None
        self.entries.append(_Sealed(t, real if masked else self._bytes(t), ptr, is_input, masked,
                                    made=made, before=before))
        self.ptrs.add(ptr)

    def _tracked(self, value: Any) -> bool:
        return type(value) in self.tensor_types and value.numel() > 0 and \
            self._ptr(value) in self.ptrs

    def _whole(self, t: torch.Tensor) -> torch.Tensor:
        """A tensor of `t`'s dtype over the whole of its storage."""
        storage = self.cap.untyped_storage(t)
        whole = torch.empty(0, dtype=t.dtype, device=t.device)
        return whole.set_(storage, 0, (storage.nbytes() // t.element_size(),))

    def adopt(self, values: Iterable[Any], made: bool = False) -> None:
        """The candidate's own tensors among `values` (not sealed yet), of any dtype (a kernel
        may store a float's bits as integers), are sealed from now on, each as its whole
        storage, with the values they hold now; `made`: allocated during the call."""
        fresh = [v for v in values if type(v) in self.tensor_types and v.numel() > 0
                 and not self._tracked(v) and self._ptr(v) not in self.input_ptrs]
        if not fresh:
            return
        busy, self.busy = self.busy, True
        try:
            for v in fresh:
                if not self._tracked(v):
                    self._add(self._whole(self._plain(v)), is_input=False, made=made)
        finally:
            self.busy = busy

    def _sync(self) -> None:
        if self.cap.synchronize is not None:
            self.cap.synchronize()

    def _poison(self, spare: Callable[[_Sealed], bool] | None = None) -> None:
        for e in self.entries:
            if spare is not None and spare(e):
                continue
            if self.cap.is_floating_point(e.tensor) or self.cap.is_complex(e.tensor):
                self.cap.fill_(e.tensor, float("nan"))
            elif e.tensor.dtype == torch.bool:
                self.cap.fill_(e.tensor, True)
            else:
                self.cap.fill_(e.tensor, torch.iinfo(e.tensor.dtype).min)
            e.poisoned = True

    def _between_launches(self, work: Callable[[], None]) -> None:
        """`work` done by the gate (not traced as the candidate's) with the device idle on
        both sides."""
        self.busy = True
        try:
            self._sync()
            work()
            self._sync()
        finally:
            self.busy = False

    def seal(self) -> None:
        """Before the call: the inputs' real values are kept, poison written in."""
        self._between_launches(self._poison)

    def observe(self, name: str, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                out: Any) -> None:
        """An allowed op of the candidate's host code (from the op trace): a copy out of a
        sealed tensor, or a write into one, is recorded for replay at the next launch; a
        buffer it allocates is sealed (`adopt`)."""
        if name in SEAL_NEW_OPS:
            self.adopt([out], made=True)
            return
        position = SEAL_WRITE_OPS.get(name)
        if position is not None:
            dest = args[position] if len(args) > position else None
            if type(dest) not in self.tensor_types or not dest.numel():
                return
            sources = [*args, *kwargs.values()]
            if not any(self._tracked(a) for a in sources):
                return
            self.pending.append((func, args, kwargs, dest, False))
            self.ptrs.add(self._ptr(dest))
        elif name in SEAL_COPY_OPS and args and self._tracked(args[0]) and \
                type(out) in self.tensor_types and out.numel():
            self.pending.append((func, args, kwargs, out, True))
            self.ptrs.add(self._ptr(out))

    def _holds_poison(self, t: torch.Tensor) -> bool:
        """Whether `t` holds the poison `_poison` wrote: on a GPU, the fill's bytes throughout,
        counted by the gate's own kernel (`heldcompare.holds_fill`; torch's reductions would
        read as foreign kernels, and a copy to the host costs seconds a GiB); else on the
        host, NaN / True / the minimum throughout."""
        from gate.heldcompare import holds_fill  # noqa: PLC0415

        floating = self.cap.is_floating_point(t) or self.cap.is_complex(t)
        value = float("nan") if floating else True if t.dtype == torch.bool else \
            torch.iinfo(t.dtype).min
        if t.device.type != "cpu":
            found = holds_fill(t, value)
            if found is not None:
                return found
            t = self.cap.cpu(t)
        if floating:
            return bool(torch.isnan(t).all())
        if t.dtype == torch.bool:
            return bool(t.all())
        return bool((t == value).all())

    def _put(self, e: _Sealed, kept: torch.Tensor | None = None) -> None:
        """`e`'s kept bytes (in the clear; or `kept`, bytes of its size) into its tensor."""
        n = e.tensor.numel() * e.tensor.element_size()
        kept = e.real if kept is None else kept
        self.cap.copy_(e.tensor, self.cap.view(kept[:n].view(e.tensor.dtype), e.tensor.shape))

    def _keep(self, e: _Sealed) -> None:
        """`e`'s tensor as it is now into its kept bytes (in the clear), in place where they
        fit: a sealed call holds one copy of each sealed tensor, however many launches."""
        cap = self.cap
        now = cap.view(cap.contiguous(e.tensor), -1).view(torch.uint8)
        if e.real.numel() == -(-now.numel() // 4) * 4 and e.real.device == now.device:
            cap.copy_(e.real[:now.numel()], now)
            e.real[now.numel():].zero_()
        else:
            self.graveyard.append(e.real)
            e.real = self._bytes(e.tensor)
        e.masked = False

    def _restore(self, key: int) -> None:
        """Real values into every sealed tensor (its kept bytes unmasked under `key`, in
        place), then the host copies recorded since. A buffer of the candidate's sealed since
        the last window, or that no longer holds the poison (host code wrote into it,
        untraced), has its current contents as its value."""
        from gate.heldcompare import xor_pad_  # noqa: PLC0415

        for i, e in enumerate(self.entries):
            if not e.is_input and (not e.masked or e.poisoned and not self._holds_poison(e.tensor)):
                self._keep(e)  # sealed since the last window, or written by host code since
            elif e.masked:
                xor_pad_(e.real, key, i)
                e.masked = False
            self._put(e)
            e.poisoned = False
        pending, self.pending = self.pending, []
        self.graveyard.append(pending)
        for func, args, kwargs, dest, returns_copy in pending:
            if returns_copy:
                self.cap.copy_(dest, func(*args, **kwargs))
            else:
                func(*args, **kwargs)
            self.replayed += 1
            if not any(self._same_view(e.tensor, dest) for e in self.entries):
                self._add(dest, is_input=False, made=True)

    def _mask(self, key: int) -> None:
        """Every entry's kept bytes masked under `key` (in place): an input's as they were (a
        launch that left one otherwise, in host memory, is counted in `written`), a buffer's as the kernel left
        it (a kernel may write into a copy of an input); then poison."""
        from gate.heldcompare import xor_pad_  # noqa: PLC0415

        cap = self.cap
        changed = False
        for i, e in enumerate(self.entries):
            if not e.is_input:
                self._keep(e)
            elif not e.masked and e.tensor.device.type == "cpu":
                # as the kernel left it: it may not write into its inputs (on the host tiers;
                # torch's comparison on a GPU would read as a foreign kernel)
                now = cap.view(cap.contiguous(e.tensor), -1).view(torch.uint8)
                changed = changed or not cap.equal(now, e.real[:now.numel()])
            if not e.masked:
                xor_pad_(e.real, key, i)
                e.masked = True
        self.written += changed
        self._poison()

    def isolated(self, launch: Callable[[], Any], args: Iterable[Any] = ()) -> Any:
        """Run `launch` (an interpreted launch, inside its window) in a forked child and bring
        back only what its kernel wrote to memory: the contents of every sealed tensor and of
        every tensor among `args`, through a shared mapping. The interpreter runs a kernel's
        body as Python in the process; a body that keeps what it loads in a Python object (a
        list of its module, an attribute of a constexpr argument) keeps it in the child, which
        ends with the launch; so does an emulated CUDA kernel that writes where no tensor of
        the call is (a buffer passed as a raw pointer, a `__device__` global). The child's
        exception, if any, is raised here (as a RuntimeError naming it); its return value
        comes back where it pickles in 4000 bytes (else None)."""
        import mmap  # noqa: PLC0415

        cap = self.cap
        targets: dict[int, torch.Tensor] = {e.ptr: e.tensor for e in self.entries}
        for v in args:
            if type(v) in self.tensor_types and v.numel() and self._ptr(v) not in targets:
                targets[self._ptr(v)] = self._whole(self._plain(v))
        views = [t for t in targets.values() if t.device.type == "cpu"]
        sizes = [t.numel() * t.element_size() for t in views]
        # each view's bytes start on a 16-byte boundary (a byte slice is viewed as its dtype)
        slots = [-(-n // 16) * 16 for n in sizes]
        shared = mmap.mmap(-1, max(1, sum(slots)) + 4096)
        self._sync()

        parent_pid = os.getpid()

        def end(reason: str) -> None:  # in the child: candidate code beside the kernel
            message = reason[:4000].encode("utf-8", "replace")
            shared[:4 + len(message)] = len(message).to_bytes(4, "little") + message
            os._exit(windowwatch.BREACH_EXIT)

        # what comes back, as it is before the fork: a fork hook of the candidate's (one of C
        # too, which the window watch's profile function does not see) may not write into it
        busy, self.busy = self.busy, True
        try:
            forked = [self._bytes(t) for t in views]
        finally:
            self.busy = busy
        windowwatch.arm(end)
        try:
            pid = os.fork()
        finally:
            if os.getpid() == parent_pid:
                windowwatch.disarm()
        if pid == 0:  # the child: the launch, then its memory out, then nothing else
            code = 0
            self.busy = True
            for t, kept in zip(views, forked):
                if not cap.equal(self._bytes(t), kept):
                    end("a fork hook of the candidate's wrote into a tensor of a sealed launch "
                        "(os.register_at_fork runs it in the launch's process, its inputs' "
                        "real values in memory)")
            self.busy = False
            del forked
            try:
                # one thread: the parent's OpenMP pool is not in the child (a parallel op
                # would wait for it forever)
                torch.set_num_threads(1)
                _seal_off(shared)
                value = launch()
                try:
                    kept = pickle.dumps(value)
                except Exception:  # noqa: BLE001 — not brought back
                    kept = pickle.dumps(None)
                if len(kept) <= 4000:
                    shared[:4 + len(kept)] = len(kept).to_bytes(4, "little") + kept
                flat = torch.frombuffer(shared, dtype=torch.uint8)
                offset = 4096
                for t, n, slot in zip(views, sizes, slots):
                    flat[offset:offset + n].copy_(self._bytes(t)[:n])  # kept bytes are whole words
                    offset += slot
            except BaseException as exc:  # noqa: BLE001 — reported to the parent
                message = f"{type(exc).__name__}: {exc}"[:4000].encode("utf-8", "replace")
                shared[:4 + len(message)] = len(message).to_bytes(4, "little") + message
                code = 1
            os._exit(code)
        del forked
        _, status = os.waitpid(pid, 0)
        try:
            if os.waitstatus_to_exitcode(status) == windowwatch.BREACH_EXIT:
                size = int.from_bytes(shared[:4], "little")
                what = shared[4:4 + size].decode("utf-8", "replace")
                if self.breach is None:
                    self.breach = ("host_compute", what)
                raise SealBreach(what)
            if os.waitstatus_to_exitcode(status) != 0:
                size = int.from_bytes(shared[:4], "little")
                what = shared[4:4 + size].decode("utf-8", "replace") if size else \
                    f"the launch's process ended with status {status}"
                raise RuntimeError(f"interpreted launch failed: {what}")
            flat = torch.frombuffer(shared, dtype=torch.uint8)
            offset = 4096
            busy, self.busy = self.busy, True
            try:
                for t, n, slot in zip(views, sizes, slots):
                    cap.copy_(t, cap.view(flat[offset:offset + n].view(t.dtype), t.shape))
                    offset += slot
            finally:
                self.busy = busy
            del flat
            size = int.from_bytes(shared[:4], "little")
            return pickle.loads(shared[4:4 + size]) if size else None
        finally:
            shared.close()

    def _checked(self) -> bool:
        """Whether the window may open (or closes) with nothing of the candidate's beside it;
        the first reason to refuse goes into `breach`."""
        found = self.check() if self.check is not None else None
        if found is not None and self.breach is None:
            self.breach = found
        return found is None

    def launch(self, args: Iterable[Any] = ()) -> Any:
        """Context of one launch: real values in before it, poison back after it; tensors
        among the launch's `args` are sealed first (`adopt`)."""
        if self.launching:  # a launch inside a launch (a launcher over the driver's call)
            return contextlib.nullcontext()
        seal = self

        @contextlib.contextmanager
        def window() -> Any:
            if not seal._checked():
                raise SealBreach(f"the gate refused to open a sealed launch: {seal.breach[1]}")
            deferred = _hold_signals()
            collecting = gc.isenabled()
            gc.disable()  # no finalizer of candidate code runs inside the window
            try:
                seal.adopt(args)
                key, fresh = seal.keys()
                seal._between_launches(lambda: seal._restore(key))
                seal.launching += 1
                try:
                    yield
                finally:
                    seal.launching -= 1
                    seal.launches += 1
                    seal._checked()
                    seal._between_launches(lambda: seal._mask(fresh))
                    del key, fresh
            finally:
                seal.graveyard.clear()
                if collecting:
                    gc.enable()
                _release_signals(deferred)

        return window()

    def outputs(self, out: Any) -> Any:
        """After the call: the outputs as the candidate left them, where a sealed tensor is an
        output (or part of one) with its real values (copies recorded since the last launch
        replayed), cloned. The inputs and what the call made hold poison again after; the
        candidate's buffers from before the call (a table it keeps from call to call) hold
        their real values: the call is over, and an honest kernel reads them in the next.
        What such a buffer may hold of this call's inputs tells host code nothing it can use
        where the call's set never comes again (the sealed call's). Where it does (`again`: the
        configuration calls, each configuration in turn on one set), each such buffer holds
        what it held when the call first sealed it instead: what the call's kernels wrote
        there (its answer, a copy of its inputs) would otherwise be in the clear to host code
        at the next call on the same set. An honest kernel leaves such a buffer as it found it
        anyway where it keeps a table (made in the calls before) or resets its own counters."""
        cap = self.cap
        items = out if isinstance(out, (tuple, list)) else (out,)
        self.busy = True
        collecting = gc.isenabled()
        try:
            self._sync()
            ptrs = {self._ptr(t) for t in items if type(t) is cap.tensor_type and t.numel()}
            gc.disable()
            # the last window of the call (nothing is masked again), asked for always: the
            # parent counts one key per launch and this one
            key, _ = self.keys()
            kept_state = any(not (e.is_input or e.made) for e in self.entries)
            if self.pending or kept_state or ptrs & {e.ptr for e in self.entries}:
                self._restore(key)
            del key
            kept = [cap.clone(t) if type(t) is cap.tensor_type else t for t in items]
            self._poison(spare=lambda e: not (e.is_input or e.made))
            for e in self.entries:
                if e.before is not None:
                    self._put(e, e.before)
                    self.graveyard.append(e.before)
                    e.before = None
            self._sync()
        finally:
            self.busy = False
            self.graveyard.clear()
            if collecting:
                gc.enable()
        return tuple(kept) if isinstance(out, (tuple, list)) else kept[0]
