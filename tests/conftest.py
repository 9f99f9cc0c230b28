"""Test-session set-up.

On a machine without a GPU, Triton kernels can only run in its interpreter, and Triton reads
TRITON_INTERPRET when `triton.language` is first imported. Anything may import triton first
(torch._dynamo does, and torch imports it for a Parameter made on the meta device), so the
interpreter is switched on for the whole session before any test module is imported. Gate
workers set or clear the variable themselves for their tier, so the gate is unaffected.
"""
from __future__ import annotations

import os

import pytest


def _gpu() -> bool:
    try:
        import torch  # noqa: PLC0415

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


_HAS_GPU = _gpu()
if not _HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files holding a test marked `slow` are collected first (each file's tests stay together,
    in their order). `make test` hands whole files to its workers in collection order
    (pytest-xdist `--dist loadfile --no-loadscope-reorder`): a long file handed out last would
    keep one worker busy while the others have nothing left to run."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)
    # a test marked `gpu` is skipped where no CUDA GPU is visible (a plain `pytest FILE` on a
    # CPU machine); `make test` deselects them, `make gpu-test` runs them on the device machine
    if not _HAS_GPU:
        skip = pytest.mark.skip(reason="needs a CUDA GPU (make gpu-test on the device machine)")
        for item in items:
            if item.get_closest_marker("gpu") is not None:
                item.add_marker(skip)
