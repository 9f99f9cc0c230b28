"""Cases: the workloads the gate checks candidates against (`experts/<case>/case.py`, any case
folder, or a KernelBench-style problem file).

A `Case` holds a case module's data (shapes, tolerances, experts) read from its source without
importing it, so the gate's parent process never needs torch; the module itself (reference,
`make_inputs`) is imported only where it runs: in the gate's worker process. A problem file
(`gate.kernelbench`) is the exception: its sizes are found by executing it, so loading one
imports torch.

A case's identity is its path-resolved module; `Case.ref` is the string that finds it again
from any working directory (what lineages and JSON records keep).
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

from kir.errors import BadInputError

REPO_ROOT = Path(__file__).resolve().parent.parent
EXPERTS_DIR = REPO_ROOT / "experts"
# Case modules are imported from the gate's checker threads (check_many); reentrant because a
# case module may itself load another case.
_IMPORT_LOCK = threading.RLock()
_REQUIRED = ("NAME", "SHAPES", "SMALL_SHAPES", "TOLERANCE")
_FUNCTIONS = ("make_inputs", "reference")


@dataclass(frozen=True, slots=True)
class Case:
    """One workload. `shapes` (device tier) and `small_shapes` (interpret tier) map a variant
    name to its shape parameters, each with a "dtype"; `tolerance` maps a dtype name to the
    largest relative-norm error allowed. `has_compare` says the module defines its own
    `compare(out, ref, inputs) -> float` error, which the gate then uses instead of the norm.
    `bench_shapes` are benchmark-only variants: the gate's checks never run them; a view made
    by `with_variants` runs them at the device tier (what `klineage bench` times)."""

    name: str
    path: Path
    description: str
    platform: str
    reference_name: str
    shapes: Mapping[str, Mapping[str, Any]]
    small_shapes: Mapping[str, Mapping[str, Any]]
    tolerance: Mapping[str, float]
    experts: tuple[tuple[str, str], ...]
    has_compare: bool
    start: str | None = None
    """A held-out case's naive start kernel (the module's optional `START`), relative to its folder."""
    problem: bool = False
    """True for a KernelBench-style problem file (`gate.kernelbench`), False for a case module."""
    bench_shapes: Mapping[str, Mapping[str, Any]] = field(
        default_factory=lambda: MappingProxyType({}))
    """Benchmark-only variants (the module's optional `BENCH_SHAPES`), named apart from `shapes`."""
    variants: tuple[str, ...] = ()
    """The variants the device tier runs, drawn from `shapes` and `bench_shapes` (a view made by
    `with_variants`); empty: every variant of `shapes`."""
    allclose: tuple[float, float] | None = None
    """(atol, rtol): the case's correctness check is `torch.allclose(ref, out, atol, rtol)` on
    every output (KernelBench's own check, a problem file's), in place of `tolerance`."""

    @property
    def device_shapes(self) -> Mapping[str, Mapping[str, Any]]:
        """The variants the device tier runs, in order: `variants` when set, else `shapes`."""
        if not self.variants:
            return self.shapes
        table = {**self.shapes, **self.bench_shapes}
        return MappingProxyType({v: table[v] for v in self.variants})

    def with_variants(self, names: Sequence[str]) -> Case:
        """This case with its device tier running `names` (variants of `shapes` or
        `bench_shapes`, in the order given); the other tiers are unchanged. Raises
        `BadInputError` for an unknown name or an empty selection."""
        known = [*self.shapes, *self.bench_shapes]
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            missing = ", ".join(unknown) or "(none given)"
            raise BadInputError(f"case {self.name}: no variant {missing} (known: {', '.join(known)})")
        return replace(self, variants=tuple(dict.fromkeys(names)))

    @property
    def ref(self) -> str:
        """The string `load_case` resolves to this case from any working directory: the name of
        a case under experts/, else the path relative to the repository when it lies in it,
        else the absolute path."""
        if self.path == (EXPERTS_DIR / self.path.parent.name / "case.py").resolve() and not self.problem:
            return self.path.parent.name
        target = self.path.parent if self.path.name == "case.py" else self.path
        try:
            return str(target.relative_to(REPO_ROOT))
        except ValueError:
            return str(target)

    def start_path(self) -> Path | None:
        """Absolute path of the start kernel, when the case names one."""
        return self.folder / self.start if self.start else None

    @property
    def folder(self) -> Path:
        return self.path.parent

    def expert_paths(self) -> list[tuple[Path, str]]:
        """(absolute path, language) of each expert kernel the case lists."""
        return [(self.folder / f, lang) for f, lang in self.experts]

    def tolerance_for(self, dtype: str) -> float:
        """The tolerance of a dtype name ("fp16"...); the loosest one when it is not listed."""
        if dtype in self.tolerance:
            return float(self.tolerance[dtype])
        return float(max(self.tolerance.values()))

    def check_text(self) -> str:
        """How the gate compares a candidate's outputs with the reference's, in words (what a
        verdict's correctness reports as its `check`)."""
        if self.allclose is not None:
            atol, rtol = self.allclose
            return (f"KernelBench's check: torch.allclose(ref, out, atol={atol:g}, rtol={rtol:g}) "
                    f"on every output")
        if self.has_compare:
            return "the case's own compare(out, ref, inputs) error <= its tolerance by dtype"
        return "relative-norm error ||out - ref|| / ||ref|| <= the case's tolerance by dtype"

    def digest(self) -> str:
        """sha256 of the case module's text (part of the verdict cache key); for a problem file,
        of the file and its adapter."""
        if self.problem:
            from gate import kernelbench  # noqa: PLC0415

            return kernelbench.digest(self.path)
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    def module(self) -> ModuleType:
        """Import the case module (this imports torch). Loaded once per process."""
        return import_case_module(self.path)


def import_case_module(path: Path) -> ModuleType:
    """Import a case.py by path under a private module name, once per process and text of the
    file (a file edited since is imported again: a process that gates many runs never judges
    against a case's earlier text; thread-safe: a second thread waits for the first to finish
    executing the module, never sees it half-loaded).
    A KernelBench-style problem file gives its synthesized case module (`gate.kernelbench`)."""
    path = path.resolve()
    if _is_problem(path):
        from gate import kernelbench  # noqa: PLC0415

        return kernelbench.problem_module(path)
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise BadInputError(f"{path}: cannot be read as a case module: {exc.strerror}") from None
    name = "klineage_case_" + hashlib.sha256(str(path).encode() + b"\0" + text).hexdigest()[:12]
    with _IMPORT_LOCK:
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise BadInputError(f"{path}: cannot be imported as a case module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception:
            del sys.modules[name]
            raise
        return module


def _is_problem(path: Path) -> bool:
    from gate import kernelbench  # noqa: PLC0415

    return path.name != "case.py" and kernelbench.is_problem_file(path)


def _resolve(name_or_path: str | Path) -> Path:
    """The case.py or problem file meant by a name under experts/, a case folder, a case.py or
    problem-file path (relative to the working directory, else to the repository root)."""
    given = Path(name_or_path).expanduser()
    for candidate in [given] if given.is_absolute() else [given, REPO_ROOT / given]:
        if candidate.suffix == ".py" and candidate.is_file():
            return candidate.resolve()
        if candidate.is_dir() and (candidate / "case.py").is_file():
            return (candidate / "case.py").resolve()
        by_name = EXPERTS_DIR / str(name_or_path) / "case.py"
        if candidate is given and len(given.parts) == 1 and by_name.is_file():
            return by_name.resolve()
    if given.is_dir():
        raise BadInputError(f"{name_or_path}: folder holds no case.py")
    if given.suffix == ".py" and not given.exists():
        raise BadInputError(f"{name_or_path}: no such file")
    known = ", ".join(list_cases()) or "none"
    raise BadInputError(f"unknown case '{name_or_path}' (known: {known}; or give a case folder, "
                        f"its case.py, or a KernelBench problem file)")


def _literals(path: Path) -> tuple[dict[str, Any], set[str]]:
    """Module-level literal assignments and the names of top-level functions."""
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as exc:
        raise BadInputError(f"{path}: case module does not parse: {exc}") from None
    values: dict[str, Any] = {}
    functions: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef):
            functions.add(stmt.name)
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        for target in targets:
            if isinstance(target, ast.Name) and target.id.isupper():
                try:
                    values[target.id] = ast.literal_eval(value)
                except ValueError:
                    pass  # computed at import time: read it from the imported module below
    return values, functions


def load_case(name_or_path: str | Path | Case) -> Case:
    """The case named `name_or_path` under experts/, the case at a folder / case.py path, or
    the case synthesized from a KernelBench problem file (a `Case` is returned as it is).

    Raises `BadInputError` for an unknown name or a module that lacks the contract's fields.
    """
    if isinstance(name_or_path, Case):
        return name_or_path
    path = _resolve(name_or_path)
    if _is_problem(path):
        return _problem_case(path)
    values, functions = _literals(path)
    if any(k not in values for k in _REQUIRED) or any(f not in functions for f in _FUNCTIONS):
        # Not plain literals, or functions it imports: fall back to importing it (needs torch).
        module = import_case_module(path)
        values.update({k: getattr(module, k) for k in dir(module) if k.isupper()})
        functions.update(k for k in ("make_inputs", "reference", "compare") if hasattr(module, k))
    missing = [k for k in _REQUIRED if k not in values] + [f for f in _FUNCTIONS if f not in functions]
    if missing:
        raise BadInputError(f"{path}: not a case module (missing {', '.join(missing)})")
    tolerance = values["TOLERANCE"]
    if not isinstance(tolerance, dict) or not tolerance:
        raise BadInputError(f"{path}: TOLERANCE must map dtype names to errors")

    def frozen(table: Any, what: str) -> Mapping[str, Mapping[str, Any]]:
        if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
            raise BadInputError(f"{path}: {what} must map variant names to shape dicts")
        return MappingProxyType({k: MappingProxyType(dict(v)) for k, v in table.items()})

    shapes = frozen(values["SHAPES"], "SHAPES")
    bench = frozen(values.get("BENCH_SHAPES", {}), "BENCH_SHAPES")
    if clash := sorted(set(shapes) & set(bench)):
        raise BadInputError(f"{path}: BENCH_SHAPES reuses the SHAPES variant name(s) "
                            f"{', '.join(clash)}")
    return Case(
        name=str(values["NAME"]), path=path, description=str(values.get("DESCRIPTION", "")),
        platform=str(values.get("PLATFORM", "cuda")),
        reference_name=str(values.get("REFERENCE_NAME", "reference")),
        shapes=shapes,
        small_shapes=frozen(values["SMALL_SHAPES"], "SMALL_SHAPES"),
        tolerance=MappingProxyType({str(k): float(v) for k, v in tolerance.items()}),
        experts=tuple((str(f), str(lang)) for f, lang in values.get("EXPERTS", ())),
        has_compare="compare" in functions,
        start=str(values["START"]) if values.get("START") else None,
        bench_shapes=bench,
    )


_PROBLEMS: dict[tuple[str, str], Case] = {}


def _problem_case(path: Path) -> Case:
    """The `Case` of a KernelBench problem file (described once per file content)."""
    from gate import kernelbench  # noqa: PLC0415

    key = (str(path), kernelbench.digest(path))
    with _IMPORT_LOCK:
        if key not in _PROBLEMS:
            fields = kernelbench.describe(path)
            table = {k: MappingProxyType(dict(v)) for k, v in fields["SHAPES"].items()}
            small = fields["SMALL_SHAPES"]  # derived on first use (`kernelbench.SmallShapes`)
            if not isinstance(small, kernelbench.SmallShapes):
                small = MappingProxyType({k: MappingProxyType(dict(v)) for k, v in small.items()})
            _PROBLEMS[key] = Case(
                name=fields["NAME"], path=path, description=fields["DESCRIPTION"],
                platform=fields["PLATFORM"], reference_name=fields["REFERENCE_NAME"],
                shapes=MappingProxyType(table), small_shapes=small,
                tolerance=MappingProxyType(dict(fields["TOLERANCE"])), experts=(),
                has_compare=False, start=_problem_start(path), problem=True,
                allclose=fields["ALLCLOSE"])
        return _PROBLEMS[key]


def case_beside(kernel: str | Path) -> str:
    """The case a kernel file lies beside, for a command given no `--case`: the folder of a
    `case.py` next to it, else the problem file `<stem>.py` next to a `<stem>_triton.py` (the
    start kernel `klineage cases` names for a problem file). Raises `BadInputError` (one line)
    where there is neither."""
    path = Path(kernel).expanduser().resolve()
    if (path.parent / "case.py").is_file():
        return str(path.parent)
    stem = path.stem
    if stem.endswith("_triton"):
        problem = path.with_name(stem.removesuffix("_triton") + ".py")
        if problem.is_file() and _is_problem(problem):
            return str(problem)
    raise BadInputError(f"{kernel}: no --case given, and none lies beside it (a case.py in its "
                        f"folder, or a problem file <stem>.py beside <stem>_triton.py); name one "
                        f"with --case (see `klineage cases`)")


def _problem_start(path: Path) -> str | None:
    """A problem file's start kernel: `<stem>_triton.py` beside it, when there is one."""
    start = path.with_name(f"{path.stem}_triton.py")
    return start.name if start.is_file() else None


def find_cases(roots: list[Path]) -> list[Path]:
    """Case modules (`*/case.py`) and KernelBench problem files found under each root (a
    folder, searched recursively, or a file), sorted, each once. Start kernels beside a case are
    not cases; a problem file is a .py with `Model` and `get_inputs` at top level."""
    found: set[Path] = set()
    for root in roots:
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for f in files:
            if "__pycache__" in f.parts:
                continue
            if f.name == "case.py" or _is_problem(f):
                found.add(f.resolve())
    return sorted(found)


def scan_cases(roots: list[Path], progress: Any = None) -> tuple[list[Case], list[tuple[Path, str]]]:
    """Load every case `find_cases(roots)` finds, going on past the ones that do not load:
    (the cases loaded, [(path, one-line reason)] of the others). A .py under a root that does not
    parse is among the others (it may be a problem file with a typo). `progress(i, n, path,
    reason or None)` is called after each file."""
    found = find_cases(roots)
    refused: list[tuple[Path, str]] = []
    for root in roots:
        for f in ([root] if root.is_file() else sorted(root.rglob("*.py"))):
            if "__pycache__" not in f.parts and f.resolve() not in found and (why := _unparsable(f)):
                refused.append((f.resolve(), f"{f}: does not parse as Python ({why})"))
    cases: list[Case] = []
    for i, path in enumerate(found, 1):
        try:
            cases.append(load_case(path))
            reason = None
        except BadInputError as exc:
            reason = str(exc)
        except Exception as exc:  # a case module that fails to import: its own code's error
            text = " ".join(str(exc).split())[:300]
            reason = f"{path}: case module fails to import ({type(exc).__name__}: {text})"
        if reason is not None:
            refused.append((path, reason))
        if progress is not None:
            progress(i, len(found), path, reason)
    return cases, sorted(refused)


def _unparsable(path: Path) -> str | None:
    """Why a .py does not parse (None when it does)."""
    try:
        ast.parse(path.read_text(), filename=str(path))
    except (SyntaxError, ValueError) as exc:
        return " ".join(str(exc).split())
    except (UnicodeDecodeError, OSError) as exc:
        return type(exc).__name__
    return None


def list_cases() -> list[str]:
    """Names of the cases under experts/ (folders holding a case.py), sorted."""
    if not EXPERTS_DIR.is_dir():
        return []
    return sorted(p.parent.name for p in EXPERTS_DIR.glob("*/case.py"))
