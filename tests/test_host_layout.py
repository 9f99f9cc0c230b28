"""host_layout.unit_axis: which axis of a host tensor the host source makes contiguous.

Read from factories, `.contiguous()`, views that move axes, names assigned in straight-line
code, checks the source makes, and the returns of a function of the module (its axis
arguments bound to the call's literals); unknown where the source does not say."""
from __future__ import annotations

import ast

import pytest

import kir
from passes.triton._py import PyModule
from passes.triton.host_layout import unit_axis

HOST = '''
import torch


def dense_along(x, k, n):
    k, n = k % x.dim(), n % x.dim()
    if x.stride(k) == 1:
        return x
    out = torch.empty_like(x.movedim(k, -1), memory_format=torch.contiguous_format).movedim(-1, k)
    out.copy_(x)
    if out.stride(k) != 1:
        raise ValueError("not dense along k")
    return out


def says_nothing(x, k):
    if x.stride(k) == 1:
        return x
    return x.movedim(k, -1)


def run(a, b, flag):
    fresh = torch.empty((4, 8, 16), device=a.device)
    swapped = fresh.transpose(1, 2)
    moved = fresh.permute(2, 0, 1)
    tee = torch.zeros(5, 7).t()
    dense = a.contiguous()
    copied = dense_along(b, 1, 2)
    copied_neg = dense_along(b, -2, -1)
    unknown = says_nothing(b, 1)
    assert a.stride(0) == 1
    maybe = b.contiguous()
    if flag:
        maybe = b.t()
    again = fresh
    again = again.mT
    probe = 0
    return probe
'''


@pytest.fixture(scope="module")
def read():
    mod = PyModule(kir.parse(HOST, "triton"))
    run = next(f for f in mod.functions() if f.name == "run")
    at = mod.start(run.body[-1])

    def axis(expr: str) -> tuple[int, int | None] | None:
        got = unit_axis(mod, run, ast.parse(expr, mode="eval").body, at)
        return (got.axis, got.rank) if got is not None else None
    return axis


@pytest.mark.parametrize("expr,want", [
    ("fresh", (2, 3)), ("swapped", (1, 3)), ("moved", (0, 3)), ("tee", (0, 2)),
    ("again", (1, 3)), ("torch.randn(3, 4).transpose(0, 1)", (0, 2)),
    ("fresh.movedim(0, 2)", (1, 3)), ("fresh.movedim(2, 0)", (0, 3)),
    ("dense", (-1, None)),  # the rank of a parameter is not written
    ("a", (0, None)),  # a parameter the source checks
    ("copied", (1, None)), ("copied_neg", (-2, None)),  # both returns of the helper say axis k
    ("b", None),  # a parameter it says nothing of
    ("unknown", None),  # one return says nothing
    ("maybe", None),  # rebound in a branch
    ("fresh.t()", None),  # `.t()` of a rank-3 tensor
], ids=lambda v: str(v))
def test_unit_axis_reads_what_the_source_establishes(read, expr, want) -> None:
    assert read(expr) == want
