"""A cluster without a founder (``--bootstrap``, ``ExclusiveConfig.bootstrap``): every member
starts with ``--join``, as the pods of a StatefulSet do, and the first stable view is chosen by a
majority of the genesis's witnesses, like any successor (ownership.views, "genesis").

Before it, a cluster whose members all had ``--join`` never chose a view and owned nothing; and
the only way to form one was a founder, which, restarted with the same command while its cluster
ran, founded a second cluster and owned every partition the first one owned (measured: 64 of 64
for 2 s, 40 of them owned by the others too)."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ownership import ExclusiveConfig
from ownership.views import Decided, Prepare, StableViews, View
from placement.service.node import Node

from ports import free_port
from test_node_exclusive import QUICK, Ledger, config, eventually, owned_once
from test_stable_views import MEMBERS, Net, _one_history

GENESIS = View.of(0, dict.fromkeys(MEMBERS[:3], 1.0))


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), loss=st.sampled_from([0.0, 0.1, 0.3]), dup=st.sampled_from([0.0, 0.2]),
       proposers=st.integers(1, 5))
def test_members_that_bootstrap_at_once_choose_one_first_view(seed: int, loss: float, dup: float,
                                                              proposers: int) -> None:
    """Any number of members propose different first views, each with its own incarnation, in
    any order, with loss and duplication: never two views under one number, and a first view
    once a proposer reaches a quorum of the genesis's witnesses."""
    net = Net(seed, loss, dup, genesis=GENESIS)
    net.propose_at_random(random.Random(seed ^ 0xB007), proposers)
    history = _one_history(net.installed)
    assert all(v.num == n for n, v in history.items())
    if 1 in history:
        assert history[1].inc != 0  # the incarnation of the proposer whose value was chosen


def test_a_member_that_bootstraps_into_a_running_cluster_is_told_its_view() -> None:
    """A restart, or a member added later with the same list: its proposal of a first view
    reaches witnesses of the genesis that hold a later view, and they answer with it."""
    installed: list[View] = []
    late = StableViews("d", witnesses=3, resend_s=0.5, quiet_until=0.0, send=lambda dst, msg: None,
                       on_install=lambda old, new, now: installed.append(new), genesis=GENESIS)
    running = StableViews("a", witnesses=3, resend_s=0.5, quiet_until=0.0, send=lambda dst, msg: None,
                          on_install=lambda old, new, now: None, genesis=GENESIS)
    current = View.of(7, dict.fromkeys(MEMBERS, 1.0), inc=42)
    running.install(current, 0.0)
    answer = running.receive("d", Prepare(1, 1, GENESIS.ck), 1.0)
    assert answer == Decided(7, current.members, current.weights, 42)
    late.receive("a", answer, 1.1)
    assert installed == [current] and late.view.inc == 42


@pytest.mark.parametrize("bad", [("a", "a"), ("",), ["a"], (7,)])
def test_bootstrap_is_a_tuple_of_distinct_member_ids(bad: Any) -> None:
    with pytest.raises(ValueError, match="bootstrap must be distinct member ids"):
        ExclusiveConfig(bootstrap=bad)


def test_three_nodes_that_all_join_each_other_form_a_cluster_and_a_restart_rejoins_it() -> None:
    """In-process nodes on loopback UDP, each started with --join to the next and the same
    --bootstrap list: no founder. They choose view 1 together and own every partition once; a
    member restarted (as kill -9) with its command learns the running view instead of choosing
    another, and nobody owns a partition twice (intervals from the handlers)."""
    ids = ("n1", "n2", "n3")
    ports = {i: free_port() for i in ids}
    ledger = Ledger()
    exclusive = dataclasses.replace(QUICK, bootstrap=ids)

    def node(i: str) -> Node:
        nxt = ids[(ids.index(i) + 1) % len(ids)]
        n = Node(dataclasses.replace(config(i, join=[("127.0.0.1", ports[nxt])], exclusive=exclusive),
                                     gossip_bind=("127.0.0.1", ports[i])))
        ledger.attach(n)
        return n

    async def run() -> None:
        nodes = {i: await node(i).start() for i in ids}
        await eventually(lambda: owned_once(nodes.values()), what="every partition owned once", timeout_s=60)
        assert {n.ownership_status()["stable_view"] for n in nodes.values()} == {1}
        nodes["n1"].close()  # as kill -9
        ledger.crash("n1")
        nodes["n1"] = await node("n1").start()
        await eventually(lambda: len(nodes["n1"].owned_partitions()) > 0 and owned_once(nodes.values()),
                         what="the restarted member owning its share again", timeout_s=60)
        assert all(isinstance(v, int) and v >= 1 for v in (n.ownership_status()["stable_view"] for n in nodes.values()))
        for n in nodes.values():
            n.close()

    asyncio.run(run())
    assert ledger.overlaps() == []


#: 443: a restarted member waited for good to take its partitions, for a condemnation made by a
#: member that had stopped being a witness (``QuorumLease.echoing``).
@pytest.mark.parametrize(("seed", "durable"), [(0, False), (1, False), (2, True), (3, True), (443, True)])
def test_wide_fault_schedules_on_a_cluster_without_a_founder(seed: int, durable: bool) -> None:
    """The fuzzer's wide schedules (crashes and restarts of the listed members included) on a
    cluster that bootstrapped: never two owners, epochs rise, and every partition owned at the
    end while a witness quorum runs (``fuzz_ownership --bootstrap``)."""
    from simulations.fuzz_ownership import JUDGE_AFTER_S, run

    r = run(seed, duration_s=180, wide=True, durable_state=durable, bootstrap=True)
    assert r["dual_owned_partition_s_exact"] == 0 and r["epoch_regressions"] == 0
    assert 180 - r["settled_at"] >= JUDGE_AFTER_S
    assert r["unowned_at_end"] == 0 or not r["quorum_at_end"], (seed, r["nodes"], r["schedule"])
