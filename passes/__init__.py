"""Optimization passes: find, remove (de-optimize) and re-apply one optimization intent.

Public API (see docs/INTERFACES.md, "passes"): the pass model in `passes.base`, the lazy
registry, the precondition language (`passes.precondition`), the dependency graph
(`passes.graph.PassGraph`) and the rewriter protocol (`passes.rewriter`). Importing this
package imports no GPU library and no pass module.
"""
from __future__ import annotations

from passes.base import (Applied, Category, Failed, Pass, PassContext, PassResult, Site,
                         Skipped, parse_pass_spec)
from passes.registry import (all_pass_classes, get_all_passes, get_pass, pass_from_spec,
                             present_sites)

__all__ = [
    "Applied", "Category", "Failed", "Pass", "PassContext", "PassGraph", "PassResult", "Site",
    "Skipped", "all_pass_classes", "get_all_passes", "get_pass", "parse_pass_spec",
    "pass_from_spec", "present_sites",
]


def __getattr__(name: str):  # PassGraph imports networkx: load it only when asked for
    if name == "PassGraph":
        from passes.graph import PassGraph

        return PassGraph
    raise AttributeError(name)
