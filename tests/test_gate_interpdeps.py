"""gate.interpdeps.code_on_stack: the frame walk `in_kernel` and the op trace's reference check
share (each with its own match and bound)."""
from __future__ import annotations

import sys

from gate.interpdeps import code_on_stack


def _outer(probe):
    return _middle(probe)


def _middle(probe):
    return _inner(probe)


def _inner(probe):
    return probe(sys._getframe(0))


def test_the_walk_finds_a_caller_within_its_bound_and_not_beyond() -> None:
    is_outer = lambda code: code is _outer.__code__  # noqa: E731
    assert _outer(lambda frame: code_on_stack(frame, is_outer)) is True
    # _inner, _middle, _outer: the third frame from the start is the one
    assert _outer(lambda frame: code_on_stack(frame, is_outer, depth=3)) is True
    assert _outer(lambda frame: code_on_stack(frame, is_outer, depth=2)) is False
    assert _outer(lambda frame: code_on_stack(frame, is_outer, depth=0)) is False
    assert code_on_stack(sys._getframe(0), is_outer) is False  # not a caller here
    assert code_on_stack(None, lambda code: True) is False
