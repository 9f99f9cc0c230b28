"""KernelBench-style problem files as cases.

A problem file is a Python module with `class Model(nn.Module)`, `get_inputs()` and
`get_init_inputs()` (the KernelBench format). `problem_module(path)` synthesizes from it a case
module with the contract of docs/INTERFACES.md ("Case modules"):

- reference(*inputs) = `Model(*get_init_inputs())(*inputs)`;
- make_inputs(shape, seed, device): `get_inputs()` and the Model built under
  `torch.manual_seed(seed)`, tensors moved to `device`; the Model's parameters (in
  `named_parameters()` order) then its buffers (in `named_buffers()` order) follow the
  problem's inputs as extra trailing inputs, so a kernel's `run(*inputs, *params, *buffers)`
  sees them; the reference applies the Model with exactly those tensors;
- SHAPES: one variant, "default", holding the file's size globals and the dtype of its first
  floating input. A size global is a module-level name whose value, once the file has run, is
  an integer or a (nested) tuple or list of integers, whatever expression wrote it
  (`M = 1024 * 2`, `input_shape = (batch_size, 3, 224)`, `height = width = 64`); tuples are
  given as lists. A shape runs the file with its values in place of those it was written with:
  a global written as a literal (or the literal elements of a tuple or list display) takes the
  shape's value; one computed from other names (`groups = in_channels`) is computed again;
- SMALL_SHAPES (interpret tier): the file's `get_small_inputs()` (with
  `get_small_init_inputs()` when it defines one) if it has one; otherwise sizes derived on
  first use, never when only the static or device tier is asked for (`SmallShapes`);
- TOLERANCE by dtype (`TOLERANCE` below), kept for case-module compatibility; the correctness
  check of a problem is KernelBench's own (`ALLCLOSE`).

Small sizes are found by trying: the literal size globals of at least `MIN_REDUCIBLE` are all
divided by one common power of two, the smallest that fits, then the largest is halved one at
a time; a size at which the file's `get_inputs()`, `Model(...)` or the Model's forward raises
is never used (its constraints, e.g. channels divisible by groups, are the Model's own). A
size fits when the inputs and Model tensors hold at most `SMALL_ELEMENTS` elements and the
outputs at most `SMALL_OUTPUT_ELEMENTS`. A file for which none fits still loads; using its
SMALL_SHAPES raises `BadInputError`, one line naming the file and the reason. The outcome is
kept on disk (the gate's cache folder, under the file's path and digest) for later processes.

Loading a problem file executes it (imports torch); the sizes are measured on the meta device,
so the file's real sizes are never allocated here; only a fitting small size runs for real.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from kir.errors import BadInputError

# Relative-norm error by dtype (the table a case module has; a problem file is checked by
# ALLCLOSE instead).
TOLERANCE = {"fp32": 2e-3, "fp16": 5e-3, "bf16": 1e-2}
ALLCLOSE = (1e-2, 1e-2)
"""(atol, rtol) of KernelBench's correctness check: `torch.allclose(ref, out, atol, rtol)` on
every output."""
SMALL_ELEMENTS = 1 << 15
SMALL_OUTPUT_ELEMENTS = 1 << 17
MIN_REDUCIBLE = 16
MAX_TRIES = 96  # size trials per file before the search gives up
META_FORWARD_S = 2.0  # a forward slower than this on the meta device is not used to check sizes
_REQUIRED = ("Model", "get_inputs", "get_init_inputs")
_DTYPE_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}
_LITERAL_NODES = (ast.Constant, ast.BinOp, ast.UnaryOp, ast.Tuple, ast.List, ast.operator,
                  ast.unaryop, ast.expr_context)
_LOCK = threading.RLock()
_MODULES: dict[tuple[str, str], ModuleType] = {}
_SMALL: dict[tuple[str, str], SmallShapes] = {}

Slot = tuple[str, tuple[int, ...]]
"""A reducible size: a size global's name and the index path of one integer inside its value."""


def is_problem_file(path: Path) -> bool:
    """True when `path` parses and defines a `Model` class and `get_inputs` at top level."""
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
        return False
    names = _top_level_names(tree)
    return "Model" in names and "get_inputs" in names


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
    return names


