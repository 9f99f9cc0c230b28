"""Cases: the workloads the gate checks candidates against (`experts/<case>/case.py`).

A `Case` holds a case module's data (shapes, tolerances, experts) read from its source without
importing it, so the gate's parent process never needs torch; the module itself (reference,
`make_inputs`) is imported only where it runs: in the gate's worker process.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

from kir.errors import BadInputError

EXPERTS_DIR = Path(__file__).resolve().parent.parent / "experts"
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
    `compare(out, ref, inputs) -> float` error, which the gate then uses instead of the norm."""

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

    def digest(self) -> str:
        """sha256 of the case module's text (part of the verdict cache key)."""
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    def module(self) -> ModuleType:
        """Import the case module (this imports torch). Loaded once per process."""
        return import_case_module(self.path)


def import_case_module(path: Path) -> ModuleType:
    """Import a case.py by path under a private module name, once per process (thread-safe: a
    second thread waits for the first to finish executing the module, never sees it half-loaded)."""
    path = path.resolve()
    name = "klineage_case_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
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


def _resolve(name_or_path: str | Path) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix == ".py" and candidate.is_file():
        return candidate.resolve()
    if candidate.is_dir() and (candidate / "case.py").is_file():
        return (candidate / "case.py").resolve()
    by_name = EXPERTS_DIR / str(name_or_path) / "case.py"
    if by_name.is_file():
        return by_name.resolve()
    known = ", ".join(list_cases()) or "none"
    raise BadInputError(f"unknown case '{name_or_path}' (known: {known}; or give a case folder)")


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


def load_case(name_or_path: str | Path) -> Case:
    """The case named `name_or_path` under experts/, or the case at a folder / case.py path.

    Raises `BadInputError` for an unknown name or a module that lacks the contract's fields.
    """
    path = _resolve(name_or_path)
    values, functions = _literals(path)
    if any(k not in values for k in _REQUIRED):
        # Not plain literals: fall back to importing the module (needs torch).
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

    return Case(
        name=str(values["NAME"]), path=path, description=str(values.get("DESCRIPTION", "")),
        platform=str(values.get("PLATFORM", "cuda")),
        reference_name=str(values.get("REFERENCE_NAME", "reference")),
        shapes=frozen(values["SHAPES"], "SHAPES"),
        small_shapes=frozen(values["SMALL_SHAPES"], "SMALL_SHAPES"),
        tolerance=MappingProxyType({str(k): float(v) for k, v in tolerance.items()}),
        experts=tuple((str(f), str(lang)) for f, lang in values.get("EXPERTS", ())),
        has_compare="compare" in functions,
    )


def list_cases() -> list[str]:
    """Names of the cases under experts/ (folders holding a case.py), sorted."""
    if not EXPERTS_DIR.is_dir():
        return []
    return sorted(p.parent.name for p in EXPERTS_DIR.glob("*/case.py"))
