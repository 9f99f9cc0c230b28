"""Test helper: import kernel source text as a fresh module (Triton's jit reads a file)."""
from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from types import ModuleType

_count = itertools.count()


def load_module(source: str, where: Path, prefix: str = "kernel") -> ModuleType:
    """A fresh module of `source`, written to a new file under `where` (jit functions need a
    file for their source)."""
    path = where / f"{prefix}_{next(_count)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
