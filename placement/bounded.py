"""Rendezvous placement with bounded loads: a capacitated stable matching on HRW scores.

Plain HRW balances only up to binomial noise (max/mean ~1.4 at 65,536 partitions on
1,000 members). Bounded loads (Mirrokni, Thorup & Zadimoghaddam 2016; HAProxy
``hash-balance-factor``) cap each member at ``ceil(c * expected)`` replica slots.

Every (partition, member) pair has one HRW key (draw, -H, member index, partition), and
partitions and members both prefer smaller keys. With preferences derived from one global
order of pairs the stable matching is unique (no cycles of preference can form), and the
greedy algorithm finds it: scan pairs in key order, accept a pair when the partition still
needs replicas and the member still has room. So the result is a pure function of the
membership - every node computes it alone, in any order - and it changes little when the
membership does, because most pairs keep their relative order.

We scan only each partition's top-T members. A partition left short means its list was
too short: it gets a longer list and the scan runs again. The result is stable for the
full lists, because anything beyond a partition's top-T ranks below everything in it.

With replicas > 1 a stable matching can leave a partition short even though the caps
add up (every member it lacks is full: e.g. weights 1:2:1 with 2 replicas, where the
heavy member must hold every partition but is crowded out of some by the two light
ones). Such partitions then take their next-best members beyond the cap, again in
global key order, so the result stays unique and complete (and a row stays in the
partition's preference order, leader first).

Expected load is computed exactly (``Fraction``) with water-filling: a member can hold
at most P replica slots (one per partition), and what heavy members cannot take is
spread over the rest in proportion to weight, so the caps always admit a full matching.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .rendezvous import Members, Ranked, rank_many


def expected_loads(units: list[int], partitions: int, replicas: int) -> list[Fraction]:
    """Expected replica slots per member, proportional to weight but at most one per partition."""
    total_slots = partitions * replicas
    expected: list[Fraction | None] = [None] * len(units)
    free = set(range(len(units)))
    while free:
        share = Fraction(total_slots - partitions * (len(units) - len(free)), sum(units[i] for i in free))
        over = [i for i in free if share * units[i] > partitions]
        if not over:
            for i in free:
                expected[i] = share * units[i]
            break
        for i in over:  # capped at one replica per partition; the rest spreads over others
            expected[i] = Fraction(partitions)
            free.discard(i)
    return expected  # type: ignore[return-value]


def capacities(units: list[int], partitions: int, replicas: int, c: Fraction) -> list[int]:
    return [min(partitions, math.ceil(c * e)) for e in expected_loads(units, partitions, replicas)]


def assign(ms: Members, partitions: int, replicas: int, seed: int, c: Fraction) -> np.ndarray:
    """Owner indices (P, r) of the capacitated stable matching, each row in preference order."""
    r = min(replicas, len(ms))
    if r == 0:
        return np.empty((partitions, 0), dtype=np.int32)
    caps = capacities(ms.units.tolist(), partitions, r, c)
    depth = min(len(ms), r + 3)
    lists = rank_many(np.arange(partitions), ms, seed, depth)
    while True:
        owners, short = _greedy(lists, partitions, r, caps)
        if not short:
            return owners
        if depth == len(ms):  # complete lists: fill the remaining slots over the caps
            filled = _greedy(lists, partitions, r, [partitions] * len(ms), owners)[0]
            return _in_preference_order(filled, lists, short)
        depth = min(len(ms), 2 * depth)
        longer = rank_many(np.asarray(short), ms, seed, depth)
        lists = _extend(lists, short, longer, depth)


def _extend(lists: Ranked, rows: list[int], longer: Ranked, depth: int) -> Ranked:
    """Widen every list to ``depth`` columns (padding with -1) and fill the given rows."""
    pad = depth - lists.idx.shape[1]
    fill = ((0, 0), (0, pad))
    out = Ranked(
        np.pad(lists.idx, fill, constant_values=-1),
        np.pad(lists.h, fill),
        np.pad(lists.draw, fill, constant_values=np.uint64((1 << 64) - 1)),
    )
    out.idx[rows], out.h[rows], out.draw[rows] = longer.idx, longer.h, longer.draw
    return out


def _greedy(
    lists: Ranked, partitions: int, r: int, caps: list[int], start: np.ndarray | None = None
) -> tuple[np.ndarray, list[int]]:
    """Scan listed pairs in global key order; return owners and partitions left short.

    ``start``: owners already fixed (-1 = open slot); only open slots are filled.
    """
    p = np.repeat(np.arange(partitions), lists.idx.shape[1])
    m, h, d = lists.idx.ravel(), lists.h.ravel(), lists.draw.ravel()
    valid = m >= 0
    p, m, h, d = p[valid], m[valid], h[valid], d[valid]
    order = np.lexsort((p, m, ~h, d))
    if start is None:
        owners, taken = np.full((partitions, r), -1, dtype=np.int32), set()
    else:
        owners = start.copy()
        taken = {(pi, mi) for pi, row in enumerate(owners.tolist()) for mi in row if mi >= 0}
    room = list(caps)
    need = (owners < 0).sum(axis=1).tolist()
    remaining = sum(need)
    for pi, mi in zip(p[order].tolist(), m[order].tolist()):
        if need[pi] and room[mi] and (pi, mi) not in taken:
            owners[pi, r - need[pi]] = mi
            need[pi] -= 1
            room[mi] -= 1
            remaining -= 1
            if not remaining:
                break
    short = [i for i, n in enumerate(need) if n]
    return owners, short


def _in_preference_order(owners: np.ndarray, lists: Ranked, rows: list[int]) -> np.ndarray:
    """Reorder the given rows so the partition's most preferred member leads."""
    for pi in rows:
        rank = {m: j for j, m in enumerate(lists.idx[pi].tolist())}
        owners[pi] = sorted(owners[pi].tolist(), key=rank.__getitem__)
    return owners
