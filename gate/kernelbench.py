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
- SHAPES: one variant, "default", holding the file's integer globals (module-level
  `name = <int literal>`, `name: int = <int literal>`, or names and literals paired in one
  tuple assignment) and the dtype of its first floating input;
- SMALL_SHAPES: the file's `get_small_inputs()` (with `get_small_init_inputs()` when it
  defines one) if it has one; otherwise the integer globals >= `MIN_REDUCIBLE` are halved,
  largest first, re-executing the module each time, until the inputs and parameters hold at
  most `SMALL_ELEMENTS` elements. On the CPU (interpret tier) bf16 tensors become fp32;
- TOLERANCE by dtype (`TOLERANCE` below).

Loading a problem file executes it (imports torch); the sizes are found on the meta device,
so the file's real sizes are never allocated here.
"""
from __future__ import annotations

import ast
import hashlib
import threading
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from kir.errors import BadInputError

# Relative-norm error by dtype. fp32 allows TF32 tensor-core products (KernelBench's own
# check, atol = rtol = 1e-2, allows them too).
TOLERANCE = {"fp32": 2e-3, "fp16": 5e-3, "bf16": 1e-2}
SMALL_ELEMENTS = 1 << 15
MIN_REDUCIBLE = 16
_REQUIRED = ("Model", "get_inputs", "get_init_inputs")
_DTYPE_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
_LOCK = threading.RLock()
_MODULES: dict[tuple[str, str], ModuleType] = {}


def is_problem_file(path: Path) -> bool:
    """True when `path` parses and defines a `Model` class and `get_inputs` at top level."""
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, OSError):
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


def _int_assignments(tree: ast.Module) -> list[tuple[str, ast.Constant]]:
    """(name, literal) of each module-level integer assignment: `N = 4096`, `N: int = 4096`
    and each pair of `M, N, K = 512, 256, 384` (bools and negatives excluded)."""
    found: list[tuple[str, ast.Constant]] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        else:
            continue
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                and len(target.elts) == len(value.elts):
            pairs = list(zip(target.elts, value.elts))
        else:
            pairs = [(target, value)]
        found += [(t.id, v) for t, v in pairs
                  if isinstance(t, ast.Name) and isinstance(v, ast.Constant)
                  and type(v.value) is int and v.value >= 0]
    return found


def int_globals(tree: ast.Module) -> dict[str, int]:
    """Module-level integer assignments (`_int_assignments`), name -> value."""
    return {name: literal.value for name, literal in _int_assignments(tree)}


def _with_sizes(tree: ast.Module, sizes: dict[str, int]) -> ast.Module:
    """A copy of `tree` whose integer-global assignments take the values of `sizes`."""
    new = ast.parse(ast.unparse(tree))
    for name, literal in _int_assignments(new):
        if name in sizes:
            literal.value = sizes[name]
    return ast.fix_missing_locations(new)


def _execute(path: Path, tree: ast.Module) -> SimpleNamespace:
    namespace: dict[str, Any] = {"__name__": "klineage_problem", "__file__": str(path)}
    exec(compile(tree, str(path), "exec"), namespace)  # noqa: S102 — the user's problem file
    return SimpleNamespace(**namespace)


def _tensors(values: Any) -> list[Any]:
    import torch  # noqa: PLC0415

    return [v for v in values if isinstance(v, torch.Tensor)]


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


def _model_tensors(model: Any) -> list[Any]:
    return [p for _, p in model.named_parameters()] + [b for _, b in model.named_buffers()]


def _element_count(path: Path, tree: ast.Module, sizes: dict[str, int]) -> tuple[int, str]:
    """(elements of inputs + model tensors, dtype name) at `sizes`, found on the meta device."""
    import torch  # noqa: PLC0415

    with torch.device("meta"):
        inputs, model = _built(_execute(path, _with_sizes(tree, sizes)), small=False)
    tensors = _tensors(inputs) + _model_tensors(model)
    floating = [t for t in _tensors(inputs) if t.is_floating_point()] or [t for t in tensors if t.is_floating_point()]
    dtype = _DTYPE_NAMES.get(str(floating[0].dtype).removeprefix("torch."), "fp32") if floating else "fp32"
    return sum(t.numel() for t in tensors), dtype


def small_sizes(path: Path, tree: ast.Module, sizes: dict[str, int]) -> dict[str, int]:
    """The integer globals reduced by the rule of the module docstring."""
    current = dict(sizes)
    count, _ = _element_count(path, tree, current)
    while count > SMALL_ELEMENTS:
        reducible = [k for k, v in current.items() if v >= MIN_REDUCIBLE]
        if not reducible:
            break
        largest = max(reducible, key=lambda k: current[k])
        current[largest] //= 2
        count, _ = _element_count(path, tree, current)
    if count > SMALL_ELEMENTS:
        raise BadInputError(f"{path}: cannot find small interpret-tier sizes ({count} elements "
                            f"after halving its integer globals); define get_small_inputs()")
    return current


def describe(path: Path) -> dict[str, Any]:
    """The case fields of a problem file: NAME, SHAPES, SMALL_SHAPES, TOLERANCE and the rest.

    Raises `BadInputError` (one line naming the file) for a file that does not parse, lacks
    Model / get_inputs / get_init_inputs, or fails to build its inputs and Model."""
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise BadInputError(f"{path}: problem file does not parse: {exc}") from None
    missing = [n for n in _REQUIRED if n not in _top_level_names(tree)]
    if missing:
        raise BadInputError(f"{path}: not a KernelBench problem file (missing {', '.join(missing)})")
    sizes = int_globals(tree)
    try:
        _, dtype = _element_count(path, tree, sizes)
        if "get_small_inputs" in _top_level_names(tree):
            small: dict[str, Any] = {"inputs": "get_small_inputs"}
        else:
            small = dict(small_sizes(path, tree, sizes))
    except BadInputError:
        raise
    except Exception as exc:  # the user's code: any failure is a bad problem file
        raise BadInputError(f"{path}: problem file fails to build its inputs or Model "
                            f"({type(exc).__name__}: {exc})") from None
    small_dtype = "fp32" if dtype == "bf16" else dtype
    return {
        "NAME": path.stem,
        "DESCRIPTION": f"KernelBench problem {path.name}",
        "PLATFORM": "cuda",
        "REFERENCE_NAME": "the problem's Model (torch)",
        "SHAPES": {"default": {**sizes, "dtype": dtype}},
        "SMALL_SHAPES": {"default": {**small, "dtype": small_dtype}},
        "TOLERANCE": dict(TOLERANCE),
        "EXPERTS": [],
    }


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


class _Synthesized:
    """State behind one synthesized case module: the executed problem module per size set and
    the Model whose parameters the latest `make_inputs` of each input signature handed out."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tree = ast.parse(path.read_text(), filename=str(path))
        self.fields = describe(path)
        self.namespaces: dict[tuple, SimpleNamespace] = {}
        self.models: dict[tuple, tuple[Any, list]] = {}
        self.lock = threading.RLock()

    def namespace(self, shape: dict) -> SimpleNamespace:
        sizes = {k: int(v) for k, v in shape.items() if k not in ("dtype", "inputs")}
        key = tuple(sorted(sizes.items()))
        if key not in self.namespaces:
            self.namespaces[key] = _execute(self.path, _with_sizes(self.tree, sizes))
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
        return module

    def bytes_moved(self, shape: dict) -> float:
        """Bytes of the inputs and Model tensors at `shape` (outputs not counted: a floor)."""
        import torch  # noqa: PLC0415

        with self.lock, torch.device("meta"):
            inputs, model = _built(self.namespace(shape), small=shape.get("inputs") == "get_small_inputs")
        return float(sum(t.numel() * t.element_size() for t in _tensors(inputs) + _model_tensors(model)))


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
