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
    __slots__ = ("key", "blob", "transmits", "age", "cost", "cost_fn")

    def __init__(self, key: str, blob: bytes, order: int) -> None:
        self.key = key
        self.blob = blob
        self.transmits = 0
        self.age = -order  # newer items sort first
        self.cost = 0
        self.cost_fn: Callable[[bytes], int] | None = None  # what ``cost`` was computed with


_URGENCY = attrgetter("transmits", "age")  # fewest transmissions first, then newest


class BroadcastQueue(dict):
    """The queued updates by member id (a dict, so ``len``, truth and ``in`` cost no Python
    call: the core asks after every input whether anything is queued). Change it only through
    ``push``, ``refine`` and ``take``."""

    __slots__ = ("_order",)

    def __init__(self) -> None:
        super().__init__()
        self._order = 0

    def push(self, key: str, blob: bytes) -> None:
        """Queue ``blob`` about member ``key``, replacing any older update about it."""
        self._order += 1
        self[key] = _Item(key, blob, self._order)

    def refine(self, key: str, blob: bytes) -> None:
        """Replace the queued update about ``key`` by ``blob``, keeping its transmission count;
        nothing if no update about ``key`` is queued any more."""
        old = self.get(key)
        if old is not None:
            old.blob = blob
            old.cost_fn = None

    def transmits(self, key: str) -> int | None:
        item = self.get(key)
        return None if item is None else item.transmits

    def take(self, budget: int, cost: Callable[[bytes], int], limit: int) -> list[bytes]:
        """Blobs that fit in ``budget`` bytes, most urgent first; counts one transmission each."""
        if not self or budget <= 0:
            return []
        chosen: list[bytes] = []
        for item in sorted(self.values(), key=_URGENCY):
            if item.cost_fn is not cost:  # an item is offered many times: size it once
                item.cost, item.cost_fn = cost(item.blob), cost
            c = item.cost
            if c > budget:
                continue
            budget -= c
            chosen.append(item.blob)
            item.transmits += 1
            if item.transmits >= limit:
                del self[item.key]
        return chosen
