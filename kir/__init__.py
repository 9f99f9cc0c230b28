"""Kernel IR: one immutable, lossless view over CUDA C++ (tree-sitter) and Triton (Python
source in libcst's node shapes, built from Python's `ast`).

No GPU library is imported here. See docs/INTERFACES.md for the contract.
"""
from __future__ import annotations

from kir import kinds
from kir.errors import BadInputError, KLineageError, ParseError, QueryError
from kir.ir import Edit, KernelIR, Language, Node, Span
from kir.parse import detect_language, parse, parse_file

__all__ = [
    "BadInputError", "Edit", "KLineageError", "KernelIR", "Language", "Node", "ParseError",
    "QueryError", "Span", "detect_language", "kinds", "parse", "parse_file",
]

