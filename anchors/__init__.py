"""Stable, human-readable anchors over kernel IR nodes, their resolution and queries.

No GPU library is imported here. See docs/INTERFACES.md for the contract.
"""
from __future__ import annotations

from anchors.index import Anchor, AnchorId, AnchorIndex, Resolution, build_index, step_of
from anchors.query import AnchorQuery, Match, parse_query

__all__ = [
    "Anchor", "AnchorId", "AnchorIndex", "AnchorQuery", "Match", "Resolution", "build_index",
    "parse_query", "step_of",
]
