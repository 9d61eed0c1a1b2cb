"""Load-aware rebalancing rounds in the simulated cluster (the ``load-skew`` scenario, issue 33
item 3), with static weights measured beside them on the same loads.

Every ``period_s`` (a round, on the scenario's logical clock) every running member computes
``placement.rebalance.plan`` from *its own* stable view (``Ownership.lease``: the committed
members and weights; on a system without exclusive ownership, its gossip view) and the round's
loads, with its own copy of the move bucket
(``MoveBudget``), and sets its own weight to what the plan gives it - through the same path an
operator's ``--weight`` change takes (gossiped, then committed by the next stable view, whose
partitions move by handoff; ``simulations.invariants`` checks there is never a second owner). No
member plans for another and nobody coordinates: the weights converge because every member
computes the same plan, which ``plans_agree`` checks (members that planned from the same view
must have computed bit-identical weights and the same bucket).

What is not real yet: the loads. A view does not commit load figures today (issue 33 item 1);
here every member reads the round's figures from the load model, quantised as a view would
carry them (``LoadReport``), as if they had been committed.

Measured: the max/mean member load of what members actually own (sampled, true rates) and of
the static equal-weight table on the same loads; the partitions moved per round, as planned and
as observed (owner changes in the samples, which include any intermediate view), and per hour.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from placement import PlacementTable
from placement.rebalance import LoadReport, MoveBudget, Plan, RebalanceConfig, plan
from placement.table import TableConfig

from .load_model import LoadModel
from .nodes import SwimNode

__all__ = ["LoadRounds"]


class LoadRounds:
    """Schedules the rounds and the load samples on ``cluster`` and reports ``result()``."""

    def __init__(self, cluster, model: LoadModel, *, period_s: float, first_s: float, load_aware: bool,
                 sample_s: float = 30.0, settle_s: float = 60.0,
                 rebalance: RebalanceConfig | None = None) -> None:
        self.cluster = cluster
        self.sim = cluster.sim
        self.model = model
        self.period_s, self.first_s, self.sample_s, self.settle_s = period_s, first_s, sample_s, settle_s
        self.load_aware = load_aware
        self.rebalance = rebalance or RebalanceConfig()
        p = cluster.placement
        self.config = TableConfig(p.partitions, p.replicas, p.seed)
        self.t0 = self.sim.now
        self.static = PlacementTable.from_config(self.config, {n.node_id: n.weight for n in self._members()})
        self.budgets: dict[str, MoveBudget] = {}
        self.rounds: list[dict[str, Any]] = []
        self.series: list[list[float]] = []
        self.agree = True
        self._moved_at_round = 0

    def start(self) -> None:
        self.sim.at(self.t0 + self.first_s, self._round)
        self.sim.at(self.t0, self._sample)
        self.cluster.metrics.reporters.append(self.result)

    # ------------------------------------------------------------------ measuring

    def _ratios(self) -> tuple[float, float]:
        """(max/mean of what the running members own, of the static table) at the current loads."""
        rates = self.model.rates(self.sim.now - self.t0)
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
            plans = self._plan_everywhere(at_s)
            mine = {m: p.weights[m] for m, (_, p) in plans.items() if p.changed and m in p.weights}
            if mine:
                self.cluster.set_weights(mine)
            first = next(iter(plans.values()), None)
            if first is not None:
                p = first[1]
                record.update(planned=p.changed, reason=p.reason, expected=round(p.ratio_after, 4),
                              moved_planned=p.moved, views=sorted({num for num, _ in plans.values()}))
            self.sim.at(self.sim.now + self.settle_s, self._settled, record)
        self.rounds.append(record)
        self.sim.at(self.sim.now + self.period_s, self._round)

    def _plan_everywhere(self, at_s: int) -> dict[str, tuple[int, Plan]]:
        """Every running member plans from its own stable view (without exclusive ownership: from
        its gossip view, number 0); plans from equal views must agree."""
        report = LoadReport.of(self.model.rates(at_s))
        plans: dict[str, tuple[int, Plan]] = {}
        by_view: dict[tuple, tuple[Plan, MoveBudget]] = {}
        for n in self._members():
            own = n.own
            if own is not None and not own.lease.num:
                continue  # no stable view yet
            num, weights = (0, dict(n.view)) if own is None else (own.lease.num, own.lease.weights)
            budget = self.budgets.get(n.node_id, MoveBudget(at_s=at_s)).refilled(at_s)
            p = plan(weights, report, self.config, self.rebalance, allowance=budget.tokens)
            self.budgets[n.node_id] = budget.spent(p.moved, self.config.partitions)
            seen = by_view.setdefault((num, *sorted(weights.items())), (p, budget))
            if seen != (p, budget):
                self.agree = False
            plans[n.node_id] = (num, p)
        return plans

    def _settled(self, record: dict[str, Any]) -> None:
        record["ratio_settled"] = round(self._ratios()[0], 4)

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
