"""The pass-dependency graph, derived from the passes' declarations (never hand-written).

Nodes are pass names. A *must-precede* edge `A -> B` exists when B `requires` a feature that A
`provides` (every pass implicitly provides its own name, so `requires=("tile-sizes",)` works).
A *conflict* is an undirected relation: either pass declares the other (or a feature the other
provides) in `conflicts`. A cycle of must-precede edges is an error (`KLineageError`), raised
when the graph is built.

Analyses: a valid optimization order (a topological order, ties broken by registry order so it
is deterministic), the de-optimization order of a kernel's present passes (its reverse), what
must be applied before a pass, and what applying a pass invalidates.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx

from kir.errors import BadInputError, KLineageError
from passes.base import Pass


@dataclass(frozen=True, slots=True)
class Declaration:
    """What the graph needs of a pass (so tests can build graphs without pass classes)."""

    name: str
    category: str = ""
    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    languages: tuple[str, ...] = ()

    @staticmethod
    def of(cls: type[Pass]) -> Declaration:
        return Declaration(cls.name, cls.category.value, tuple(cls.requires),
                           tuple(cls.provides), tuple(cls.conflicts), tuple(cls.languages))


class PassGraph:
    """Must-precede and conflict relations between passes, with the ordering analyses."""

    def __init__(self, declarations: Iterable[Declaration]) -> None:
        self.declarations: dict[str, Declaration] = {}
        for decl in declarations:
            if decl.name in self.declarations:
                raise KLineageError(f"pass '{decl.name}' is declared twice")
            self.declarations[decl.name] = decl
        self._rank = {name: i for i, name in enumerate(self.declarations)}
        self.providers: dict[str, list[str]] = {}
        for decl in self.declarations.values():
            for feature in (decl.name, *decl.provides):
                self.providers.setdefault(feature, []).append(decl.name)

        self.precede = nx.DiGraph()  # A -> B: A must be applied before B
        self.conflict = nx.Graph()
        for name, decl in self.declarations.items():
            self.precede.add_node(name, category=decl.category, languages=list(decl.languages))
            self.conflict.add_node(name)
        for name, decl in self.declarations.items():
            for feature in decl.requires:
                for provider in self.providers.get(feature, []):
                    if provider != name:
                        self.precede.add_edge(provider, name, feature=feature)
            for feature in decl.conflicts:
                for other in self.providers.get(feature, []):
                    if other != name:
                        self.conflict.add_edge(name, other, feature=feature)
        try:
            cycle = nx.find_cycle(self.precede)
        except nx.NetworkXNoCycle:
            cycle = None
        if cycle:
            path = " -> ".join([cycle[0][0], *(v for _, v in cycle)])
            raise KLineageError(f"pass dependency cycle: {path}")

    @staticmethod
    def from_registry() -> PassGraph:
        """The graph of every registered pass."""
        from passes.registry import all_pass_classes  # noqa: PLC0415

        return PassGraph(Declaration.of(cls) for cls in all_pass_classes())

    # -- analyses -------------------------------------------------------------------------
    def _check(self, name: str) -> None:
        if name not in self.declarations:
            raise BadInputError(f"unknown pass '{name}'; `klineage passes` lists them")

    def optimization_order(self, names: Iterable[str] | None = None) -> list[str]:
        """A valid order to apply `names` (all passes by default): every pass after those that
        must precede it, directly or through passes not in `names`; ties in registry order."""
        order = list(nx.lexicographical_topological_sort(self.precede, key=self._rank.__getitem__))
        if names is None:
            return order
        wanted = set(names)
        for name in wanted:
            self._check(name)
        return [name for name in order if name in wanted]

    def deopt_order(self, present: Iterable[str]) -> list[str]:
        """The order to remove the `present` passes: the reverse of their optimization order
        (a pass is removed before anything it depends on). Duplicates are collapsed."""
        return list(reversed(self.optimization_order(set(present))))

    def must_precede(self, name: str) -> list[str]:
        """Every pass that must be applied before `name` (its ancestors), in a valid order."""
        self._check(name)
        return self.optimization_order(nx.ancestors(self.precede, name))

    def requirements(self, name: str) -> dict[str, list[str]]:
        """Each feature `name` requires -> the passes that provide it (empty: nobody does)."""
        self._check(name)
        return {f: [p for p in self.providers.get(f, []) if p != name]
                for f in self.declarations[name].requires}

    def conflicts_of(self, name: str) -> list[str]:
        """The passes that conflict with `name`, in registry order."""
        self._check(name)
        return sorted(self.conflict.neighbors(name), key=self._rank.__getitem__)

    def invalidates(self, name: str) -> list[str]:
        """What applying `name` invalidates: the passes it conflicts with and every pass that
        depends on one of them (it loses a required feature) and on no other provider."""
        self._check(name)
        lost = set(self.conflicts_of(name))
        changed = True
        while changed:  # propagate: a pass whose required feature has no surviving provider
            changed = False
            for other, decl in self.declarations.items():
                if other in lost or other == name:
                    continue
                for feature in decl.requires:
                    providers = [p for p in self.providers.get(feature, []) if p != other]
                    if providers and all(p in lost for p in providers):
                        lost.add(other)
                        changed = True
                        break
        return sorted(lost, key=self._rank.__getitem__)

    def check_present(self, present: Sequence[str]) -> list[str]:
        """Human-readable problems of a set of present passes: pairs that conflict."""
        names = sorted(set(present), key=lambda n: self._rank.get(n, len(self._rank)))
        return [f"{a} conflicts with {b}" for i, a in enumerate(names) for b in names[i + 1:]
                if self.conflict.has_edge(a, b)]

    # -- export ---------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """`{"passes", "edges": [{"from","to","feature"}], "conflicts": [{"a","b","feature"}],
        "order"}` — the format of `klineage deps --json` (without a kernel)."""
        return {
            "passes": list(self.declarations),
            "edges": [{"from": a, "to": b, "feature": d["feature"]}
                      for a, b, d in sorted(self.precede.edges(data=True),
                                            key=lambda e: (self._rank[e[0]], self._rank[e[1]]))],
            "conflicts": [{"a": a, "b": b, "feature": d["feature"]}
                          for a, b, d in sorted(
                              ((*sorted((a, b), key=self._rank.__getitem__), d)
                               for a, b, d in self.conflict.edges(data=True)),
                              key=lambda e: (self._rank[e[0]], self._rank[e[1]]))],
            "order": self.optimization_order(),
        }

    def to_dot(self, present: Iterable[str] = ()) -> str:
        """Graphviz DOT: solid edges must-precede, dashed red edges conflicts; present passes
        filled."""
        have = set(present)
        lines = ["digraph passes {", "  rankdir=LR;", "  node [shape=box, fontname=Helvetica];"]
        for name, decl in self.declarations.items():
            style = ', style=filled, fillcolor="#cde8cd"' if name in have else ""
            label = f"{name}\\n[{decl.category}]" if decl.category else name
            lines.append(f"  {json.dumps(name)} [label={_dot_label(label)}{style}];")
        for edge in self.to_json()["edges"]:
            lines.append(f"  {json.dumps(edge['from'])} -> {json.dumps(edge['to'])} "
                         f"[label={json.dumps(edge['feature'])}];")
        for edge in self.to_json()["conflicts"]:
            lines.append(f"  {json.dumps(edge['a'])} -> {json.dumps(edge['b'])} "
                         "[dir=none, style=dashed, color=red];")
        lines.append("}")
        return "\n".join(lines) + "\n"


def _dot_label(text: str) -> str:
    """A quoted DOT string; `\\n` escapes in `text` stay DOT line breaks."""
    return '"' + text.replace('"', '\\"') + '"'
