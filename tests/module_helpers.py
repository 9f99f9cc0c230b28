"""Test helpers: import kernel source text as a fresh module (Triton's jit reads a file);
run a compile script on it outside the interpreter."""
from __future__ import annotations

import importlib.util
import itertools
import os
import subprocess
import sys
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


def compiled_output(script: str, source: str, where: Path, name: str) -> str:
    """What `script` prints when run as `python -c script <file of source> <name>` in a process
    without Triton's interpreter (a compile for a GPU target there keeps the interpreter's
    patches out); the run must succeed."""
    path = where / f"{name}.py"
    path.write_text(source)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", script, str(path), name], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
