"""`gate.interpcalls`: device-function calls in Triton's interpreter skip a patch that is in place
already, and compute exactly what they computed with it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# A helper module that sees only triton.language.core (the kernel's module sees triton.language):
# its first call inside a grid must patch that module itself.
CORE_HELPER = '''
import triton
from triton.language import core


@triton.jit
def twice(x):
    return x + x
'''

KERNEL = '''
import torch
import triton
import triton.language as tl

from core_helper import twice


@triton.jit
def _scaled(x, s):
    return x * s


@triton.jit
def rowsum_kernel(x_ptr, out_ptr, N, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(STEPS):
        x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)
        acc += _scaled(x, i + 1.0)
    acc = twice(acc)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def run(x, steps=6):
    out = torch.empty(x.shape[0], dtype=torch.float32)
    rowsum_kernel[(x.shape[0],)](x, out, x.shape[1], STEPS=steps, BLOCK=32)
    return out
'''

# Runs the kernel twice in a fresh process, with `install` first or not (argv[1]), and prints the
# outputs, how many patches were applied and whether triton.language is itself again afterwards.
DRIVER = '''
import json, sys
import torch
import triton.language as tl
from triton.runtime import interpreter as interp

count = {"n": 0}
original = interp._patch_lang


def counted(fn):
    count["n"] += 1
    return original(fn)


interp._patch_lang = counted
from gate import interpcalls

installed = interpcalls.install() and interpcalls.install() if sys.argv[1] == "on" else None
import kernel

x = torch.randn(5, 27, generator=torch.Generator().manual_seed(0))
outs = [kernel.run(x) for _ in range(2)]
print(json.dumps({
    "installed": installed, "patches": count["n"], "outs": [o.tolist() for o in outs],
    "right": torch.allclose(outs[0], 2 * (x * 21.0).sum(1), rtol=1e-5, atol=1e-4),
    "restored": bool(tl.core.is_builtin(tl.load) and tl.core.is_builtin(tl.tensor.__add__)),
}))
'''


def _run(tmp_path: Path, mode: str) -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-c", DRIVER, mode], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_helper_calls_skip_a_patch_in_place_and_compute_the_same(tmp_path: Path) -> None:
    (tmp_path / "core_helper.py").write_text(textwrap.dedent(CORE_HELPER))
    (tmp_path / "kernel.py").write_text(textwrap.dedent(KERNEL))
    plain, fast = _run(tmp_path, "off"), _run(tmp_path, "on")
    assert fast["installed"] is True, fast
    assert plain["right"] and fast["right"], (plain, fast)
    assert fast["outs"] == plain["outs"], (plain, fast)  # bit for bit
    # Without it: one patch per launch and one per device-function call (6 x _scaled, twice,
    # tl.zeros and tl.sum, in each of 5 programs). With it: each launch's own patch, and the
    # first call that sees triton.language.core alone (its patch stays, as the interpreter
    # leaves it).
    assert plain["patches"] >= 2 * (1 + 5 * 9), plain
    assert fast["patches"] <= 2 + 1, fast
    # Each launch's own patch is still undone when its grid has run.
    assert plain["restored"] and fast["restored"], (plain, fast)
