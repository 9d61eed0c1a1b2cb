"""Piggyback broadcast queue with a retransmit limit (SWIM section 4; memberlist queue.go).

Each queued update is a pre-encoded state message about one member. A newer update about the
same member replaces the older one (it carries strictly more recent information) and starts a
fresh budget. Updates are handed out fewest-transmissions-first,
newest first among equals, packed greedily into the bytes left in a datagram; each is dropped
after ``limit`` transmissions, where the core passes
``limit = retransmit_mult * ceil(log10(N + 1))`` so an update reaches everyone with high
probability while per-member load stays constant. Each update also carries how many of those
transmissions gossip rounds may *push* (``push_below``); ``fresh`` tells the gossip loop
whether some update is still within that part (issue 14: the rest ride on datagrams sent
anyway).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["BroadcastQueue"]

# An entry is a list [rank, transmits, blob, cost, key, push_below] with
# rank = transmits * _RANK_STEP - order (order: a counter of pushes), so that plain list
# comparison sorts entries most urgent first (fewest transmissions, then newest) by comparing
# one int: ranks are unique, so the later fields are never compared. This is the hot loop of
# every gossip round; a key function (attrgetter of a (transmits, age) tuple) cost a call and a
# tuple per entry per sort.
_RANK, _TRANSMITS, _BLOB, _COST, _KEY, _PUSH_BELOW = range(6)
_RANK_STEP = 1 << 48  # more pushes than a member makes in any lifetime


class BroadcastQueue(dict):
    """The queued updates by member id (a dict, so ``len``, truth and ``in`` cost no Python
    call: the core asks after every input whether anything is queued). Change it only through
    ``push`` and ``take``.

    ``cost(blob)`` is the number of datagram bytes one update takes; it is computed once per
    update, when it is queued.
    """

    __slots__ = ("_cost", "_order")

    def __init__(self, cost: Callable[[bytes], int] = len) -> None:
        super().__init__()
        self._order = 0
        self._cost = cost

    def push(self, key: str, blob: bytes, push_below: int = 0) -> None:
        """Queue ``blob`` about member ``key``, replacing any older update about it; gossip
        rounds may push its first ``push_below`` transmissions."""
        self._order += 1
        self[key] = [-self._order, 0, blob, self._cost(blob), key, push_below]

    def fresh(self, below: int | None = None) -> bool:
        """Whether some queued update has been transmitted fewer times than its ``push_below``
        (or than ``below``, for every update, if given)."""
        for entry in self.values():
            if entry[_TRANSMITS] < (entry[_PUSH_BELOW] if below is None else below):
                return True
        return False

    def transmits(self, key: str) -> int | None:
        entry = self.get(key)
        return None if entry is None else entry[_TRANSMITS]

    def take(self, budget: int, limit: int) -> list[bytes]:
        """Blobs that fit in ``budget`` bytes, most urgent first; counts one transmission each."""
        if not self or budget <= 0:
            return []
        chosen: list[bytes] = []
        entry: list[Any]
        for entry in sorted(self.values()):
            cost = entry[_COST]
            if cost > budget:
                continue
            budget -= cost
            chosen.append(entry[_BLOB])
            entry[_RANK] += _RANK_STEP
            entry[_TRANSMITS] += 1
            if entry[_TRANSMITS] >= limit:
                del self[entry[_KEY]]
        return chosen
