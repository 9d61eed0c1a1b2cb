"""Load-aware rebalancing rounds in the simulated cluster (the ``load-skew`` scenario, issue 33
item 3), with static weights measured beside them on the same loads.

Every ``period_s`` (a round, on the scenario's logical clock) every running member is given the
round's load figures (``SwimNode.set_loads``: the model's rates, quantised to a ``LoadReport``,
stamped with the round's time), and a stable view commits them (``View.loads``; rule 12 in
docs/ownership.md: the first-ranked member holding a lease proposes its view again with them).
``plan_after_s`` later every running member computes ``placement.rebalance.plan`` from *its own*
stable view alone - the committed members, weights and load figures - with its own move bucket
(``MoveBudget``) refilled to the figures' committed time, and sets its own weight to what the
plan gives it, through the same path an operator's ``--weight`` change takes (gossiped, then
committed by the next stable view, whose partitions move by handoff; ``simulations.invariants``
checks there is never a second owner). A member plans once per committed set of figures. No
member plans for another and nobody coordinates: the weights converge because every member
computes the same plan from the same committed input, which ``plans_agree`` checks (members that
planned from the same view must have computed bit-identical weights and the same bucket).

Simplifications: every member is given the same, complete figures (the model's), where a node
would know the rates of what it leads and learn the others' by gossip; and the bucket is each
member's own, refilled by committed times, so only members that planned from the same committed
views hold the same one (one that missed a round's view would not). On a system without
exclusive ownership there are no stable views: members plan from their gossip view and read the
figures from the model.

Measured: the max/mean member load of what members actually own (sampled, true rates) and of
the static equal-weight table on the same loads; the partitions moved per round, as planned and
as observed (owner changes in the samples, which include any intermediate view), and per hour.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from placement import PlacementTable
from placement.pinning import PinPlan, plan_pins
from placement.pins import decode_pins, encode_pins
from placement.rebalance import LoadReport, MoveBudget, Plan, RebalanceConfig, plan
from placement.table import TableConfig

from .load_model import LoadModel
from .nodes import SwimNode

__all__ = ["LoadRounds"]


class LoadRounds:
    """Schedules the rounds and the load samples on ``cluster`` and reports ``result()``."""

    def __init__(self, cluster, model: LoadModel, *, period_s: float, first_s: float, load_aware: bool,
                 sample_s: float = 30.0, settle_s: float = 60.0, plan_after_s: float = 10.0,
                 rebalance: RebalanceConfig | None = None, by: str = "weights") -> None:
        if by not in ("weights", "pins"):
            raise ValueError(f"balance by 'weights' or 'pins', not {by!r}")
        self.by = by
        self.cluster = cluster
        self.sim = cluster.sim
        self.model = model
        self.period_s, self.first_s, self.sample_s, self.settle_s = period_s, first_s, sample_s, settle_s
        self.plan_after_s = plan_after_s
        self.load_aware = load_aware
        self.rebalance = rebalance or RebalanceConfig()
        p = cluster.placement
        self.config = TableConfig(p.partitions, p.replicas, p.seed)
        self.t0 = self.sim.now
        self.static = PlacementTable.from_config(self.config, {n.node_id: n.weight for n in self._members()})
        self.budgets: dict[str, MoveBudget] = {}
        self.planned_at: dict[str, int] = {}  # member -> committed time of the figures it last planned from
        self.rounds: list[dict[str, Any]] = []
        self.series: list[list[float]] = []
        self.agree = True
        self._moved_at_round = 0
        self._figures: dict[int, np.ndarray] = {}  # round's time -> its true rates, until it settles

    def start(self) -> None:
        self.sim.at(self.t0 + self.first_s, self._round)
        self.sim.at(self.t0, self._sample)
        self.cluster.metrics.reporters.append(self.result)

    # ------------------------------------------------------------------ measuring

    def _ratios(self, rates: np.ndarray | None = None) -> tuple[float, float]:
        """(max/mean of what the running members own, of the static table) at the current loads
        (or at ``rates``)."""
        rates = self.model.rates(self.sim.now - self.t0) if rates is None else rates
        mean = rates.sum() / max(1, len(self._members()))
        owned = max((rates[n.leads()].sum() for n in self._members()), default=0.0)
        ids, idx = self.static.owner_indices()
        static = np.bincount(idx[:, 0], weights=rates, minlength=len(ids))
        return float(owned / mean), float(static.max() / static.mean())

    def _members(self) -> list[SwimNode]:
        return [n for n in self.cluster.nodes.values() if isinstance(n, SwimNode) and n.up and not n.leaving]

    def _sample(self) -> None:
        live, static = self._ratios()
        self.series.append([round(self.sim.now - self.t0, 3), round(live, 4), round(static, 4)])
        self.sim.at(self.sim.now + self.sample_s, self._sample)

    # ------------------------------------------------------------------ a round

    def _round(self) -> None:
        at_s = round(self.sim.now - self.t0)  # the round's logical time (whole seconds)
        live, static = self._ratios()
        moved_seen = self.cluster.metrics.moved - self._moved_at_round
        self._moved_at_round = self.cluster.metrics.moved
        if self.rounds:
            self.rounds[-1]["moved_seen"] = moved_seen
        record: dict[str, Any] = {"at": at_s, "ratio": round(live, 4), "static": round(static, 4)}
        if self.load_aware:
            self._figures[at_s] = self.model.rates(at_s)
            codes = LoadReport.of(self._figures[at_s]).codes
            for n in self._members():
                n.set_loads(codes, at_s)  # what this member measured: its stable view commits it
            self.sim.at(self.sim.now + self.plan_after_s, self._plan_round, record, LoadReport(codes), at_s)
        self.rounds.append(record)
        self.sim.at(self.sim.now + self.period_s, self._round)

    def _plan_round(self, record: dict[str, Any], reported: LoadReport, at_s: int) -> None:
        plans = self._plan_everywhere(reported, at_s)
        if self.by == "pins":
            for m, (_, loads_at, p, base) in plans.items():
                if isinstance(p, PinPlan) and p.changed:
                    self.cluster.nodes[m].set_pins(encode_pins(p.pins), base, loads_at)
        else:
            mine = {m: p.weights[m] for m, (_, _, p, _) in plans.items()
                    if isinstance(p, Plan) and p.changed and m in p.weights}
            if mine:
                self.cluster.set_weights(mine)
        first = next(iter(plans.values()), None)
        if first is not None:
            p = first[2]
            record.update(planned=p.changed, reason=p.reason, expected=round(p.ratio_after, 4),
                          moved_planned=p.moved, views=sorted({num for num, _, _, _ in plans.values()}),
                          loads_at=sorted({at for _, at, _, _ in plans.values()}))
        record["members_planned"] = len(plans)
        self.sim.at(self.sim.now + self.settle_s, self._settled, record)

    def _plan_everywhere(self, reported: LoadReport, at_s: int) -> dict[str, tuple[int, int, Plan | PinPlan, bytes]]:
        """Every running member plans from its own stable view, with the load figures it
        committed, once per committed set (without exclusive ownership: from its gossip view,
        number 0, and the round's figures as reported); plans from equal views must agree.
        member -> (view number, committed time of the figures, plan, the view's pins)."""
        plans: dict[str, tuple[int, int, Plan | PinPlan, bytes]] = {}
        by_view: dict[tuple, tuple[Plan | PinPlan, MoveBudget]] = {}
        for n in self._members():
            own = n.own
            base = b""
            if own is None:
                if self.by == "pins":
                    continue  # pins are committed by stable views: none without exclusive ownership
                num, ck, weights, report, loads_at = 0, 0, dict(n.view), reported, at_s
            else:
                v = own.lease.views.view
                if len(v.loads) != self.config.partitions:
                    continue  # no stable view yet, or it commits no figures (for this table)
                num, ck, weights, report, loads_at = v.num, v.ck, v.weighted(), LoadReport(v.loads), v.loads_at
                base = v.pins
            if self.planned_at.get(n.node_id) == loads_at:
                continue  # planned from these figures already: nothing new was committed
            self.planned_at[n.node_id] = loads_at
            budget = self.budgets.get(n.node_id, MoveBudget(at_s=loads_at)).refilled(loads_at)
            p: Plan | PinPlan
            if self.by == "pins":
                table = self.cluster.placement.table({m: w for m, w in weights.items() if w > 0}, None,
                                                     decode_pins(base))
                p = plan_pins(table, report, self.rebalance, allowance=budget.tokens)
            else:
                p = plan(weights, report, self.config, self.rebalance, allowance=budget.tokens)
            self.budgets[n.node_id] = budget.spent(p.moved, self.config.partitions)
            seen = by_view.setdefault((num, ck, *sorted(weights.items())), (p, budget))
            if seen != (p, budget):
                self.agree = False
            plans[n.node_id] = (num, loads_at, p, base)
        return plans

    def _settled(self, record: dict[str, Any]) -> None:
        record["ratio_settled"] = round(self._ratios()[0], 4)
        # The same ownership under the figures the round planned from: what a planner can know.
        # The difference is the drift since (at N=64 one drift event between a round and its
        # settling moved one member by up to 0.31 of the mean: docs/benchmarks-log.md).
        record["ratio_settled_figures"] = round(self._ratios(self._figures.pop(record["at"]))[0], 4)

    # ------------------------------------------------------------------ result

    def result(self) -> dict[str, Any]:
        live, static = self._ratios()
        p = self.config.partitions
        if self.rounds:
            self.rounds[-1]["moved_seen"] = self.cluster.metrics.moved - self._moved_at_round
        hours = (self.sim.now - self.t0) / 3600 or 1.0
        seen = [r.get("moved_seen", 0) for r in self.rounds]
        # After the first two rounds (the start-up skew's correction): what drift costs.
        steady_h = (self.sim.now - self.t0 - self.first_s - 2 * self.period_s) / 3600
        planned = [r.get("moved_planned", 0) for r in self.rounds]
        return {
            "load_max_over_mean_static": round(static, 4),
            "load_max_over_mean": round(live, 4),
            "load_max_over_mean_series": self.series,
            "load_rounds": self.rounds,
            "moved_fraction_max_step": round(max(seen, default=0) / p, 4),
            "moved_fraction_max_step_planned": round(max(planned, default=0) / p, 4),
            "moved_fraction_per_hour": round(self.cluster.metrics.moved / p / hours, 4),
            "moved_fraction_per_hour_steady": (round(sum(seen[2:]) / p / steady_h, 4) if steady_h > 0 else None),
            "plans_agree": self.agree,
        }
