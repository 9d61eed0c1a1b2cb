"""Piggyback broadcast queue with a retransmit limit (SWIM section 4; memberlist queue.go).

Each queued update is a pre-encoded state message about one member. A newer update about the
same member replaces the older one (it carries strictly more recent information). Updates are
handed out fewest-transmissions-first, newest first among equals, packed greedily into the
bytes left in a datagram; each is dropped after ``limit`` transmissions, where the core passes
``limit = retransmit_mult * ceil(log10(N + 1))`` so an update reaches everyone with high
probability while per-member load stays constant.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Callable

__all__ = ["BroadcastQueue"]


class _Item:
    __slots__ = ("key", "blob", "transmits", "age")

    def __init__(self, key: str, blob: bytes, order: int) -> None:
        self.key = key
        self.blob = blob
        self.transmits = 0
        self.age = -order  # newer items sort first


_URGENCY = attrgetter("transmits", "age")  # fewest transmissions first, then newest


class BroadcastQueue:
    def __init__(self) -> None:
        self._items: dict[str, _Item] = {}
        self._order = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def push(self, key: str, blob: bytes) -> None:
        """Queue ``blob`` about member ``key``, replacing any older update about it."""
        self._order += 1
        self._items[key] = _Item(key, blob, self._order)

    def refine(self, key: str, blob: bytes) -> None:
        """Replace the queued update about ``key`` by ``blob``, keeping its transmission count;
        nothing if no update about ``key`` is queued any more."""
        old = self._items.get(key)
        if old is not None:
            old.blob = blob

    def transmits(self, key: str) -> int | None:
        item = self._items.get(key)
        return None if item is None else item.transmits

    def take(self, budget: int, cost: Callable[[bytes], int], limit: int) -> list[bytes]:
        """Blobs that fit in ``budget`` bytes, most urgent first; counts one transmission each."""
        if not self._items or budget <= 0:
            return []
        chosen: list[bytes] = []
        for item in sorted(self._items.values(), key=_URGENCY):
            c = cost(item.blob)
            if c > budget:
                continue
            budget -= c
            chosen.append(item.blob)
            item.transmits += 1
            if item.transmits >= limit:
                del self._items[item.key]
        return chosen
