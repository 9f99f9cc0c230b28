"""Kernel IR: one immutable, lossless view over CUDA C++ (tree-sitter) and Triton (libcst).

No GPU library is imported here. See docs/INTERFACES.md for the contract.
"""
from __future__ import annotations

from kir import kinds
from kir.errors import BadInputError, KLineageError, ParseError, QueryError
from kir.ir import Edit, KernelIR, Language, Node, Span
from kir.parse import detect_language, parse, parse_file

__all__ = [
    "BadInputError", "Edit", "KLineageError", "KernelIR", "Language", "Node", "ParseError",
    "QueryError", "Span", "detect_language", "diff", "kinds", "parse", "parse_file",
]


def diff(old: KernelIR, new: KernelIR):  # type: ignore[no-untyped-def]
    """GumTree-style structured diff; see `kir.diff.diff`."""
    from kir.diff import diff as _diff  # anchors (used by diff) imports kir

    return _diff(old, new)