# -- where the sizes are written ---------------------------------------------------------------
def _pairs(target: ast.expr, value: ast.expr | None) -> list[tuple[str, ast.expr | None]]:
    """(name, the expression it is given or None where no one expression is) of an assignment
    target: `a, b = 1, 2` pairs a with 1 and b with 2; `a, b = f()` gives both None."""
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if isinstance(target, (ast.Tuple, ast.List)):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) \
                and not any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts)):
            return [p for t, v in zip(target.elts, value.elts) for p in _pairs(t, v)]
        return [(n.id, None) for n in ast.walk(target) if isinstance(n, ast.Name)]
    return []


def _writes(stmt: ast.stmt) -> list[tuple[str, ast.expr | None]]:
    """The module-level names one top-level statement binds, each with its expression."""
    if isinstance(stmt, ast.Assign):
        return [p for t in stmt.targets for p in _pairs(t, stmt.value)]
    if isinstance(stmt, ast.AnnAssign):
        return _pairs(stmt.target, stmt.value) if stmt.value is not None else []
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [(stmt.name, None)]
    return [(n.id, None) for n in ast.walk(stmt)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def _is_literal(node: ast.expr) -> bool:
    """An expression of constants only (`1024 * 2`, `(224, 224)`, `[1024] * 4`)."""
    return all(isinstance(n, _LITERAL_NODES) for n in ast.walk(node))


def _is_size(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, (tuple, list)) and 0 < len(value) <= 64 and all(_is_size(v) for v in value)


def _plain(value: Any) -> Any:
    """A size value as JSON holds it (tuples as lists)."""
    return [_plain(v) for v in value] if isinstance(value, (tuple, list)) else int(value)


def _constant(new: Any, old: Any) -> ast.expr:
    """The literal of a size value `new`, a tuple where the value it replaces was one."""
    if isinstance(new, (list, tuple)):
        olds = list(old) if isinstance(old, (list, tuple)) and len(old) == len(new) else [None] * len(new)
        elts = [_constant(n, o) for n, o in zip(new, olds)]
        return ast.Tuple(elts=elts, ctx=ast.Load()) if isinstance(old, tuple) else ast.List(elts=elts, ctx=ast.Load())
    return ast.Constant(int(new))


def _override(node: ast.expr, new: Any, old: Any) -> ast.expr:
    """`node` (the expression a size global was written with) rewritten to give `new`: literal
    parts take the new values, parts computed from names stay as written."""
    if _is_literal(node):
        return _constant(new, old)
    if isinstance(node, (ast.Tuple, ast.List)) and isinstance(new, (list, tuple)) \
            and isinstance(old, (list, tuple)) and len(new) == len(old) == len(node.elts):
        return type(node)(elts=[_override(e, n, o) for e, n, o in zip(node.elts, new, old)], ctx=ast.Load())
    return node


def _literal_paths(node: ast.expr, value: Any, path: tuple[int, ...] = ()) -> list[tuple[int, ...]]:
    """Index paths of the integers of `value` that `node` writes as literals."""
    if _is_literal(node):
        if isinstance(value, (list, tuple)):
            return [p for i, v in enumerate(value) for p in _literal_paths(ast.Constant(0), v, (*path, i))]
        return [path]
    if isinstance(node, (ast.Tuple, ast.List)) and isinstance(value, (list, tuple)) \
            and len(value) == len(node.elts):
        return [p for i, (e, v) in enumerate(zip(node.elts, value)) for p in _literal_paths(e, v, (*path, i))]
    return []


def _get(sizes: Mapping[str, Any], slot: Slot) -> int:
    value = sizes[slot[0]]
    for i in slot[1]:
        value = value[i]
    return int(value)


def _set(sizes: dict[str, Any], slot: Slot, new: int) -> None:
    name, path = slot
    if not path:
        sizes[name] = new
        return
    value = sizes[name] = _plain(sizes[name])
    for i in path[:-1]:
        value = value[i]
    value[path[-1]] = new


class Problem:
    """A problem file's source and where its size globals are written: runs it at any sizes.

    `sizes` are the file's own (SHAPES "default" without dtype); `slots` the literal integers
    among them, the ones a search may change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.tree = ast.parse(path.read_text(), filename=str(path))
        except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
            raise BadInputError(f"{path}: problem file does not parse: {exc}") from None
        missing = [n for n in _REQUIRED if n not in _top_level_names(self.tree)]
        if missing:
            raise BadInputError(f"{path}: not a KernelBench problem file (missing {', '.join(missing)})")
        written: dict[str, list[ast.expr | None]] = {}
        for stmt in self.tree.body:
            for name, node in _writes(stmt):
                written.setdefault(name, []).append(node)
        # A global written once, by an expression we can see, can be given another value.
        self.written = {n: nodes[0] for n, nodes in written.items() if len(nodes) == 1 and nodes[0] is not None}
        import torch  # noqa: PLC0415

        try:
            with torch.device("meta"):
                ns = self.execute({})
        except ModuleNotFoundError as exc:  # a package the problem imports is not installed
            raise BadInputError(f"{path}: problem file imports {exc.name!r}, which is not installed "
                                f"here (pip install {str(exc.name).split('.')[0]})") from None
        except Exception as exc:  # the user's code: any failure is a bad problem file
            raise BadInputError(f"{path}: problem file fails to run ({_one_line(exc)})") from None
        self.values = {n: getattr(ns, n) for n in written if _is_size(getattr(ns, n, None))}
        self.sizes = {n: _plain(v) for n, v in self.values.items()}
        self.slots: list[Slot] = [(n, p) for n, node in self.written.items() if n in self.values
                                  for p in _literal_paths(node, self.values[n])]

    def tree_at(self, sizes: Mapping[str, Any]) -> ast.Module:
        """The file's tree with each overridable size global re-assigned the value of `sizes`
        right after the statement that wrote it."""
        body: list[ast.stmt] = []
        for stmt in self.tree.body:
            body.append(stmt)
            if not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                continue
            for name, node in _writes(stmt):
                if name in sizes and node is not None and self.written.get(name) is node \
                        and _plain(sizes[name]) != self.sizes.get(name):
                    expr = _override(node, sizes[name], self.values[name])
                    body.append(ast.Assign(targets=[ast.Name(name, ast.Store())], value=expr))
        return ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))

    def execute(self, sizes: Mapping[str, Any]) -> SimpleNamespace:
        """Run the file at `sizes` (its own where a size is not given); its namespace."""
        namespace: dict[str, Any] = {"__name__": "klineage_problem", "__file__": str(self.path)}
        code = compile(self.tree_at(sizes) if sizes else self.tree, str(self.path), "exec")
        exec(code, namespace)  # noqa: S102 — the user's problem file
        return SimpleNamespace(**namespace)

    def resolved(self, sizes: Mapping[str, Any]) -> dict[str, Any]:
        """The size globals the file holds once run at `sizes` (those computed from others
        follow them)."""
        import torch  # noqa: PLC0415

        with torch.device("meta"):
            ns = self.execute(sizes)
        return {n: _plain(getattr(ns, n)) for n in self.sizes if _is_size(getattr(ns, n, None))}

    def dtype(self) -> str:
        """The dtype name of the first floating input (else of the Model's tensors; fp32 when
        none floats), built on the meta device at the file's own sizes."""
        import torch  # noqa: PLC0415

        inputs, model = _built_meta(self, {})
        tensors = _tensors(inputs) + _model_tensors(model)
        floating = [t for t in _tensors(inputs) if t.is_floating_point()] or \
            [t for t in tensors if t.is_floating_point()]
        return _DTYPE_NAMES.get(str(floating[0].dtype).removeprefix("torch."), "fp32") if floating else "fp32"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


# -- small sizes -------------------------------------------------------------------------------
class _Trial:
    """What one size set does: `fits` (builds, runs, small enough), or the elements it holds
    when it builds (`held`, the Model's own share `model`) or the error when it does not."""

    def __init__(self, fits: bool = False, held: int | None = None, model: int = 0,
                 error: str | None = None) -> None:
        self.fits, self.held, self.model, self.error = fits, held, model, error


class SizeSearch:
    """The small-size search of the module docstring over one `Problem`."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.tries = 0
        self.meta_forward = False  # check the forward on the meta device (`_probe_forward`)
        self.last_error: str | None = None

    def find(self) -> dict[str, Any]:
        """Small sizes for the file; `BadInputError` (one line) when none is found."""
        base = dict(self.problem.sizes)
        first = self.trial(base)
        if first.fits:
            return base
        if first.held is None:
            self._refuse(f"it fails to build or run at its own sizes ({first.error})")
        slots = [s for s in self.problem.slots if _get(base, s) >= MIN_REDUCIBLE]
        best, best_trial = base, first
        factor = 2
        while slots and self.tries < MAX_TRIES:
            scaled = dict(base)
            for slot in slots:
                _set(scaled, slot, max(1, _get(base, slot) // factor))
            trial = self.trial(scaled)
            if trial.fits:
                return scaled
            if trial.held is not None:
                if trial.held >= best_trial.held:
                    break  # dividing further reduces nothing the interpret tier counts
                best, best_trial = scaled, trial
            if all(_get(scaled, s) == 1 for s in slots):
                break
            factor *= 2
        # One size at a time, from a point whose forward runs (where the meta device can tell).
        self._probe_forward(base)
        if self.meta_forward:  # measured again, outputs included, as every trial below is
            best_trial = self.trial(best, forward=True)
            if best_trial.held is None:
                best, best_trial = base, self.trial(base, forward=True)
                if best_trial.held is None:
                    self._refuse(f"it fails to run at its own sizes ({best_trial.error})")
        current, frozen = dict(best), set()
        while self.tries < MAX_TRIES:
            open_slots = [s for s in slots if s not in frozen and _get(current, s) >= 2]
            if not open_slots:
                break
            slot = max(open_slots, key=lambda s: _get(current, s))
            halved = dict(current)
            _set(halved, slot, _get(current, slot) // 2)
            trial = self.trial(halved, forward=True)
            if trial.fits:
                return halved
            if trial.held is None or trial.held >= best_trial.held:
                frozen.add(slot)  # the Model's constraints refuse it, or it sizes nothing counted
                continue
            current = halved
            best_trial = trial
        self._refuse(self._why(best_trial))
        raise AssertionError("unreachable")

    def _probe_forward(self, sizes: dict[str, Any]) -> None:
        """Whether later trials can check the forward on the meta device: it runs there at the
        file's own sizes, within `META_FORWARD_S` (a forward without meta kernels is slow)."""
        import torch  # noqa: PLC0415

        t0 = time.perf_counter()
        try:
            inputs, model = _built_meta(self.problem, sizes)
            with torch.device("meta"), torch.no_grad():
                model(*inputs)
        except Exception:  # noqa: BLE001 — its ops have no meta kernels: not a check to use
            return
        self.meta_forward = time.perf_counter() - t0 <= META_FORWARD_S

    def _why(self, best: _Trial) -> str:
        assert best.held is not None
        if best.model > SMALL_ELEMENTS:
            return (f"its Model's parameters and buffers alone hold {best.model} elements at the "
                    f"smallest sizes it builds with (the interpret tier takes at most {SMALL_ELEMENTS})")
        tail = f"; the last reduction failed: {self.last_error}" if self.last_error else ""
        return (f"the smallest sizes it builds and runs with hold {best.held} elements (the "
                f"interpret tier takes at most {SMALL_ELEMENTS} in, {SMALL_OUTPUT_ELEMENTS} out){tail}")

    def _refuse(self, why: str) -> None:
        raise BadInputError(f"{self.problem.path}: no interpret-tier sizes: {why}; define "
                            f"get_small_inputs() (or use the static or device tier)")

    def trial(self, sizes: dict[str, Any], forward: bool = False) -> _Trial:
        """Build `sizes` on the meta device (with `forward`, run the forward there too when
        `meta_forward`); when the inputs and Model tensors fit, build and run them for real on
        the CPU."""
        import torch  # noqa: PLC0415

        self.tries += 1
        try:
            inputs, model = _built_meta(self.problem, sizes)
            held = _numel(inputs) + _numel(_model_tensors(model))
            own = _numel(_model_tensors(model))
            if held > SMALL_ELEMENTS:
                if forward and self.meta_forward:
                    with torch.device("meta"), torch.no_grad():
                        held += _numel(model(*inputs))
                return _Trial(held=held, model=own)
            with torch.no_grad():
                torch.manual_seed(0)
                inputs, model = _built(self.problem.execute(sizes), small=False)
                out = _numel(model(*inputs))
        except Exception as exc:  # the user's code: a size it cannot take
            self.last_error = _one_line(exc)
            return _Trial(error=self.last_error)
        return _Trial(fits=out <= SMALL_OUTPUT_ELEMENTS, held=held + out, model=own)


class SmallShapes(Mapping[str, Mapping[str, Any]]):
    """A problem's SMALL_SHAPES, derived on first use (thread-safe, once). Any use of a file
    that has none raises the search's `BadInputError`; `reason()` gives it without raising."""

    def __init__(self, derive: Callable[[], dict[str, Mapping[str, Any]]]) -> None:
        self._derive = derive
        self._table: dict[str, Mapping[str, Any]] | None = None
        self._error: BadInputError | None = None
        self._lock = threading.Lock()

    def table(self) -> dict[str, Mapping[str, Any]]:
        with self._lock:
            if self._table is None and self._error is None:
                try:
                    self._table = self._derive()
                except BadInputError as exc:
                    self._error = exc
        if self._error is not None:
            raise BadInputError(str(self._error))
        assert self._table is not None
        return self._table

    def reason(self) -> str | None:
        """Why the interpret tier has no sizes for this file (None when it has)."""
        try:
            self.table()
        except BadInputError as exc:
            return str(exc)
        return None

    def __getitem__(self, key: str) -> Mapping[str, Any]:
        return self.table()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.table())

    def __len__(self) -> int:
        return len(self.table())

    def __repr__(self) -> str:
        state = "not derived" if self._table is None and self._error is None else \
            repr(self._table) if self._table is not None else "none"
        return f"SmallShapes({state})"


