"""Test-session set-up.

On a machine without a GPU, Triton kernels can only run in its interpreter, and Triton reads
TRITON_INTERPRET when `triton.language` is first imported. Anything may import triton first
(torch._dynamo does, and torch imports it for a Parameter made on the meta device), so the
interpreter is switched on for the whole session before any test module is imported. Gate
workers set or clear the variable themselves for their tier, so the gate is unaffected.
"""
from __future__ import annotations

import os


def _gpu() -> bool:
    try:
        import torch  # noqa: PLC0415

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


if not _gpu():
    os.environ.setdefault("TRITON_INTERPRET", "1")
