"""Load-aware pins: a deterministic plan that moves *chosen* partitions toward balanced load,
within a move budget (issue 33; the alternative to ``rebalance``'s weights).

Why pins and not only weights. A weight sheds the partitions nearest its member's rendezvous
margin, whatever their load: one move carries an average partition, about 1.6 % of a member's
load at 64 partitions a member, while imbalance arrives in hot partitions of about 10 %. Under
the ``load-skew`` scenario's drift (80 % of the hot set an hour) weights held max/mean at 1.27
on Slicer's 4 %/h of moves, and needed 35 %/h to reach 1.14; moving the hot partitions
themselves held 1.14 on 2.9 %/h (docs/benchmarks-log.md, "drift or quantisation?"). Slicer
(Adya et al., OSDI 2016) moves chosen key ranges for the same reason.

What a plan is. A stable view commits the pins (``ownership.views.View.pins``, rule 13), and
``PlacementTable``'s pins put a pinned partition's leadership on the pinned member (the README's
"Pins"). ``plan_pins`` is a pure function of what a view commits - its table (members, weights,
pins) and one load figure per partition (``LoadReport``) - plus the move bucket, and uses
integer arithmetic only (integer load levels, ties broken by member id and partition number),
so every member that holds the view computes the same pins, with no coordinator.

The search (greedy, as Slicer's "move a hot slice off the hottest task"): while max/mean is over
``trigger`` and the step's budget lasts, take the most loaded member and, of its partitions,
the one move that lowers the maximum most: to the least loaded member (a new pin, or none if
that member is its rendezvous leader), or, for a pinned partition, back to its rendezvous
leader (the pin dropped). A partition is moved at most once a plan. The pins stay within
``max_pins`` (a fraction of the partitions: bounded view size, and most partitions follow the
rendezvous order a client can compute without them); at the bound only moves that add no pin
are tried. Stopping at ``trigger`` rather than at balance is what keeps the moves near Slicer's
4 %/h: replayed over four hours of ``load-skew`` at N=16, P=1,024 (``bench_load_plan.py
--variants pins``, five seeds; the stopping point swept in a scratch copy), stopping at 1.0
moved 6.4 %/h for a mean max/mean of 1.135, at 1.05 7.3 %/h for 1.129, at 1.1 2.7 %/h for 1.144
(weights: 5.7 %/h for 1.268): the drift undoes a finer balance within a round or two anyway.
Hysteresis as ``rebalance``: no plan at or below ``trigger``, none gaining less than
``min_gain``.

What pins cannot do either: a partition heavier than about 1.2x a member's mean load caps
max/mean above 1.2 under any placement of whole partitions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

import numpy as np

from .errors import InvalidConfigError
from .rebalance import LoadReport, RebalanceConfig
from .table import PlacementTable

__all__ = ["PinPlan", "plan_pins", "MAX_PINS_FRACTION"]

#: At most this fraction of the partitions is pinned (``plan_pins``'s ``max_pins`` default).
MAX_PINS_FRACTION: Final = Fraction(1, 4)
_DEFAULTS: Final = RebalanceConfig()


@dataclass(frozen=True)
class PinPlan:
    """The planner's answer: the pins a view should commit (equal to the table's when
    ``changed`` is false), max/mean load before and after (by the committed figures), and the
    partitions whose leader changes."""

    pins: dict[int, str]
    changed: bool
    reason: str
    ratio_before: float
    ratio_after: float
    moved: int
    partitions: int

    @property
    def moved_fraction(self) -> float:
        return self.moved / self.partitions


def plan_pins(table: PlacementTable, loads: LoadReport, rebalance: RebalanceConfig = _DEFAULTS, *,
              allowance: float | Fraction = 1, max_pins: Fraction = MAX_PINS_FRACTION) -> PinPlan:
    """New pins for ``table`` (a stable view's: its weights and pins) that bring max/mean load
    down, moving at most ``min(step_budget, allowance)`` of the partitions, with at most
    ``max_pins`` of them pinned. Equal capacities (the weights are the operator's)."""
    partitions = table.partitions
    if loads.partitions != partitions:
        raise InvalidConfigError(f"the load report has {loads.partitions} partitions, the table {partitions}")
    levels = loads.levels()
    ids, idx = table.owner_indices()
    pins = table.pins
    if not idx.shape[1] or len(ids) < 2:
        return PinPlan(pins, False, "balanced", 1.0, 1.0, 0, partitions)
    owner = idx[:, 0].astype(np.int64)
    natural = table.with_pins({}).owner_indices()[1][:, 0] if pins else owner
    n = len(ids)
    sums = np.zeros(n, dtype=np.int64)
    np.add.at(sums, owner, levels)
    total = int(levels.sum())

    def ratio(s: np.ndarray) -> Fraction:
        return Fraction(int(s.max()) * n, total) if total else Fraction(1)

    ratio0 = ratio(sums)
    trigger = Fraction(rebalance.trigger)
    if ratio0 <= trigger:
        return PinPlan(pins, False, "balanced", float(ratio0), float(ratio0), 0, partitions)
    allowed = math.floor(min(Fraction(rebalance.step_budget), Fraction(allowance)) * partitions)
    cap = math.floor(max_pins * partitions)
    # Pinned: a pin that places its partition elsewhere than the rendezvous order would (one
    # that agrees with it, after members changed, is dropped with the next plan).
    pinned = owner != natural
    count = int(pinned.sum())
    owner = owner.copy()
    moved: set[int] = set()
    while len(moved) < allowed and ratio(sums) > trigger:
        order = sorted(range(n), key=lambda i: (-int(sums[i]), ids[i]))  # most loaded first
        top, bottom = order[0], order[-1]
        peak_now = int(sums[top])
        mine = np.flatnonzero(owner == top)
        mine = mine[np.fromiter((p not in moved for p in mine.tolist()), dtype=bool, count=len(mine))]
        if not len(mine):
            break
        lv = levels[mine]
        best: tuple[int, int, int, int] | None = None  # (peak, pins after, partition, destination)
        # To the least loaded member: the others' maximum is the second member's load.
        rest = int(sums[order[1]]) if n > 2 else 0
        nat = natural[mine]
        adds = (nat != bottom) & ~pinned[mine]  # a new pin (a pinned one moving keeps one)
        drops = pinned[mine] & (nat == bottom)
        peak = np.maximum(np.maximum(peak_now - lv, int(sums[bottom]) + lv), rest)
        ok = ~adds | (count < cap)
        if ok.any():
            cand = np.flatnonzero(ok)
            after = count + adds[cand].astype(np.int64) - drops[cand].astype(np.int64)
            k = cand[np.lexsort((mine[cand], after, peak[cand]))[0]]
            best = (int(peak[k]), int(count + adds[k] - drops[k]), int(mine[k]), bottom)
        # A pinned partition back to its rendezvous leader (its pin dropped).
        back = np.flatnonzero(pinned[mine] & (nat != bottom) & (nat != top))
        for k in back.tolist():
            p, dest, load = int(mine[k]), int(nat[k]), int(lv[k])
            others = max((int(sums[i]) for i in order[:3] if i not in (top, dest)), default=0)
            cand_peak = max(peak_now - load, int(sums[dest]) + load, others)
            option = (cand_peak, count - 1, p, dest)
            if best is None or option < best:
                best = option
        if best is None or best[0] >= peak_now:
            break
        _, count, p, dest = best
        sums[top] -= levels[p]
        sums[dest] += levels[p]
        owner[p] = dest
        pinned[p] = bool(natural[p] != dest)
        moved.add(p)
    ratio1 = ratio(sums)
    if ratio0 - ratio1 < Fraction(rebalance.min_gain):
        return PinPlan(pins, False, "small gain" if allowed else "no budget", float(ratio0), float(ratio0), 0,
                       partitions)
    new = {int(p): ids[int(owner[p])] for p in np.flatnonzero(pinned).tolist()}
    return PinPlan(new, new != pins, "planned", float(ratio0), float(ratio1), len(moved), partitions)
