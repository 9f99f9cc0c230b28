"""A small least-recently-used memo for facts read off a source text.

Analyses ask the same question of the same source many times in a run (every state a search
returns to, every card's materialization); `Recent` keeps the answers for the last few keys.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")
_MISSING = object()


class Recent(Generic[V]):
    """The values computed for the last `size` keys asked for; the least recently used is
    dropped first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, V] = OrderedDict()

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The value kept for `key`, else `compute()` (kept)."""
        hit = self._items.get(key, _MISSING)
        if hit is _MISSING:
            value = self._items[key] = compute()
            if len(self._items) > self.size:
                self._items.popitem(last=False)
            return value
        self._items.move_to_end(key)
        return hit  # type: ignore[return-value]

    def __len__(self) -> int:
        return len(self._items)
