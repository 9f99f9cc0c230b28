"""The column-wise node table the back-ends fill (internal to `kir`).

It sits below both the back-ends (`kir.cuda`, `kir.triton`, `kir.triton_cst`) and the IR
(`kir.ir`), so that the IR can call the back-ends without an import cycle.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(slots=True)
class Columns:
    """Column-wise node table a back-end fills in pre-order (internal to `kir`)."""

    kinds: list[str] = field(default_factory=list)
    gtypes: list[str] = field(default_factory=list)
    names: list[str | None] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # -1 for the root
    attrs: dict[int, Mapping[str, Any]] = field(default_factory=dict)

    def add(
        self,
        kind: str,
        gtype: str,
        name: str | None,
        start: int,
        end: int,
        parent: int,
        attrs: Mapping[str, Any] | None = None,
    ) -> int:
        nid = len(self.kinds)
        self.kinds.append(kind)
        self.gtypes.append(gtype)
        self.names.append(name)
        self.starts.append(start)
        self.ends.append(end)
        self.parents.append(parent)
        if attrs:
            self.attrs[nid] = MappingProxyType(dict(attrs))
        return nid
