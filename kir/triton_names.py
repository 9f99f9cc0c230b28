"""Triton naming shared by the two Python back-ends (`kir.triton`, `kir.triton_cst`): which
decorators make a kernel, which annotations a constexpr parameter, which calls get a sharper
kind; and the span widening both apply to their tables. Below both, so neither imports the
other's module at load time."""
from __future__ import annotations

from kir import kinds as K
from kir.columns import Columns

KERNEL_DECORATORS = frozenset({"triton.jit", "jit", "triton.autotune", "autotune",
                               "triton.heuristics", "heuristics", "triton.language.jit"})
_TL = ("tl.", "triton.language.")
_CONSTEXPR = frozenset({"tl.constexpr", "triton.language.constexpr", "constexpr"})


def call_kind(callee: str) -> str:
    """Normalized kind of a Triton call from its dotted callee."""
    prefix, _, last = callee.rpartition(".")
    if callee.startswith(_TL):
        if last in ("dot", "dot_scaled"):
            return K.DOT
        if last == "debug_barrier":
            return K.BARRIER
        if last in ("load", "store"):
            return K.LOAD if last == "load" else K.STORE
    elif last in ("load", "store") and "desc" in prefix.lower():
        # tensor-descriptor (TMA) methods: `a_desc.load([m, k])`
        return K.LOAD if last == "load" else K.STORE
    return K.CALL


def widen_to_children(cols: Columns) -> None:
    """Widen every span to contain its subtree: libcst's syntactic spans can be narrower
    than the children (a Param spans only its name, not `: tl.constexpr`)."""
    starts, ends, parents = cols.starts, cols.ends, cols.parents
    for i in range(len(starts) - 1, 0, -1):
        p = parents[i]
        if starts[i] < starts[p]:
            starts[p] = starts[i]
        if ends[i] > ends[p]:
            ends[p] = ends[i]
