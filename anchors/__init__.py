"""Stable, human-readable anchors over kernel IR nodes, their resolution and queries; the
structured diff whose actions name them (`diff`) and the edit-script transplant built on it.

No GPU library is imported here. See docs/INTERFACES.md for the contract.
"""
from __future__ import annotations

from anchors.index import Anchor, AnchorId, AnchorIndex, Resolution, build_index, step_of
from anchors.query import AnchorQuery, Match, parse_query
from anchors.treediff import Action, Delete, EditScript, Insert, Move, Update, diff

__all__ = [
    "Action", "Anchor", "AnchorId", "AnchorIndex", "AnchorQuery", "Delete", "EditScript",
    "Insert", "Match", "Move", "Resolution", "Update", "build_index", "diff", "parse_query",
    "step_of",
]
