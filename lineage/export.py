"""Export a lineage as GraphML, DOT or node-link JSON.

GraphML allows only scalar attributes, so nested values (diffs, verdicts, lists) are flattened to
JSON strings under the same key; DOT carries a short label per node and the full attributes are
left to the JSON export.
"""
from __future__ import annotations

import json
from typing import Any

import networkx as nx

from kir.errors import BadInputError
from lineage.graph import Lineage

FORMATS = ("graphml", "dot", "json")


def _scalar(value: Any) -> str | int | float | bool:
    if isinstance(value, bool | int | float | str):
        return value
    if value is None:
        return ""
    return json.dumps(value, sort_keys=True)


def to_graphml(lineage: Lineage) -> str:
    flat = nx.DiGraph()
    for key, value in lineage.graph.graph.items():
        flat.graph[key] = _scalar(value)
    for node, attrs in lineage.graph.nodes(data=True):
        flat.add_node(node, **{k: _scalar(v) for k, v in attrs.items()})
    flat.add_edges_from(lineage.graph.edges())
    return "\n".join(nx.generate_graphml(flat)) + "\n"


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def state_label(attrs: dict[str, Any]) -> str:
    roles = ",".join(attrs.get("roles", []))
    label = f"{attrs.get('hash', '')[:8]}"
    if roles:
        label += f"\n[{roles}]"
    timing = attrs.get("timing") or {}
    if timing.get("candidate_ms") is not None:
        label += f"\n{timing['candidate_ms']:.3f} ms"
    return label


def transition_label(attrs: dict[str, Any]) -> str:
    label = attrs.get("pass", "?")
    delta = attrs.get("profile_delta") or {}
    if delta.get("ratio"):
        label += f"\n{delta['ratio']:.2f}x"
    return label


def to_dot(lineage: Lineage) -> str:
    # Lineages are long chains with occasional branches: left-to-right reads like a timeline.
    lines = ["digraph lineage {", "  rankdir=LR;", '  node [fontname="Helvetica", fontsize=10];']
    for node, attrs in lineage.graph.nodes(data=True):
        if attrs["type"] == "state":
            roles = attrs.get("roles", [])
            color = "#2e7d32" if "expert" in roles else "#c62828" if "naive" in roles else "#37474f"
            lines.append(f"  {_dot_quote(node)} [shape=box, style=rounded, color={_dot_quote(color)}, "
                         f"label={_dot_quote(state_label(attrs))}];")
        else:
            lines.append(f"  {_dot_quote(node)} [shape=ellipse, style=filled, fillcolor=\"#e3f2fd\", "
                         f"label={_dot_quote(transition_label(attrs))}];")
    for a, b in lineage.graph.edges():
        lines.append(f"  {_dot_quote(a)} -> {_dot_quote(b)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_json_text(lineage: Lineage) -> str:
    return json.dumps(lineage.to_json(), indent=1)


def export(lineage: Lineage, fmt: str) -> str:
    if fmt == "graphml":
        return to_graphml(lineage)
    if fmt == "dot":
        return to_dot(lineage)
    if fmt == "json":
        return to_json_text(lineage)
    raise BadInputError(f"unknown export format {fmt!r} (choose from {', '.join(FORMATS)})")