# -- the synthesized case ---------------------------------------------------------------------
def describe(path: Path) -> dict[str, Any]:
    """The case fields of a problem file: NAME, SHAPES, SMALL_SHAPES (a `SmallShapes`: derived
    on first use, once per process and file content), TOLERANCE, ALLCLOSE and the rest.

    Raises `BadInputError` (one line naming the file) for a file that does not parse, lacks
    Model / get_inputs / get_init_inputs, or fails to run or to build its inputs and Model at
    its own sizes (on the meta device)."""
    return _fields(Problem(path))


def _fields(problem: Problem) -> dict[str, Any]:
    path = problem.path
    try:
        dtype = problem.dtype()
    except Exception as exc:  # the user's code: any failure is a bad problem file
        raise BadInputError(f"{path}: problem file fails to build its inputs or Model "
                            f"({_one_line(exc)})") from None
    small_dtype = "fp32" if dtype == "bf16" else dtype
    if "get_small_inputs" in _top_level_names(problem.tree):
        small: Mapping[str, Any] = {"default": {"inputs": "get_small_inputs", "dtype": small_dtype}}
    else:
        key = (str(path.resolve()), digest(path))
        with _LOCK:
            if key not in _SMALL:
                _SMALL[key] = SmallShapes(lambda: {"default": {**_remembered(problem, key),
                                                               "dtype": small_dtype}})
            small = _SMALL[key]
    return {
        "NAME": path.stem,
        "DESCRIPTION": f"KernelBench problem {path.name}",
        "PLATFORM": "cuda",
        "REFERENCE_NAME": "the problem's Model (torch)",
        "SHAPES": {"default": {**problem.sizes, "dtype": dtype}},
        "SMALL_SHAPES": small,
        "TOLERANCE": dict(TOLERANCE),
        "ALLCLOSE": ALLCLOSE,
        "EXPERTS": [],
    }


