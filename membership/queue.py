"""Piggyback broadcast queue with a retransmit limit (SWIM section 4; memberlist queue.go).

Each queued update is a pre-encoded state message about one member. A newer update about the
same member replaces the older one (it carries strictly more recent information). Updates are
handed out fewest-transmissions-first, newest first among equals, packed greedily into the
bytes left in a datagram; each is dropped after ``limit`` transmissions, where the core passes
``limit = retransmit_mult * ceil(log10(N + 1))`` so an update reaches everyone with high
probability while per-member load stays constant. ``fresh`` tells gossip rounds whether some
update is still within the part of its budget they push actively
(``MembershipConfig.gossip_push_share``, issue 14).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["BroadcastQueue"]

# An entry is a list [rank, transmits, blob, cost, key] with
# rank = transmits * _RANK_STEP - order (order: a counter of pushes), so that plain list
# comparison sorts entries most urgent first (fewest transmissions, then newest) by comparing
# one int: ranks are unique, so the later fields are never compared. This is the hot loop of
# every gossip round; a key function (attrgetter of a (transmits, age) tuple) cost a call and a
# tuple per entry per sort.
_RANK, _TRANSMITS, _BLOB, _COST, _KEY = range(5)
_RANK_STEP = 1 << 48  # more pushes than a member makes in any lifetime


class BroadcastQueue(dict):
    """The queued updates by member id (a dict, so ``len``, truth and ``in`` cost no Python
    call: the core asks after every input whether anything is queued). Change it only through
    ``push``, ``refine`` and ``take``.

    ``cost(blob)`` is the number of datagram bytes one update takes; it is computed once per
    update, when it is queued or replaced.
    """

    __slots__ = ("_cost", "_order")

    def __init__(self, cost: Callable[[bytes], int] = len) -> None:
        super().__init__()
        self._order = 0
        self._cost = cost

    def push(self, key: str, blob: bytes) -> None:
        """Queue ``blob`` about member ``key``, replacing any older update about it."""
        self._order += 1
        self[key] = [-self._order, 0, blob, self._cost(blob), key]

    def refine(self, key: str, blob: bytes) -> None:
        """Replace the queued update about ``key`` by ``blob``, keeping its transmission count;
        nothing if no update about ``key`` is queued any more."""
        entry = self.get(key)
        if entry is not None:
            entry[_BLOB] = blob
            entry[_COST] = self._cost(blob)

    def fresh(self, below: int) -> bool:
        """Whether some queued update has been transmitted fewer than ``below`` times."""
        for entry in self.values():
            if entry[_TRANSMITS] < below:
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
