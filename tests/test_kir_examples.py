"""The shipped example kernels (experts/examples/) are valid Triton whose run() computes a @ b.

Runs in a subprocess under the Triton CPU interpreter (TRITON_INTERPRET=1 must be set before
triton is imported), at small fp32 shapes.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from test_kir_support import EXAMPLES

SCRIPT = """
import sys
sys.path.insert(0, {examples!r})
import torch
import matmul_naive, matmul_tiled
torch.manual_seed(0)
a, b = torch.randn(70, 48), torch.randn(48, 40)
ref = a @ b
for mod in (matmul_naive, matmul_tiled):
    out = mod.run(a, b)
    err = ((out - ref).norm() / ref.norm()).item()
    assert out.shape == ref.shape and err < 1e-4, (mod.__name__, err)
print("ok")
"""


def test_examples_compute_matmul_in_the_interpreter():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(examples=str(EXAMPLES))],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok"
