"""Load-aware weights on a node (issue 33): gather the members' figures, plan from committed ones.

``placement node --load-aware SECONDS`` (exclusive mode). Every ``SECONDS / 2``:

1. **Gather.** The node asks every member of its stable view for its per-partition rates
   (``GET /v1/load``: what each measured, ``load_meter``), adds its own, and gives the merged
   figures, one log-scale byte per partition (``placement.rebalance.LoadReport``), to its
   ownership protocol (``ExclusiveRunner.set_loads``). With ``ExclusiveConfig.loads_every_s``
   set to ``SECONDS`` the rules then commit such figures in a stable view at most that often
   (docs/ownership.md, rule 12): a view that changes nothing but its figures.
2. **Plan.** On each stable view with figures newer than the last it planned from, the node runs
   ``placement.rebalance.plan`` on what the view committed - its members, weights and figures -
   so every member computes the same plan, bit for bit, with no coordinator; each then sets
   *its own* weight to the plan's (a gossip metadata update), and the next stable view carries
   the new weights: the handoffs move the partitions, one owner at a time. The move budget
   (``MoveBudget``: 9 % a step, 4 %/h) is refilled by the committed figures' time.
   With ``--balance-by pins`` (the default) the plan is ``placement.pinning.plan_pins``
   instead: it moves the hot partitions themselves, as pins, and each node hands the plan's
   pins to its ownership protocol (``set_pins``), whose first-ranked member proposes the stable
   view again with them (docs/ownership.md, rule 13). Weights stay the operator's.
3. **Show.** The latest round's figures (``Gathered``, in work per second) and the last plans
   (``load_history``) are kept for the console (``GET /v1/balancing``), so an operator sees who
   is hot and what each step moved.

Asking every member over HTTP costs N requests per member per round (N = 64, a 60 s round: about
2 requests a second per member); gossip would spread the figures without it, but a member's
figures (one byte per partition it leads) outgrow a gossip datagram's metadata at a few hundred
partitions a member. Capacities are taken as equal: ``--weight`` is the starting weight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from ownership.views import View

from ..errors import InvalidConfigError
from ..pinning import PinPlan, plan_pins
from ..pins import decode_pins, encode_pins
from ..rebalance import LoadReport, MoveBudget, Plan, RebalanceConfig, plan
from ..table import PlacementTable, TableConfig
from .load_history import MOVES_SHOWN, PlanHistory, PlanStep

__all__ = ["Gathered", "LoadBalancer"]

_log = logging.getLogger("placement.load")
#: How long one member's ``/v1/load`` may take before its figures are left out of this round.
ASK_TIMEOUT_S = 2.0
#: A member does not move its weight back the other way within this many plans of its last step.
REVERSAL_HOLD_PLANS = 3
#: After a step, the next plan uses figures at least this many periods newer than the step's
#: (one for the weights to be committed and the partitions to move, one to measure them).
SETTLE_PERIODS = 2


@dataclass(frozen=True)
class Gathered:
    """The figures of the latest round, kept for the console (``GET /v1/balancing``): in work
    per second, where the committed codes are log-scale levels relative to the largest rate.
    One array of P floats, replaced each round."""

    rates: np.ndarray  # merged rate of every partition (read-only)
    at: float  # wall-clock seconds since the epoch
    round: int
    asked: tuple[str, ...]  # the other members asked (sorted)
    unanswered: tuple[str, ...]  # those whose figures this round went without


class LoadBalancer:
    """One node's part (module docstring). ``own_rates``: this node's figures; ``addresses``:
    id -> HTTP base URL of the members to ask; ``set_loads(codes, at_s)``: to the ownership
    protocol; ``set_weight(w)``: this node's gossiped weight; ``by``: "weights" or "pins", and
    ``set_pins(pins, base, loads_at)``: to the ownership protocol (rule 13)."""

    def __init__(self, node_id: str, table_config: TableConfig, every_s: float, *,
                 own_rates: Callable[[], Mapping[int, float]], addresses: Callable[[], Mapping[str, str]],
                 set_loads: Callable[[bytes, int], Any], set_weight: Callable[[float], Any],
                 rebalance: RebalanceConfig | None = None, clock: Callable[[], float] = time.time,
                 by: str = "weights", set_pins: Callable[[bytes, bytes, int], Any] | None = None) -> None:
        if by not in ("weights", "pins") or (by == "pins" and set_pins is None):
            raise InvalidConfigError(f"balance by 'weights' or 'pins' (with set_pins), not {by!r}")
        self.by = by
        self._set_pins = set_pins
        self.node_id = node_id
        self.table_config = table_config
        self.every_s = every_s
        self._own_rates = own_rates
        self._addresses = addresses
        self._set_loads = set_loads
        self._set_weight = set_weight
        self._clock = clock  # wall clock: the figures' time the rules commit, and times shown
        self.rebalance = rebalance or RebalanceConfig()
        self.budget = MoveBudget()
        self.planned_at = -1  # the committed figures' time the last plan was made from
        self._next_figures = 0  # plan only from figures this new or newer (``view``)
        self.last_plan: Plan | PinPlan | None = None
        self.rounds = 0
        self.unanswered = 0  # members whose figures a round went without
        self.plans = 0
        self.held_back = 0  # plans whose weight for this member would have undone its last step
        self._last_change: tuple[int, int] | None = None  # (direction, plans then) of this member's weight
        self.gathered: Gathered | None = None  # the latest round's figures
        self.history = PlanHistory()  # the last plans, for the console
        self._planner: ThreadPoolExecutor | None = None  # (``view_soon``)
        self._closed = False

    # ----- gather ----------------------------------------------------------------------
    async def run(self) -> None:
        """Gather every ``every_s / 2`` until cancelled."""
        import httpx  # (service side only; imported where used, as the console's fan-out does)

        async with httpx.AsyncClient(timeout=ASK_TIMEOUT_S) as client:
            while True:
                await asyncio.sleep(self.every_s / 2)
                try:
                    await self.gather(client)
                except Exception:  # a round that fails leaves the figures as they were
                    _log.exception("gathering load figures failed; trying again next round")

    async def gather(self, client: Any) -> bytes:
        """One round: every member's figures merged (a partition two members report, during a
        handoff, counts at the larger rate) and handed on; returns the codes."""
        rates = np.zeros(self.table_config.partitions, dtype=np.float64)

        def add(figures: Mapping[int, float]) -> None:
            for p, r in figures.items():
                if 0 <= p < len(rates) and r > rates[p]:
                    rates[p] = r

        add(self._own_rates())
        others = {m: url for m, url in self._addresses().items() if m != self.node_id and url}

        async def ask(url: str) -> dict[int, float] | None:
            """A member's figures, or None: no answer in time, or an answer that is not a map of
            partition numbers to finite rates >= 0 (left out of this round, whole: one bad answer
            spoils neither the round nor the others' figures)."""
            try:
                r = await client.get(f"{url.rstrip('/')}/v1/load")
                r.raise_for_status()
                figures = r.json()["partitions"]
                out = {int(p): float(v) for p, v in figures.items()}
            except Exception:
                return None
            return out if all(np.isfinite(v) and v >= 0 for v in out.values()) else None

        asked = sorted(others)
        missing = []
        for member, figures in zip(asked, await asyncio.gather(*(ask(others[m]) for m in asked))):
            if figures is None:
                self.unanswered += 1
                missing.append(member)
            else:
                add(figures)
        codes = LoadReport.of(rates).codes
        self.rounds += 1
        now = self._clock()
        rates.setflags(write=False)
        self.gathered = Gathered(rates, now, self.rounds, tuple(asked), tuple(missing))
        self._set_loads(codes, int(now))
        return codes

    # ----- plan ------------------------------------------------------------------------
    def view_soon(self, view: View) -> Future[Plan | PinPlan | None] | None:
        """``view`` on this balancer's own thread, in the order views are given. A plan takes
        0.4-0.7 s at N=64, P=4,096 (the polish's chains: docs/benchmarks-log.md, "Load-aware
        weights: drift or quantisation?"); on the application's event loop it stalled every
        request that long, once a round. One worker keeps the views in order, so every member
        still plans from the same views in the same sequence; the weight it sets goes to the
        membership thread as before (``set_weight`` is thread-safe). None once closed."""
        if self._closed:
            return None
        if self._planner is None:
            self._planner = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"placement-plan-{self.node_id}")
        return self._planner.submit(self._view_logged, view)

    def _view_logged(self, view: View) -> Plan | PinPlan | None:
        try:
            return self.view(view)
        except Exception:  # a plan that fails changes nothing; the next view plans again
            _log.exception("planning load-aware weights from stable view %d failed", view.num)
            return None

    def close(self) -> None:
        """Stop planning: views not yet planned are dropped (the node is leaving or closed)."""
        self._closed = True
        if self._planner is not None:
            self._planner.shutdown(wait=False, cancel_futures=True)

    def view(self, view: View) -> Plan | PinPlan | None:
        """A new stable view: plan once per committed set of figures, and set this node's weight
        to the plan's (or hand its pins on). Returns the plan made, if any (each is recorded in
        ``history``)."""
        if not view.loads or view.loads_at < self._next_figures or self.node_id not in view.members:
            return None
        self.planned_at = view.loads_at
        budget = self.budget.refilled(view.loads_at)
        weights = view.weighted()
        if self.by == "pins":
            return self._pins(view, weights, budget)
        made = plan(weights, LoadReport(view.loads), self.table_config, self.rebalance, allowance=budget.tokens)
        self.plans += 1
        self.last_plan = made
        self.budget = budget.spent(made.moved, made.partitions) if made.changed else budget
        # After a step, not again from figures measured before it could show: the new weights
        # reach a view, the partitions move, and only figures of a whole period after that say
        # what the step did. Planning again from the next figures (the view that carried the
        # weights also carried newer figures, 2 s later) spent two steps' budget on one
        # imbalance (seen on processes, the console's history). Decided by the committed
        # figures' time alone, so every member skips the same views.
        self._next_figures = view.loads_at + (SETTLE_PERIODS * max(1, int(self.every_s)) if made.changed else 1)
        own = self._follow(made, weights[self.node_id])
        self.history.record(PlanStep(
            view.num, view.loads_at, self._clock(), made.reason, made.changed, made.ratio_before, made.ratio_after,
            made.moved, made.partitions, own=own,
            weights={m: (w, made.weights[m]) for m, w in sorted(weights.items()) if made.weights.get(m, w) != w}))
        return made

    def _pins(self, view: View, weights: dict[str, float], budget: MoveBudget) -> PinPlan:
        """Rule 13's plan: pins from the view's table and figures, handed to the ownership
        protocol, which proposes them while the view still holds what they were planned from.
        No reversal hold: every member plans the same pins, and the trigger's hysteresis keeps a
        balanced cluster put. Undecodable pins in the view plan as none (the table's reading)."""
        try:
            pins = decode_pins(view.pins)
        except InvalidConfigError:
            pins = {}
        table = PlacementTable.from_config(self.table_config, {m: w for m, w in weights.items() if w > 0}, pins=pins)
        made = plan_pins(table, LoadReport(view.loads), self.rebalance, allowance=budget.tokens)
        after = table.with_pins(made.pins)
        moves = {p: (table.owner(p), after.owner(p)) for p in table.moved(after, leaders=True)[:MOVES_SHOWN]}
        self.plans += 1
        self.last_plan = made
        self.budget = budget.spent(made.moved, made.partitions) if made.changed else budget
        self._next_figures = view.loads_at + (SETTLE_PERIODS * max(1, int(self.every_s)) if made.changed else 1)
        if made.changed:
            assert self._set_pins is not None
            _log.info("load-aware pins: max/mean %.3f -> %.3f moving %d partitions (%d pinned)",
                      made.ratio_before, made.ratio_after, made.moved, len(made.pins))
            self._set_pins(encode_pins(made.pins), view.pins, view.loads_at)
        self.history.record(PlanStep(
            view.num, view.loads_at, self._clock(), made.reason, made.changed, made.ratio_before, made.ratio_after,
            made.moved, made.partitions, own="pins" if made.changed else "kept", moves=moves))
        return made

    def _follow(self, made: Plan, now_w: float) -> str:
        """Set this node's weight to the plan's, unless that undoes its last step: "set", "held"
        or "kept" (the plan leaves it as it was)."""
        mine = made.weights[self.node_id]
        if not made.changed or mine == now_w:
            return "kept"
        direction = 1 if mine > now_w else -1
        last = self._last_change
        if last is not None and last[0] == -direction and self.plans - last[1] <= REVERSAL_HOLD_PLANS:
            # Not straight back (issue 33: on real processes a member's weight flip-flopped
            # between two values, 8 times in 2 min, on sampled figures noisier than the planner's
            # hysteresis). Only this member's own weight is held: each member sets its own, so
            # the next view is still one every member agrees on.
            self.held_back += 1
            _log.info("load-aware weights: this node keeps weight %g (the plan's %g would undo its last step)",
                      now_w, mine)
            return "held"
        self._last_change = (direction, self.plans)
        _log.info("load-aware weights: max/mean %.3f -> %.3f moving %d partitions; this node's weight %g -> %g",
                  made.ratio_before, made.ratio_after, made.moved, now_w, mine)
        self._set_weight(mine)
        return "set"

    def status(self) -> dict[str, Any]:
        p = self.last_plan
        return {"every_s": self.every_s, "by": self.by, "rounds": self.rounds, "unanswered": self.unanswered,
                "plans": self.plans, "held_back": self.held_back,
                "planned_from": self.planned_at if self.planned_at >= 0 else None,
                "budget_left": float(self.budget.tokens),
                "last_plan": None if p is None else {
                    "reason": p.reason, "changed": p.changed, "max_over_mean_before": round(p.ratio_before, 4),
                    "max_over_mean_after": round(p.ratio_after, 4), "moved": p.moved}}
