"""Load-aware weights on nodes (``placement.service.load_balance``, issue 33): the figures are
gathered and merged, plans are made from what a stable view committed, once per set of figures,
and three in-process nodes end up with one set of planned weights in their stable views."""

from __future__ import annotations

import asyncio
import time

import pytest

from ownership.views import View
from placement.errors import InvalidConfigError
from placement.pinning import PinPlan
from placement.pins import encode_pins
from placement.rebalance import LoadReport, Plan
from placement.service.load_balance import LoadBalancer
from placement.service.node import Node
from placement.table import PlacementTable, TableConfig

from test_node_exclusive import Ledger, P, config


class FakeClient:
    """``get(url)``: each member's ``/v1/load`` body, or an error for a member that is down."""

    def __init__(self, bodies: dict[str, dict | None]) -> None:
        self.bodies = bodies

    async def get(self, url: str):
        found = self.bodies[url.split("/v1/")[0]]
        if found is None:
            raise OSError("connection refused")
        body: dict = found

        class R:
            def raise_for_status(self) -> None: ...
            def json(self) -> dict:
                return body

        return R()


def balancer(calls: list, **kw) -> LoadBalancer:
    return LoadBalancer("a", TableConfig(P), 4.0, own_rates=kw.get("own", lambda: {0: 8.0}),
                        addresses=lambda: {"a": "http://a", "b": "http://b", "c": "http://c"},
                        set_loads=lambda codes, at: calls.append(("loads", codes, at)),
                        set_weight=lambda w: calls.append(("weight", w)))


def test_a_round_merges_every_members_figures_and_leaves_out_one_that_does_not_answer():
    calls: list = []
    lb = balancer(calls)
    client = FakeClient({"http://b": {"partitions": {"1": 2.0, "0": 1.0}}, "http://c": None})
    codes = asyncio.run(lb.gather(client))
    assert calls == [("loads", codes, calls[0][2])] and abs(calls[0][2] - time.time()) < 5
    levels = LoadReport(codes).levels()
    assert levels[0] > levels[1] > 0 and not levels[2:].any()  # 0 at the larger of 8 and 1; 1 at 2
    assert lb.unanswered == 1 and lb.rounds == 1
    # A member that answers nonsense (or a stranger's body) is left out; the round goes on.
    for bad in ({"partitions": {"x": 1.0}}, {"partitions": {"1": "nan"}}, {"partitions": {"1": -5}},
                {"partitions": ["1"]}, {"nothing": 1}):
        client = FakeClient({"http://b": bad, "http://c": {"partitions": {"2": 4.0}}})
        codes = asyncio.run(lb.gather(client))
        levels = LoadReport(codes).levels()
        assert levels[0] > levels[2] > 0 and levels[1] == 0, bad  # own figures and c's only


def test_a_plan_is_made_once_per_committed_figures_and_sets_only_this_members_weight():
    calls: list = []
    lb = balancer(calls)
    weights = {"a": 1.0, "b": 1.0, "c": 1.0}
    table_owner = __import__("placement").PlacementTable.build(weights, P)
    hot = [1000.0 if table_owner.owner(p) == "a" else 1.0 for p in range(P)]  # a leads all the load
    view = View.of(7, weights, loads=LoadReport.of(hot).codes, loads_at=1000)
    made = lb.view(view)
    assert isinstance(made, Plan) and made.changed and made.ratio_after < made.ratio_before
    assert calls == [("weight", made.weights["a"])] and made.weights["a"] < 1.0
    assert lb.view(view) is None and lb.view(View.of(8, weights, loads=view.loads, loads_at=1000)) is None
    assert lb.view(View.of(9, weights)) is None  # no figures: nothing to plan from
    assert lb.status()["last_plan"]["changed"] is True and lb.status()["planned_from"] == 1000


def _three_nodes_with_n1_hot(balance_by: str, settled, what: str) -> tuple[list[Node], Ledger]:
    """Three in-process nodes with ``--load-aware 2`` (their HTTP APIs are not served here: each
    member's own figures only), every member recording load on what it owns, n1's hot, until
    ``settled(nodes)``; returns the nodes (stopped) and the ownership ledger of the run."""
    ledger = Ledger()
    nodes: list[Node] = []

    async def main():
        for i in (1, 2, 3):
            node = Node(config(f"n{i}", join=[nodes[0].member.bound] if nodes else (), load_aware_s=2.0,
                               balance_by=balance_by))
            ledger.attach(node)
            nodes.append(await node.start())
        try:
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                for node in nodes:
                    for p in node.owned_partitions():
                        node.record_load(p, 50.0 if node.node_id == "n1" else 1.0)
                if settled(nodes):
                    return
                await asyncio.sleep(0.2)
            raise AssertionError(f"no {what} everywhere: {[n.table for n in nodes]}, "
                                 f"{[n.load_balancing for n in nodes]}")
        finally:
            for n in nodes:
                await n.leave()

    asyncio.run(main())
    return nodes, ledger


