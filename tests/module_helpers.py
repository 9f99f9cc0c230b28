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
from typing import Any

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


def compiled_output(script: str, source: str, where: Path, name: str, *args: str) -> str:
    """What `script` prints when run as `python -c script <file of source> <name> [args]` in a
    process without Triton's interpreter (a compile for a GPU target there keeps the
    interpreter's patches out); the run must succeed."""
    path = where / f"{name}.py"
    path.write_text(source)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", script, str(path), name, *args],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


_SM90 = r"""
import importlib.util, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction
spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
ask = json.loads(sys.argv[3])
jit = getattr(module, ask["kernel"])
while not isinstance(jit, JITFunction):  # under an autotuner or heuristics
    jit = jit.fn
consts = ask["constexprs"]
signature = {n: ask["pointers"] if n.endswith("_ptr") else "constexpr" if n in consts else "i32"
             for n in jit.arg_names}
attrs = {(jit.arg_names.index(n),): [["tt.divisibility", 16]] for n in jit.arg_names if n not in consts}
kernel = triton.compile(ASTSource(fn=jit, signature=signature, constexprs=consts, attrs=attrs),
                        target=GPUTarget("cuda", 90, 32), options=ask["options"])
print(json.dumps({"ptx": kernel.asm["ptx"], "shared": kernel.metadata.shared,
                  "num_warps": kernel.metadata.num_warps, "cubin": kernel.asm["cubin"].hex()}))
"""


def compiled_for_sm90(source: str, where: Path, name: str, kernel: str, constexprs: dict,
                      *, pointers: str = "*fp16", num_warps: int = 4, num_stages: int = 3) -> dict:
    """{"ptx", "shared", "num_warps", "cubin" (hex)} of jit function `kernel` of `source`
    compiled for sm_90 (in a process of its own, `compiled_output`) as its launcher specializes
    it at large aligned sizes: `constexprs` (the tiles, unit strides), parameters named `*_ptr`
    of type `pointers`, every other one a 32-bit integer divisible by 16."""
    import json  # noqa: PLC0415

    ask = {"kernel": kernel, "constexprs": constexprs, "pointers": pointers,
           "options": {"num_warps": num_warps, "num_stages": num_stages}}
    return json.loads(compiled_output(_SM90, source, where, name, json.dumps(ask)))


def applied_at_its_site(rule: Any, ir: Any) -> Any:
    """`rule.optimize` at the one site of `ir` it finds not present (the test's kernel has
    exactly one), asserted to apply; its `Applied` result."""
    from passes.base import Applied  # noqa: PLC0415

    sites = [s for s in rule.sites(ir) if not s.present]
    assert len(sites) == 1, sites
    result = rule.optimize(ir, sites[0])
    assert isinstance(result, Applied), result
    return result


def refused_at_its_site(rule: Any, ir: Any) -> str:
    """Why `rule.optimize` refuses at the one site of `ir` it finds not present (the test's
    kernel has exactly one), asserted to refuse."""
    from passes.base import Skipped  # noqa: PLC0415

    sites = [s for s in rule.sites(ir) if not s.present]
    assert len(sites) == 1, sites
    result = rule.optimize(ir, sites[0])
    assert isinstance(result, Skipped), result
    return result.reason
