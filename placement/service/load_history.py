"""What load-aware weights did lately on this node: the last plans, bounded (pure: no clock, no I/O).

``LoadBalancer`` records one ``PlanStep`` per plan it makes; the console (``GET /v1/balancing``)
shows them, so an operator sees each rebalance step: the view it was planned from, max/mean
before and as predicted after, how many partitions move and whose weights change (or, by pins,
which partitions move from whom to whom).

Why bounded, and why runs of "nothing to do" are folded: a node plans once per committed set of
figures, every ``--load-aware`` SECONDS, for as long as it runs; most plans of a balanced cluster
change nothing. One entry per plan would push the steps that moved partitions out of a short
ring within minutes, so consecutive plans that change nothing for the same reason are one entry
with a count (as ``console.events`` folds an ownership burst), and the ring keeps ``capacity``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

__all__ = ["DEFAULT_CAPACITY", "MOVES_SHOWN", "PlanHistory", "PlanStep"]

DEFAULT_CAPACITY = 20
#: A step keeps at most this many of its moves (a step may move 9 % of the partitions: 368 at
#: P=4,096, times 20 entries, for a panel that shows a line of them).
MOVES_SHOWN = 32


@dataclass(frozen=True)
class PlanStep:
    """One plan (or a run of plans that changed nothing for the same ``reason``).

    ``own``: what this node did with its own weight: ``"set"`` (gossiped the plan's),
    ``"held"`` (kept its weight: the plan's would undo its last step, ``REVERSAL_HOLD_PLANS``),
    ``"pins"`` (handed the plan's pins on: ``--balance-by pins``) or ``"kept"`` (the plan leaves
    it as it was)."""

    view: int  # the stable view planned from (the latest one, for a run)
    loads_at: int  # the committed figures' time, seconds since the epoch
    at: float  # when this node planned, wall-clock seconds since the epoch (for display)
    reason: str  # placement.rebalance.Plan.reason: planned | balanced | small gain | no budget
    changed: bool
    max_over_mean_before: float
    max_over_mean_after: float  # as predicted by the plan (its table, the same figures)
    moved: int  # partitions whose leader the plan changes
    partitions: int
    weights: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # id -> (old, new), changed only
    #: ``--balance-by pins``: partition -> (leader before, leader after) of the partitions the plan
    #: moves, the first ``MOVES_SHOWN`` by partition (``moved`` counts them all).
    moves: Mapping[int, tuple[str, str]] = field(default_factory=dict)
    own: str = "kept"
    count: int = 1  # plans folded into this entry
    first_view: int = 0  # the first view of the run (= view for a single plan)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["weights"] = {m: {"old": old, "new": new} for m, (old, new) in sorted(self.weights.items())}
        d["moves"] = [{"partition": p, "old": old, "new": new} for p, (old, new) in sorted(self.moves.items())]
        d["first_view"] = self.first_view or self.view
        d["max_over_mean_before"] = round(self.max_over_mean_before, 4)
        d["max_over_mean_after"] = round(self.max_over_mean_after, 4)
        return d


class PlanHistory:
    """The last ``capacity`` entries, oldest first."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("a plan history holds at least one entry")
        self._ring: deque[PlanStep] = deque(maxlen=capacity)
        self.recorded = 0  # plans recorded in all (folded ones included)

    def record(self, step: PlanStep) -> PlanStep:
        """Add a plan; one that changes nothing after another that changed nothing for the same
        reason replaces it as one entry, counted. Returns the entry held."""
        self.recorded += 1
        last = self._ring[-1] if self._ring else None
        if last is not None and not step.changed and not last.changed and step.reason == last.reason:
            self._ring.pop()
            step = replace(step, count=last.count + step.count, first_view=last.first_view or last.view)
        self._ring.append(step)
        return step

    def steps(self) -> list[PlanStep]:
        return list(self._ring)

    def __len__(self) -> int:
        return len(self._ring)
