"""Piggyback broadcast queue with a retransmit limit (SWIM section 4; memberlist queue.go).

Each queued update is a pre-encoded state message about one member. A newer update about the
same member replaces the older one (it carries strictly more recent information) and starts a
fresh budget. Updates are handed out fewest-transmissions-first, newest first among equals,
packed greedily into the bytes left in a datagram; each is dropped after ``limit``
transmissions, where the core passes ``limit = retransmit_mult * ceil(log10(N + 1))`` so an
update reaches everyone with high probability while per-member load stays constant. Each update
also carries how many of those transmissions gossip rounds may *push* (``push_below``);
``fresh`` tells the gossip loop whether some update is still within that part (issue 14: the
rest ride on datagrams sent anyway).
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heapify, heappop, heappush
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
# Queues longer than this are walked through a heap of ranks, shorter ones sorted (see take).
_HEAP_FROM = 64


class BroadcastQueue(dict):
    """The queued updates by member id (a dict, so ``len``, truth and ``in`` cost no Python
    call: the core asks after every input whether anything is queued). Change it only through
    ``push`` and ``take``.

    ``cost(blob)`` is the number of datagram bytes one update takes; it is computed once per
    update, when it is queued.

    A long queue is also kept as a heap of ranks between takes, so a take costs O(k log n) for
    the k updates it looks at instead of a sort of all n: after a bootstrap every member queues
    news of every other one (1,023 entries at N=1,024), and sorting them for every datagram
    was a third of a simulated 1,024-node cluster's time. A short queue (the usual case) is
    sorted, which is cheaper there; both walk the entries in the same order.
    """

    __slots__ = ("_by_rank", "_cost", "_heap", "_min_cost", "_order")

    def __init__(self, cost: Callable[[bytes], int] = len) -> None:
        super().__init__()
        self._order = 0
        self._cost = cost
        #: No queued update costs less (a lower bound, never raised): a take stops once its
        #: budget is below it, since nothing left could fit.
        self._min_cost = 1 << 62
        # While the queue is long: the ranks of its entries as a heap (plus ranks of replaced
        # entries, skipped when popped) and the entry of each rank; None while it is short.
        self._heap: list[int] | None = None
        self._by_rank: dict[int, list[Any]] = {}

    def push(self, key: str, blob: bytes, push_below: int = 0) -> None:
        """Queue ``blob`` about member ``key``, replacing any older update about it; gossip
        rounds may push its first ``push_below`` transmissions."""
        self._order += 1
        cost = self._cost(blob)
        if cost < self._min_cost:
            self._min_cost = cost
        rank = -self._order
        entry = [rank, 0, blob, cost, key, push_below]
        heap = self._heap
        if heap is not None:
            old = self.get(key)
            if old is not None:
                del self._by_rank[old[_RANK]]  # its rank stays in the heap, skipped when popped
            self._by_rank[rank] = entry
            if len(heap) > 2 * len(self) + _HEAP_FROM:  # mostly replaced entries: rebuild
                heap[:] = self._by_rank
                heapify(heap)
            else:
                heappush(heap, rank)
        self[key] = entry

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
        if len(self) > _HEAP_FROM:
            return self._take_from_heap(budget, limit)
        self._heap = None
        self._by_rank.clear()
        chosen: list[bytes] = []
        floor = self._min_cost
        entry: list[Any]
        for entry in sorted(self.values()):
            if budget < floor:
                break
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

    def _take_from_heap(self, budget: int, limit: int) -> list[bytes]:
        """``take`` for a long queue: pop ranks (unique, so in the order a sort gives) only
        until the budget is spent, and push back those still queued."""
        heap, by_rank = self._heap, self._by_rank
        if heap is None:
            by_rank.clear()
            by_rank.update((entry[_RANK], entry) for entry in self.values())
            heap = self._heap = list(by_rank)
            heapify(heap)
        chosen: list[bytes] = []
        back: list[int] = []
        floor = self._min_cost
        while heap and budget >= floor:
            rank = heappop(heap)
            entry = by_rank.pop(rank, None)
            if entry is None:
                continue  # replaced since
            cost = entry[_COST]
            if cost <= budget:
                budget -= cost
                chosen.append(entry[_BLOB])
                entry[_TRANSMITS] += 1
                if entry[_TRANSMITS] >= limit:
                    del self[entry[_KEY]]
                    continue
                rank = entry[_RANK] = rank + _RANK_STEP
            by_rank[rank] = entry
            back.append(rank)
        for rank in back:
            heappush(heap, rank)
        return chosen