def _remembered(problem: Problem, key: tuple[str, str]) -> dict[str, Any]:
    """The small sizes of `problem` (`SizeSearch`), or its `BadInputError`, kept on disk under
    its path and digest (the gate's workers, one process per candidate, read them there)."""
    from gate.cache import cache_dir  # noqa: PLC0415

    name = hashlib.sha256("\n".join(key).encode()).hexdigest()
    memo = cache_dir() / "problem-sizes" / f"{name}.json"
    try:
        found = json.loads(memo.read_text())
    except (OSError, ValueError):
        found = None
    if isinstance(found, dict) and isinstance(found.get("sizes"), dict):
        return found["sizes"]
    if isinstance(found, dict) and isinstance(found.get("reason"), str):
        raise BadInputError(found["reason"])
    try:
        record: dict[str, Any] = {"sizes": problem.resolved(SizeSearch(problem).find())}
    except BadInputError as exc:
        record = {"reason": str(exc)}
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f"{memo.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, memo)
    except OSError:
        pass  # a cache that cannot be written: the next process searches again
    if "reason" in record:
        raise BadInputError(record["reason"])
    return record["sizes"]


def digest(path: Path) -> str:
    """sha256 over the problem file and this adapter (both decide the verdict)."""
    h = hashlib.sha256(path.read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()


def problem_module(path: Path) -> ModuleType:
    """The synthesized case module of a problem file (once per process and file content)."""
    path = path.resolve()
    key = (str(path), digest(path))
    with _LOCK:
        if key not in _MODULES:
            _MODULES[key] = _Synthesized(path).module()
        return _MODULES[key]


def _built(ns: SimpleNamespace, small: bool) -> tuple[list[Any], Any]:
    """(inputs, model) of an executed problem module, at its small sizes when `small` and the
    module defines `get_small_inputs`."""
    get_inputs = ns.get_inputs
    get_init = ns.get_init_inputs
    if small and hasattr(ns, "get_small_inputs"):
        get_inputs = ns.get_small_inputs
        get_init = getattr(ns, "get_small_init_inputs", get_init)
    inputs = list(get_inputs())
    model = ns.Model(*list(get_init()))
    return inputs, model


def _built_meta(problem: Problem, sizes: Mapping[str, Any]) -> tuple[list[Any], Any]:
    """`_built` of the file run at `sizes`, on the meta device; a Model whose construction
    reads values (`.item()`) cannot be built there and is built on the CPU instead (its
    parameters only, at their real size)."""
    import torch  # noqa: PLC0415

    with torch.device("meta"):
        ns = problem.execute(sizes)
        inputs = list(ns.get_inputs())
        try:
            return inputs, ns.Model(*list(ns.get_init_inputs()))
        except Exception:  # noqa: BLE001 — retried where values exist; a real failure raises again
            pass
    return inputs, ns.Model(*list(ns.get_init_inputs()))


def _tensors(values: Any) -> list[Any]:
    """The tensors of a value, a list / tuple of values or a dict's values, depth first."""
    import torch  # noqa: PLC0415

    if isinstance(values, torch.Tensor):
        return [values]
    if isinstance(values, (list, tuple)):
        return [t for v in values for t in _tensors(v)]
    if isinstance(values, dict):
        return [t for v in values.values() for t in _tensors(v)]
    return []


def _numel(values: Any) -> int:
    return sum(t.numel() for t in _tensors(values))


def _model_tensors(model: Any) -> list[Any]:
    return [p for _, p in model.named_parameters()] + [b for _, b in model.named_buffers()]


class _Synthesized:
    """State behind one synthesized case module: the executed problem module per size set and
    the Model whose parameters the latest `make_inputs` of each input signature handed out."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problem = Problem(path)
        self.fields = _fields(self.problem)
        self.namespaces: dict[str, SimpleNamespace] = {}
        self.models: dict[tuple, tuple[Any, list]] = {}
        self.lock = threading.RLock()

    def namespace(self, shape: Mapping[str, Any]) -> SimpleNamespace:
        sizes = {k: v for k, v in shape.items() if k not in ("dtype", "inputs")}
        key = repr(sorted(sizes.items()))
        if key not in self.namespaces:
            self.namespaces[key] = self.problem.execute(sizes)
        return self.namespaces[key]

    def make_inputs(self, shape: dict, seed: int, device: str) -> tuple:
        import torch  # noqa: PLC0415

        with self.lock:
            ns = self.namespace(shape)
            torch.manual_seed(seed)
            # Made where they are used: a problem's real sizes (GBs of torch.rand) take seconds
            # on the CPU and a copy to the GPU, milliseconds on the GPU itself.
            with torch.device(device):
                inputs, model = _built(ns, small=shape.get("inputs") == "get_small_inputs")
            model = model.to(device)
            if device == "cpu":
                model = model.to(torch.float32) if _has_bf16(model) else model
            moved = tuple(_to_device(v, device) for v in inputs)
            extra = tuple(t.detach() for t in _model_tensors(model))
            every = moved + extra
            self.models[_signature(every)] = (model, _slots(model))
            return every

    def reference(self, *inputs: Any) -> Any:
        import torch  # noqa: PLC0415

        with self.lock:
            found = self.models.get(_signature(inputs))
            if found is None:
                raise ValueError("reference called with inputs make_inputs did not make")
            model, slots = found
            args = inputs[:len(inputs) - len(slots)]
            _load_tensors(slots, inputs[len(inputs) - len(slots):])
            with torch.no_grad():
                return model(*args)

    def module(self) -> ModuleType:
        module = ModuleType(f"klineage_problem_{hashlib.sha256(str(self.path).encode()).hexdigest()[:12]}")
        module.__file__ = str(self.path)
        for key, value in self.fields.items():
            setattr(module, key, value)
        module.make_inputs = self.make_inputs
        module.reference = self.reference
        module.bytes_moved = self.bytes_moved
        module.flops = self.flops
        module.work = self.work
        return module

    def bytes_moved(self, shape: dict) -> float:
        """Bytes a forward at `shape` must move: the inputs and Model tensors it reads and the
        outputs it writes (`work`), a floor of any kernel's traffic; the inputs and Model
        tensors alone where the forward does not run on the meta device. (Inputs alone halved
        an elementwise problem's bytes: an RMS norm at copy speed read as 0.51 of copy.)"""
        import torch  # noqa: PLC0415

        try:
            _, read, written = self.work(shape)
            return float(read + written)
        except BadInputError:
            pass
        with self.lock, torch.device("meta"):
            inputs, model = _built(self.problem.execute(
                {k: v for k, v in shape.items() if k not in ("dtype", "inputs")}),
                small=shape.get("inputs") == "get_small_inputs")
        return float(sum(t.numel() * t.element_size() for t in _tensors(inputs) + _model_tensors(model)))

    def flops(self, shape: dict) -> float:
        """FLOPs of one forward at `shape`, as `work` counts them."""
        return self.work(shape)[0]

    def work(self, shape: dict) -> tuple[float, float, float]:
        """(FLOPs, bytes in, bytes out) of one forward of the Model at `shape`, run on the meta
        device (nothing allocated): FLOPs as torch's FLOP counter counts them (matrix products,
        convolutions, attention; elementwise work and reductions count 0), bytes in those of the
        inputs and Model tensors, bytes out those of the outputs. A forward that does not run
        on the meta device is a one-line `BadInputError`."""
        import torch  # noqa: PLC0415
        from torch.utils.flop_counter import FlopCounterMode  # noqa: PLC0415

        sizes = {k: v for k, v in shape.items() if k not in ("dtype", "inputs")}
        with self.lock, torch.device("meta"):
            try:
                inputs, model = _built(self.problem.execute(sizes),
                                       small=shape.get("inputs") == "get_small_inputs")
                with FlopCounterMode(display=False) as counter, torch.no_grad():
                    outputs = model(*inputs)
            except Exception as exc:  # noqa: BLE001 — a Model the meta device cannot run
                why = " ".join(f"{type(exc).__name__}: {exc}".split())[:160]
                raise BadInputError(f"{self.path}: its forward does not run on the meta device, "
                                    f"so no FLOP count ({why})") from None

        def nbytes(values: Any) -> float:
            return float(sum(t.numel() * t.element_size() for t in values))

        return (float(counter.get_total_flops()), nbytes(_tensors(inputs) + _model_tensors(model)),
                nbytes(_tensors(outputs)))


def _has_bf16(model: Any) -> bool:
    import torch  # noqa: PLC0415

    return any(t.dtype == torch.bfloat16 for t in _model_tensors(model))


def _to_device(value: Any, device: str) -> Any:
    import torch  # noqa: PLC0415

    if not isinstance(value, torch.Tensor):
        return value
    value = value.to(device)
    if device == "cpu" and value.dtype == torch.bfloat16:
        value = value.float()  # the Triton interpreter has no bf16
    return value


def _signature(values: tuple) -> tuple:
    import torch  # noqa: PLC0415

    return tuple((tuple(v.shape), str(v.dtype), v.device.type) if isinstance(v, torch.Tensor) else repr(v)
                 for v in values)


def _slots(model: Any) -> list[list[tuple[Any, str, str]]]:
    """Every place each of `_model_tensors(model)` sits (a shared tensor sits in several), in
    that order: [(module, attribute name, "_parameters" | "_buffers"), ...] per tensor."""
    where: dict[int, list[tuple[Any, str, str]]] = {}
    for module in model.modules():
        for table in ("_parameters", "_buffers"):
            for name, tensor in getattr(module, table).items():
                if tensor is not None:
                    where.setdefault(id(tensor), []).append((module, name, table))
    return [where[id(t)] for t in _model_tensors(model)]


def _load_tensors(slots: list[list[tuple[Any, str, str]]], tensors: tuple) -> None:
    """Put `tensors` into the Model's parameter and buffer slots (the make_inputs order)."""
    for places, tensor in zip(slots, tensors, strict=True):
        for module, name, table in places:
            getattr(module, table)[name] = tensor