def test_three_nodes_plan_one_set_of_weights_from_their_committed_views():
    """``--balance-by weights``, end to end: rule 12 commits the figures in a stable view, every
    member plans from it, the loaded member lowers its own weight, and the next stable view
    carries it everywhere."""
    def settled(nodes: list[Node]) -> bool:
        views = [dict(n.table.members) for n in nodes]
        return all(v == views[0] for v in views) and views[0].get("n1", 1.0) < 1.0

    nodes, ledger = _three_nodes_with_n1_hot("weights", settled, "planned weights")
    assert all(n.load_balancing["last_plan"] is not None for n in nodes)  # type: ignore[index]
    assert ledger.overlaps() == []  # one owner at a time through the moves


def test_three_nodes_pin_the_hot_members_partitions_elsewhere_through_their_stable_views():
    """``--balance-by pins`` (the default), end to end: the figures are committed (rule 12),
    every member plans the same pins, a stable view commits them (rule 13), every node serves the
    same pinned table, the hot member leads fewer partitions, and no partition has two owners
    through the moves."""
    seen: list[PlacementTable] = []

    def settled(nodes: list[Node]) -> bool:
        tables = [n.table for n in nodes]
        if all(t == tables[0] for t in tables) and any(m != "n1" for m in tables[0].pins.values()):
            seen.append(tables[0])
            return True
        return False

    nodes, ledger = _three_nodes_with_n1_hot("pins", settled, "pins")
    table = seen[-1]
    plain = table.with_pins({})
    assert len(table.owned_by("n1", leader_only=True)) < len(plain.owned_by("n1", leader_only=True))
    assert all(n.load_balancing["by"] == "pins" for n in nodes)  # type: ignore[index]
    assert ledger.overlaps() == []  # one owner at a time through the moves


def test_load_aware_needs_exclusive_ownership_and_a_sane_period():
    from placement.errors import InvalidConfigError

    with pytest.raises(InvalidConfigError, match="exclusive"):
        config("x", load_aware_s=10.0, ownership="available")
    with pytest.raises(InvalidConfigError, match="capacity factor"):
        config("x", load_aware_s=10.0, capacity_factor=1.1)
    with pytest.raises(InvalidConfigError, match="at least 2 seconds"):
        config("x", load_aware_s=0.5)


def test_a_member_does_not_move_its_weight_straight_back():
    """On noisy figures a plan can undo the last one (seen on processes: a weight flip-flopped
    8 times in 2 min); a member holds its weight rather than reverse its last step within
    ``REVERSAL_HOLD_PLANS`` plans."""
    from placement import PlacementTable

    calls: list = []
    lb = balancer(calls)
    weights = {"a": 1.0, "b": 1.0, "c": 1.0}
    table = PlacementTable.build(weights, P)
    hot_a = [1000.0 if table.owner(p) == "a" else 1.0 for p in range(P)]
    first = lb.view(View.of(7, weights, loads=LoadReport.of(hot_a).codes, loads_at=1000))
    assert isinstance(first, Plan) and calls == [("weight", first.weights["a"])] and first.weights["a"] < 1.0
    lowered = {**weights, "a": first.weights["a"]}
    table2 = PlacementTable.build(lowered, P)
    hot_b = [1000.0 if table2.owner(p) == "b" else 1.0 for p in range(P)]  # now b is the hot one
    second = lb.view(View.of(8, lowered, loads=LoadReport.of(hot_b).codes, loads_at=1100))
    assert isinstance(second, Plan) and second.changed and second.weights["a"] > lowered["a"]  # the plan raises a...
    assert calls == [("weight", first.weights["a"])] and lb.held_back == 1  # ...which a does not do yet


