"""What the console shows of load-aware weights: ``GET /v1/balancing`` (pure: no clock, no I/O).

So an operator sees who is hot and what the node did about it (issue 33 item 5):

- per member: its load, load/mean, its weight as gossiped, as the placement holds it (the stable
  view's) and as the last plan would have it;
- the last plans (``placement.service.load_history``): the view each was planned from, max/mean
  before and as predicted after, partitions moved, weights changed (or, by pins, which
  partitions moved from whom to whom).

Which figures the load column sums, and why: the ones this node *gathered* last (every member's
``GET /v1/load``, merged), in work per second, over the partitions each member leads in this
node's placement. The committed figures the plans use are one log-scale byte per partition,
relative to the hottest one: right for planning, unitless for a reader; and the gathered ones are
newer by up to a commit period. A member that did not answer the last round has its partitions
read as idle there (``answered`` false), as the plans would.

A node without ``--load-aware`` answers ``load_aware: false`` and a note saying so (the page
shows the note, not an empty panel).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, Field

from ...rebalance import Plan
from ...table import PlacementTable

if TYPE_CHECKING:
    from ..load_balance import LoadBalancer

OFF_NOTE = ("this node runs without --load-aware: weights stay as given (--weight) and nothing is planned; "
            "start every node with --load-aware SECONDS for weights that follow measured load")
LOAD_NOTE = ("load: work per second on the partitions each member leads in this node's placement, from the "
             "figures this node gathered last (every member's GET /v1/load, merged); plans use the figures a "
             "stable view committed")


def leader_loads(rates: np.ndarray, table: PlacementTable) -> dict[str, float]:
    """Sum of ``rates`` over the partitions each member of ``table`` leads ({} if the sizes differ)."""
    ids, idx = table.owner_indices()
    if len(rates) != table.partitions or not idx.shape[1]:
        return {}
    leaders = idx[:, 0]
    led = leaders >= 0
    sums = np.bincount(leaders[led], weights=rates[led], minlength=len(ids))
    return {m: float(sums[i]) for i, m in enumerate(ids)}


def balancing(node_id: str, balancer: LoadBalancer | None, table: PlacementTable,
              gossiped: Mapping[str, float]) -> dict[str, Any]:
    """The body of ``GET /v1/balancing`` (``BalancingOut``). ``table``: the placement this node
    serves; ``gossiped``: id -> weight of the live members, as gossip reports them."""
    if balancer is None:
        return {"node": node_id, "load_aware": False, "note": OFF_NOTE, "every_s": None, "trigger": None,
                "by": None, "pinned": len(table.pins),
                "rounds": 0, "unanswered": 0, "plans": 0, "held_back": 0, "budget_left": None,
                "planned_from": None, "figures": None, "members": [], "steps": []}
    g, last = balancer.gathered, balancer.last_plan
    placed = dict(table.members)
    planned = dict(last.weights) if isinstance(last, Plan) else {}
    ids = sorted(m for m in set(placed) | set(gossiped) | set(planned)
                 if max(placed.get(m, 0.0), gossiped.get(m, 0.0), planned.get(m, 0.0)) > 0)
    loads = leader_loads(g.rates, table) if g is not None else {}
    leading = [loads.get(m, 0.0) for m in ids if placed.get(m, 0.0) > 0]
    mean = sum(leading) / len(leading) if leading and loads else 0.0
    rows = []
    for m in ids:
        load = loads.get(m, 0.0) if g is not None and loads else None
        rows.append({
            "id": m, "load": None if load is None else round(load, 4),
            "load_over_mean": round(load / mean, 4) if load is not None and mean > 0 and placed.get(m, 0.0) > 0
            else None,
            "weight": gossiped.get(m), "placed_weight": placed.get(m), "planned_weight": planned.get(m),
            "answered": None if g is None else m not in g.unanswered})
    return {
        "node": node_id, "load_aware": True, "note": LOAD_NOTE, "every_s": balancer.every_s,
        "trigger": balancer.rebalance.trigger, "by": balancer.by, "pinned": len(table.pins),
        "rounds": balancer.rounds, "unanswered": balancer.unanswered,
        "plans": balancer.plans, "held_back": balancer.held_back,
        "budget_left": round(float(balancer.budget.tokens), 6),
        "planned_from": balancer.planned_at if balancer.planned_at >= 0 else None,
        "figures": None if g is None else {
            "at": g.at, "round": g.round, "asked": list(g.asked), "unanswered": list(g.unanswered),
            "total": round(float(g.rates.sum()), 4), "mean": round(mean, 4)},
        "members": rows, "steps": [s.to_dict() for s in balancer.history.steps()],
    }


# ----- the documented body (OpenAPI) --------------------------------------------------------------
class FiguresOut(BaseModel):
    at: float = Field(description="when this node gathered them, wall-clock seconds since the epoch")
    round: int = Field(description="the gathering round (every --load-aware SECONDS / 2)")
    asked: list[str] = Field(description="the other members asked for their GET /v1/load")
    unanswered: list[str] = Field(description="those whose figures the round went without (their partitions "
                                  "read as idle)")
    total: float = Field(description="work per second over all partitions")
    mean: float = Field(description="mean load of the members that lead partitions")


class MemberLoadOut(BaseModel):
    id: str
    load: float | None = Field(description="work per second on the partitions it leads (null: nothing gathered yet)")
    load_over_mean: float | None = Field(description="load over the mean load of the members that lead partitions "
                                         "(above trigger: hot)")
    weight: float | None = Field(description="its weight as gossip reports it now (null: not live)")
    placed_weight: float | None = Field(description="its weight in the placement this node serves (exclusive "
                                        "mode: the stable view's)")
    planned_weight: float | None = Field(description="its weight in the last plan (null: no plan yet)")
    answered: bool | None = Field(description="its figures are in the last round (null: no round yet)")


class WeightChangeOut(BaseModel):
    old: float
    new: float


class PartitionMoveOut(BaseModel):
    partition: int
    old: str = Field(description="its leader before the plan")
    new: str = Field(description="its leader after: the member it is pinned to, or back to its rendezvous leader")


class PlanStepOut(BaseModel):
    view: int = Field(description="the stable view planned from (the latest, for folded plans)")
    first_view: int = Field(description="the first view of folded plans (= view for one plan)")
    loads_at: int = Field(description="the committed figures' time, seconds since the epoch")
    at: float = Field(description="when this node planned, wall-clock seconds since the epoch")
    reason: str = Field(description="planned | balanced | small gain | no budget")
    changed: bool
    max_over_mean_before: float
    max_over_mean_after: float = Field(description="as the plan predicts from the same figures")
    moved: int = Field(description="partitions whose leader the plan changes")
    partitions: int
    weights: dict[str, WeightChangeOut] = Field(description="the members whose weight the plan changes")
    moves: list[PartitionMoveOut] = Field(description="--balance-by pins: the partitions the plan moves, from "
                                          "whom to whom (the first 32 by partition; moved counts them all)")
    own: str = Field(description="this node's own weight: set (to the plan's) | held (the plan's would undo its "
                     "last step) | kept (unchanged by the plan); pins: the plan's pins handed on (--balance-by pins)")
    count: int = Field(description="consecutive plans folded into this entry (they changed nothing)")


class BalancingOut(BaseModel):
    node: str
    load_aware: bool = Field(description="this node runs with --load-aware")
    note: str = Field(description="what the figures are, or why there are none")
    every_s: float | None = Field(description="--load-aware SECONDS")
    trigger: float | None = Field(description="plans are made only above this max/mean")
    by: str | None = Field(description="--balance-by: weights (each member plans its weight) | pins (chosen "
                           "partitions pinned by the stable view); null when off")
    pinned: int = Field(description="partitions the placement this node serves pins (docs/ownership.md, rule 13)")
    rounds: int
    unanswered: int = Field(description="member answers the rounds went without, in all")
    plans: int
    held_back: int = Field(description="plans whose weight for this node would have undone its last step")
    budget_left: float | None = Field(description="move budget left, a fraction of the partitions")
    planned_from: int | None = Field(description="the committed figures' time the last plan used")
    figures: FiguresOut | None = Field(description="the last round's figures (null: none yet, or off)")
    members: list[MemberLoadOut] = Field(description="members with a positive weight, by id")
    steps: list[PlanStepOut] = Field(description="the last plans, oldest first (at most 20 entries)")
