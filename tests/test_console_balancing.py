"""The console's view of load-aware weights: the plan history (``load_history``), the body of
``GET /v1/balancing`` (``console.balancing``, pure) and the route on a node with and without
``--load-aware``. Deterministic: fixed clocks, views built by hand, no sleeps."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest

from ownership.views import View
from placement import PlacementTable
from placement.rebalance import LoadReport, Plan
from placement.service.console.balancing import OFF_NOTE, BalancingOut, balancing, leader_loads
from placement.service.http_api import create_app
from placement.service.load_balance import LoadBalancer
from placement.service.load_history import PlanHistory, PlanStep
from placement.service.node import Node
from placement.table import TableConfig

from test_load_balance import FakeClient
from test_node_exclusive import P, config

WEIGHTS = {"a": 1.0, "b": 1.0, "c": 1.0}


def step(view: int, changed: bool = False, reason: str = "balanced", **kw) -> PlanStep:
    return PlanStep(view, 1000 + view, 2000.0 + view, reason, changed, 1.05, 1.05, 0, P, **kw)


def test_history_is_bounded_and_folds_runs_of_plans_that_change_nothing():
    h = PlanHistory(capacity=3)
    for v in (1, 2, 3):
        h.record(step(v))
    assert len(h) == 1 and h.recorded == 3
    only = h.steps()[0]
    assert (only.view, only.first_view, only.count) == (3, 1, 3)
    assert only.to_dict()["first_view"] == 1 and only.to_dict()["weights"] == {}
    moved = h.record(step(4, changed=True, reason="planned", weights={"a": (1.0, 0.75)}))
    h.record(step(5, reason="small gain"))
    h.record(step(6, reason="small gain"))
    assert [(s.view, s.count) for s in h.steps()] == [(3, 3), (4, 1), (6, 2)]
    assert moved.to_dict()["weights"] == {"a": {"old": 1.0, "new": 0.75}} and moved.to_dict()["first_view"] == 4
    for v in range(7, 12):  # changing plans are never folded; the ring keeps the newest
        h.record(step(v, changed=True, reason="planned"))
    assert [s.view for s in h.steps()] == [9, 10, 11] and h.recorded == 11
    with pytest.raises(ValueError):
        PlanHistory(capacity=0)


def balancer(calls: list, clock: list[float]) -> LoadBalancer:
    return LoadBalancer("a", TableConfig(P), 4.0, own_rates=lambda: {0: 8.0},
                        addresses=lambda: {"a": "http://a", "b": "http://b", "c": "http://c"},
                        set_loads=lambda codes, at: calls.append(("loads", at)),
                        set_weight=lambda w: calls.append(("weight", w)), clock=lambda: clock[0])


def hot_view(num: int, weights: dict[str, float], hot: str, loads_at: int) -> View:
    table = PlacementTable.build(weights, P)
    rates = [1000.0 if table.owner(p) == hot else 1.0 for p in range(P)]
    return View.of(num, weights, loads=LoadReport.of(rates).codes, loads_at=loads_at)


def test_each_plan_is_recorded_with_its_view_ratios_moves_and_weight_changes():
    calls: list = []
    clock = [5000.0]
    lb = balancer(calls, clock)
    made = lb.view(hot_view(7, WEIGHTS, "a", 1000))
    assert isinstance(made, Plan) and made.changed
    (s,) = lb.history.steps()
    assert (s.view, s.loads_at, s.at, s.reason, s.own) == (7, 1000, 5000.0, "planned", "set")
    assert (s.max_over_mean_before, s.max_over_mean_after, s.moved) == (made.ratio_before, made.ratio_after, made.moved)
    assert s.weights == {m: (1.0, w) for m, w in made.weights.items() if w != 1.0} and "a" in s.weights
    # Then b is hot; the plan raises a again, which a does not do yet (the reversal hold): "held".
    lowered = {**WEIGHTS, "a": made.weights["a"]}
    clock[0] = 5100.0
    lb.view(hot_view(8, lowered, "b", 1100))
    assert lb.history.steps()[-1].own == "held" and lb.history.steps()[-1].view == 8
    # Balanced figures: a plan that changes nothing, recorded too; the next folds into it.
    flat = LoadReport.of([0.0] * P).codes  # no load anywhere
    lb.view(View.of(9, lowered, loads=flat, loads_at=1200))
    lb.view(View.of(10, lowered, loads=flat, loads_at=1300))
    last = lb.history.steps()[-1]
    assert (last.reason, last.changed, last.own, last.count, last.first_view, last.view) == (
        "balanced", False, "kept", 2, 9, 10)
    assert lb.plans == 4 and len(lb.history) == 3


def test_the_body_says_plainly_when_the_node_is_not_load_aware():
    body = balancing("n1", None, PlacementTable.build(WEIGHTS, P), {"a": 1.0})
    assert body["load_aware"] is False and body["note"] == OFF_NOTE and "--load-aware" in body["note"]
    assert body["members"] == [] and body["steps"] == [] and body["figures"] is None
    BalancingOut.model_validate(body)


def test_the_body_sums_gathered_rates_by_leader_and_names_who_is_hot():
    calls: list = []
    clock = [7000.0]
    lb = balancer(calls, clock)
    table = PlacementTable.build({**WEIGHTS, "w": 0.0}, P)  # w: a witness, weight 0
    gossiped = {"a": 1.0, "b": 1.0, "c": 1.0, "w": 0.0}
    before = balancing("a", lb, table, gossiped)  # nothing gathered or planned yet
    assert [m["id"] for m in before["members"]] == ["a", "b", "c"]  # weight-0 members left out
    assert all(m["load"] is None and m["answered"] is None and m["planned_weight"] is None for m in before["members"])
    assert before["figures"] is None and before["steps"] == []

    b_parts = [p for p in range(P) if table.owner(p) == "b"]
    client = FakeClient({"http://b": {"partitions": {str(p): 3.0 for p in b_parts}}, "http://c": None})
    asyncio.run(lb.gather(client))
    body = balancing("a", lb, table, gossiped)
    BalancingOut.model_validate(body)
    rows = {m["id"]: m for m in body["members"]}
    rates = np.zeros(P)
    rates[b_parts] = 3.0
    rates[0] = max(rates[0], 8.0)  # a's own figure; a partition two members report counts at the larger
    expected = {m: float(sum(rates[p] for p in range(P) if table.owner(p) == m)) for m in "abc"}
    assert {m: r["load"] for m, r in rows.items()} == pytest.approx(expected)
    mean = sum(expected.values()) / 3
    b_share = rows["b"]["load_over_mean"]
    assert b_share == pytest.approx(expected["b"] / mean, abs=1e-4) and b_share > 1.1  # b is hot
    assert (rows["a"]["answered"], rows["b"]["answered"], rows["c"]["answered"]) == (True, True, False)
    f = body["figures"]
    assert (f["at"], f["round"], f["asked"], f["unanswered"]) == (7000.0, 1, ["b", "c"], ["c"])
    assert calls == [("loads", 7000)]

    lb.view(hot_view(3, WEIGHTS, "b", 7000))
    body = balancing("a", lb, table, {**gossiped, "b": 0.5})
    rows = {m["id"]: m for m in body["members"]}
    assert rows["b"]["planned_weight"] < 1.0 and rows["b"]["weight"] == 0.5 and rows["b"]["placed_weight"] == 1.0
    (s,) = body["steps"]
    assert s["view"] == 3 and s["reason"] == "planned" and s["weights"]["b"]["old"] == 1.0
    assert body["planned_from"] == 7000 and body["plans"] == 1


def test_figures_of_another_size_sum_to_nothing():
    table = PlacementTable.build(WEIGHTS, P)
    assert leader_loads(np.ones(P + 1), table) == {}
    assert leader_loads(np.zeros(P), PlacementTable.build({"z": 0.0}, P)) == {}
    assert sum(leader_loads(np.ones(P), table).values()) == P


def test_the_route_on_nodes_with_and_without_load_aware():
    async def main():
        for load_aware_s in (0.0, 60.0):  # 60 s: no gathering round runs during the test
            node = await Node(config("n1", load_aware_s=load_aware_s, balance_by="weights")).start()
            try:
                transport = httpx.ASGITransport(app=create_app(node))
                async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                    if load_aware_s:
                        node.load_balancer.view(hot_view(2, {"n1": 1.0, "n2": 1.0}, "n1", 100))  # type: ignore[union-attr]
                    r = await client.get("/v1/balancing", params={"ignored": "x" * 100})
                    assert r.status_code == 200
                    body = BalancingOut.model_validate(r.json())
                    assert body.load_aware is bool(load_aware_s) and body.node == "n1"
                    if load_aware_s:
                        assert [m.id for m in body.members] == ["n1", "n2"] and body.figures is None
                        assert [(s.view, s.reason) for s in body.steps] == [(2, "planned")]
                    else:
                        assert body.members == [] and "without --load-aware" in body.note
            finally:
                await node.leave()

    asyncio.run(main())
