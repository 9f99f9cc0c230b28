"""Normalized node kinds shared by both back-ends.

A node's `kind` is one of these strings; `grammar_type` keeps the back-end's own type name
(tree-sitter type for CUDA, libcst class name for Triton). Passes and queries match on kinds,
so a kind means the same thing in both languages.
"""
from __future__ import annotations

from typing import Final

MODULE: Final = "module"
KERNEL: Final = "kernel"  # a @triton.jit / @triton.autotune function, or a __global__ function
FUNCTION: Final = "function"
CLASS: Final = "class"  # Python class, C++ struct/class/union with a body
NAMESPACE: Final = "namespace"
LOOP: Final = "loop"
BRANCH: Final = "branch"
CALL: Final = "call"
LOAD: Final = "load"
STORE: Final = "store"
DOT: Final = "dot"
BARRIER: Final = "barrier"
SHARED_DECL: Final = "shared_decl"
LAUNCH: Final = "launch"
PRAGMA: Final = "pragma"
ASSIGN: Final = "assign"
DECL: Final = "decl"  # a C++ declaration without initializer (e.g. a register array)
RETURN: Final = "return"
DECORATOR: Final = "decorator"
CONSTEXPR_PARAM: Final = "constexpr_param"  # `X: tl.constexpr`, or a C++ non-type template param
PARAM: Final = "param"
ASM: Final = "asm"
IMPORT: Final = "import"
TEMPLATE: Final = "template"  # C++ template<...> wrapper around a function or class
NAME: Final = "name"  # identifiers
LITERAL: Final = "literal"  # numbers and strings
ERROR: Final = "error"  # a tree-sitter ERROR or MISSING node (CUDA only)
OTHER: Final = "other"  # anything else the grammar has

#: Kinds whose nodes get an anchor (see `anchors`).
ANCHORED: Final[frozenset[str]] = frozenset(
    {
        MODULE, KERNEL, FUNCTION, CLASS, NAMESPACE, LOOP, BRANCH, CALL, LOAD, STORE, DOT, BARRIER,
        SHARED_DECL, LAUNCH, PRAGMA, ASSIGN, DECL, RETURN, DECORATOR, CONSTEXPR_PARAM, PARAM, ASM,
    }
)

#: Kinds that behave like a call (their anchor step is `call:<callee>` when the node is a call).
CALL_LIKE: Final[frozenset[str]] = frozenset({CALL, LOAD, STORE, DOT, BARRIER})

#: Kinds that open a named scope: their anchor id starts a new path (`<lang>:<qualified name>`).
SCOPES: Final[frozenset[str]] = frozenset({KERNEL, FUNCTION, CLASS, NAMESPACE})

#: Kinds whose anchors parent other anchors (block-level structure).
CONTAINERS: Final[frozenset[str]] = SCOPES | {MODULE, LOOP, BRANCH}

ALL: Final[frozenset[str]] = ANCHORED | {IMPORT, TEMPLATE, NAME, LITERAL, ERROR, OTHER}

#: Names of the node attributes the builders record (`KernelIR.attrs_of`); the anchor query
#: language accepts these and its own (name, id, kind, line, step, grammar_type), so that a
#: misspelt attribute is an error rather than a query that matches nothing.
ATTRIBUTES: Final[frozenset[str]] = frozenset({
    "annotation", "args", "callee", "cluster_dims", "decorators", "extern", "flavor",
    "iterator", "keywords", "launch_bounds", "macros", "maxnreg", "op", "ops", "qualifiers",
    "target", "template", "template_args", "volatile"})