def test_after_a_step_the_next_plan_waits_for_figures_measured_after_it():
    """Figures committed right after a step were measured before its moves: planning from them
    spends a second step on the imbalance the first one fixes (seen on processes: two steps 2 s
    apart used the whole bucket). The next plan waits for figures two periods newer."""
    from placement import PlacementTable
    from placement.service.load_balance import SETTLE_PERIODS

    calls: list = []
    lb = balancer(calls)  # every_s = 4
    weights = {"a": 1.0, "b": 1.0, "c": 1.0}
    table = PlacementTable.build(weights, P)
    hot_a = LoadReport.of([1000.0 if table.owner(p) == "a" else 1.0 for p in range(P)]).codes
    first = lb.view(View.of(7, weights, loads=hot_a, loads_at=1000))
    assert isinstance(first, Plan) and first.changed
    lowered = {**weights, "a": first.weights["a"]}
    soon = 1000 + SETTLE_PERIODS * 4 - 1
    assert lb.view(View.of(8, lowered, loads=hot_a, loads_at=1002)) is None
    assert lb.view(View.of(9, lowered, loads=hot_a, loads_at=soon)) is None
    assert lb.view(View.of(10, lowered, loads=hot_a, loads_at=soon + 1)) is not None


def test_views_are_planned_off_the_callers_thread_in_order_with_the_same_plans():
    """A node hands each stable view to ``view_soon`` from its event loop: the plan (most of a
    second at N=64, P=4,096) runs on the balancer's one worker, views in the order given, and
    gives what ``view`` gives; after ``close`` nothing more is planned."""
    import threading

    weights = {"a": 1.0, "b": 1.0, "c": 1.0}
    owner = __import__("placement").PlacementTable.build(weights, P)
    hot = [1000.0 if owner.owner(p) == "a" else 1.0 for p in range(P)]
    views = [View.of(7, weights, loads=LoadReport.of(hot).codes, loads_at=1000),
             View.of(8, weights, loads=LoadReport.of(hot).codes, loads_at=1001),
             View.of(9, weights, loads=LoadReport.of(hot).codes, loads_at=2000)]
    calls: list = []
    reference = balancer(calls)
    expected = [reference.view(v) for v in views]
    soon_calls: list = []
    threads: list[str] = []

    def set_weight(w: float) -> None:
        threads.append(threading.current_thread().name)
        soon_calls.append(("weight", w))
    lb = LoadBalancer("a", TableConfig(P), 4.0, own_rates=lambda: {0: 8.0}, addresses=lambda: {},
                      set_loads=lambda codes, at: None, set_weight=set_weight)
    futures = [lb.view_soon(v) for v in views]
    got = [f.result(timeout=60) for f in futures if f is not None]
    assert len(got) == 3 and got == expected and soon_calls == calls and lb.plans == reference.plans
    assert threads and set(threads) == {"placement-plan-a_0"}
    lb.close()
    assert lb.view_soon(views[2]) is None


def test_a_pins_plan_is_handed_on_with_what_it_was_planned_from_and_shows_its_moves():
    """``--balance-by pins``: the plan's pins go to the ownership protocol with the view's pins
    and figures' time (rule 13), no weight is set, and the history shows each move (partition,
    leader before and after), the moves being those of the tables."""
    calls: list = []
    lb = LoadBalancer("a", TableConfig(P), 4.0, own_rates=lambda: {}, addresses=lambda: {},
                      set_loads=lambda codes, at: None, set_weight=lambda w: calls.append(("weight", w)),
                      by="pins", set_pins=lambda pins, base, at: calls.append(("pins", pins, base, at)))
    weights = {"a": 1.0, "b": 1.0, "c": 1.0}
    table = PlacementTable.build(weights, P)
    hot = [1000.0 if table.owner(p) == "a" else 1.0 for p in range(P)]
    made = lb.view(View.of(7, weights, loads=LoadReport.of(hot).codes, loads_at=1000))
    assert isinstance(made, PinPlan) and made.changed and all(m != "a" for m in made.pins.values())
    assert calls == [("pins", encode_pins(made.pins), b"", 1000)]
    (step,) = lb.history.steps()
    after = table.with_pins(made.pins)
    assert step.own == "pins" and step.moved == made.moved == len(table.moved(after, leaders=True))
    assert step.moves == {p: ("a", after.owner(p)) for p in table.moved(after, leaders=True)[:32]}
    assert step.to_dict()["moves"][0]["old"] == "a" and lb.status()["by"] == "pins"
    with pytest.raises(InvalidConfigError):
        LoadBalancer("a", TableConfig(P), 4.0, own_rates=lambda: {}, addresses=lambda: {},
                     set_loads=lambda codes, at: None, set_weight=lambda w: None, by="pins")
