"""The window watch's profile function (`gate.windowwatch`), called as a sealed launch's child
calls it: what it ends the launch at, and what it passes over. The launches themselves are
gated in tests/test_gate_exploits.py."""
from __future__ import annotations

import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gate import windowwatch


class _Ended(Exception):
    pass


@pytest.fixture
def ended(tmp_path: Path) -> Iterator[list[str]]:
    """The watch armed (its end recorded, then raised: it never returns) with `tmp_path` as
    the candidate's folder; the module's state as it was afterwards."""
    reasons: list[str] = []

    def end(reason: str) -> None:
        reasons.append(reason)
        raise _Ended(reason)

    dirs, kernels = tuple(windowwatch._DIRS), set(windowwatch._KERNEL_CODES)
    windowwatch.candidate_dirs((str(tmp_path.resolve()),))
    windowwatch.arm(end)
    try:
        yield reasons
    finally:
        windowwatch.disarm()
        windowwatch.candidate_dirs(dirs)
        windowwatch._KERNEL_CODES.intersection_update(kernels)


def _function(path: Path, name: str = "f", globals_: dict | None = None) -> types.FunctionType:
    """A function compiled as from `path` that returns the frame it ran in."""
    code = compile(f"def {name}():\n    return __import__('sys')._getframe()\n", str(path), "exec")
    scope: dict = {}
    exec(code, scope)  # noqa: S102
    fn = scope[name]
    return fn if globals_ is None else types.FunctionType(fn.__code__, globals_)


def _called(fn: types.FunctionType, event: str = "call") -> bool:
    """Whether the watch ends the launch where `fn` is called (`event` for its frame)."""
    try:
        windowwatch._profile(fn(), event, None)
    except _Ended:
        return True
    return False


def test_a_call_of_candidate_code_ends_the_launch_whatever_globals_it_runs_with(
        tmp_path: Path, ended: list[str]) -> None:
    fn = _function(tmp_path / "cand.py", "helper")
    assert _called(fn)
    assert "helper (cand.py:" in ended[0]
    # its code under a library's globals is still the candidate's
    assert _called(_function(tmp_path / "cand.py", "helper", vars(np)))
    assert not _called(fn, "return") and not _called(fn, "c_call")


def test_kernel_bodies_and_other_files_run(tmp_path: Path, ended: list[str]) -> None:
    kernel = _function(tmp_path / "cand.py", "kernel")
    windowwatch.allow(kernel)
    assert not _called(kernel)
    outside = tmp_path.parent / f"{tmp_path.name}_lib.py"
    assert not _called(_function(outside))
    windowwatch.candidate_dirs((str(tmp_path.parent.resolve()),))  # a file judged before
    assert _called(_function(outside))
    assert ended


def test_a_call_of_a_file_not_the_candidates_does_not_hash_its_code(
        tmp_path: Path, ended: list[str]) -> None:
    """The common path (every call of the interpreter's) reads the code's file name alone: a
    code object's hash is its constants' (a constant of a class of its own runs Python)."""
    hashed: list[int] = []

    class Constant:
        def __hash__(self) -> int:
            hashed.append(1)
            return 1

    fn = _function(tmp_path.parent / f"{tmp_path.name}_lib.py")
    fn.__code__ = fn.__code__.replace(co_consts=(*fn.__code__.co_consts, Constant()))
    assert not _called(fn) and not _called(fn)
    assert hashed == [] and ended == []
