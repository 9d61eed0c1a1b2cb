"""Exact ownership accounting: who owned which partition over which interval of simulated time.

The sampled tally in ``metrics`` asks every node what it leads every 0.5 s, which misses short
overlaps and cannot tell a 2 s drain from a 0.1 s one. Nodes that run ``ownership.core``
report every ``Acquired`` and ``Ended`` (with the time ownership really ended: after a freeze
that is earlier than the moment the node noticed), and a crash ends all of a node's intervals at
once. Dual ownership is then the measure of time where two intervals of one partition overlap,
exactly, and fencing epochs are checked to rise with every acquisition of a partition.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ownership import Acquired, Ended, Release

from .stats import percentiles

__all__ = ["OwnershipLog", "overlaps"]


def overlaps(intervals: list[tuple[float, float, int]], lo: float, hi: float) -> tuple[float, float, list]:
    """(seconds covered by two or more intervals, seconds covered by none, overlapping pairs)
    within [lo, hi]; intervals are (start, end, owner). Sweep over sorted end points."""
    points = []
    for start, end, who in intervals:
        s, e = max(start, lo), min(end, hi)
        if e > s:
            points.append((s, 1, who))
            points.append((e, -1, who))
    points.sort(key=lambda x: (x[0], x[1]))  # ends before starts at the same instant: touching is fine
    dual = orphan = 0.0
    depth, t = 0, lo
    holders: list[int] = []
    pairs = []
    for x, step, who in points:
        if depth >= 2:
            dual += x - t
        elif depth == 0:
            orphan += x - t
        t = x
        depth += step
        if step > 0:
            if holders:
                pairs.append((x, tuple(holders), who))
            holders.append(who)
        else:
            holders.remove(who)
    if depth == 0:
        orphan += hi - t
    return dual, orphan, pairs


class OwnershipLog:
    """Intervals per partition, from ownership actions; ``summary`` turns them into metrics."""

    def __init__(self) -> None:
        self.open: dict[tuple[int, int], tuple[float, int]] = {}  # (partition, node) -> (start, epoch)
        self.closed: dict[int, list[tuple[float, float, int]]] = {}
        self.last_epoch: dict[int, int] = {}
        #: partition -> (node, at) of the acquisition that carried ``last_epoch``
        self.last_acquired: dict[int, tuple[int, float]] = {}
        #: Acquisitions whose epoch was not above every earlier epoch of the partition (the
        #: invariant ``simulations.invariants.EpochsRise`` fails the run on the first one).
        self.epoch_regressions: list[dict[str, Any]] = []
        self.release_started: dict[int, float] = {}
        self.move_latencies: list[tuple[float, float]] = []  # (acquired at, since release began)
        self.timed_out = 0
        self.records = 0
        #: Called as on_record(node, action) after each record (the dual-ownership invariant).
        self.on_record: Callable[[int, Any], None] | None = None

    def record(self, node: int, action: Any, now: float) -> None:
        self.records += 1
        self._record(node, action)
        if self.on_record is not None:
            self.on_record(node, action)

    def _record(self, node: int, action: Any) -> None:
        p = action.partition
        if isinstance(action, Acquired):
            last = self.last_epoch.get(p, 0)
            if action.epoch <= last:
                by, since = self.last_acquired[p]
                self.epoch_regressions.append({"partition": p, "node": node, "epoch": action.epoch,
                                               "previous": last, "at": round(action.at, 3),
                                               "previous_node": by, "previous_at": round(since, 3)})
            else:
                self.last_epoch[p] = action.epoch
                self.last_acquired[p] = (node, action.at)
            self.open[(p, node)] = (action.at, action.epoch)
            started = self.release_started.pop(p, None)
            if started is not None:
                self.move_latencies.append((action.at, action.at - started))
        elif isinstance(action, Release):
            if action.reason == "moved" or action.reason == "leaving":
                self.release_started.setdefault(p, action.at)
        elif isinstance(action, Ended):
            start, _ = self.open.pop((p, node), (None, 0))
            if start is not None:
                self.closed.setdefault(p, []).append((start, action.at, node))
            self.timed_out += action.timed_out

    def takeover_after(self, partitions, at: float) -> float | None:
        """When every one of ``partitions`` had been acquired again after ``at`` (a crash),
        exactly; None if one never was."""
        wanted = set(partitions)
        first: dict[int, float] = {}  # partition -> its first acquisition at or after ``at``
        spans = [(p, s) for p in wanted for s, _, _ in self.closed.get(p, ())]
        spans += [(p, s) for (p, _), (s, _) in self.open.items() if p in wanted]
        for p, s in spans:
            if s >= at:
                first[p] = min(s, first.get(p, math.inf))
        if wanted - first.keys():
            return None
        return max(first.values(), default=at)

    def summary(self, t0: float, end: float, partitions: int,
                lease_ends: dict[int, float] | None = None) -> dict[str, Any]:
        """``lease_ends``: per node, when its lease ends; an interval still open ends then if
        that is before ``end`` (the node is frozen and has not noticed yet)."""
        if not self.records:
            return {"exclusive": False}
        per: dict[int, list] = {p: list(v) for p, v in self.closed.items()}
        ends = lease_ends or {}
        for (p, node), (start, _) in self.open.items():
            per.setdefault(p, []).append((start, max(start, min(end, ends.get(node, end))), node))
        dual = orphan = 0.0
        examples: list[dict[str, Any]] = []
        unowned_at_end = 0
        for p in range(partitions):
            unowned_at_end += not any(s < e and s <= end <= e for s, e, _ in per.get(p, ()))
            d, o, pairs = overlaps(per.get(p, []), t0, end)
            dual += d
            orphan += o
            if pairs and len(examples) < 5:
                at, holders, who = pairs[0]
                examples.append({"partition": p, "at": round(at - t0, 3), "holders": list(holders), "acquirer": who})
        return {
            "exclusive": True,
            "dual_owned_partition_s_exact": round(dual, 6),
            "orphan_partition_s_exact": round(orphan, 3),
            "unowned_at_end": unowned_at_end,  # liveness: partitions nobody owns when the run ends
            "dual_owned_examples": examples,
            "epoch_regressions": len(self.epoch_regressions),
            "handoff_latency_s": percentiles([d for at, d in self.move_latencies if at >= t0]),
            "handoffs_timed_out": self.timed_out,
        }
