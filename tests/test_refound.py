"""Rule 11 (``ownership.core``, ``Ownership._maybe_found``): a member restarted without seeds of
its own rejoins through the members it knew, and founds a cluster only once every member it
sees answers that it holds no stable view (the whole cluster restarted). A running cluster
answers with its view; two such members found one cluster, not two; a member that bootstraps
or resumes a restored view keeps it from founding; and the first view of a cluster founded
anew is numbered by the clock, so its fencing epochs rise above the old cluster's."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from ownership import ExclusiveConfig, Message, Ownership
from ownership.lease import MAX_FIRST_VIEW, QuorumLease, view_epoch
from ownership.messages import FORMS, MAY_FOUND, WAITS, NoView, ViewAsk
from ownership.wire import decode_many, encode_many
from placement import PlacementTable
from placement.service.members_file import MembersFile
from placement.service.node import Node
from simulations.cluster import Cluster
from simulations.nodes import SwimNode
from simulations.scenarios import run_scenario

from ports import free_port
from test_node_exclusive import QUICK, Ledger, config, eventually, owned_once

P = 32
CFG = ExclusiveConfig()


def _tables(view):
    return PlacementTable.build(dict(view), P, 1, 0)


class Net:
    """Ownership cores that see each other (one local view), messages delivered at once."""

    def __init__(self) -> None:
        self.cores: dict[str, Ownership] = {}
        self.now = 0.0

    def add(self, core: Ownership) -> Ownership:
        self.cores[core.me] = core
        view = dict.fromkeys(self.cores, 1.0)
        for c in self.cores.values():
            c.set_view(view, (), self.now)
        return core

    def run(self, until: float, step: float = 0.05) -> None:
        while self.now < until:
            self.now = round(self.now + step, 6)
            for c in self.cores.values():
                c.handle_timer(self.now)
            for _ in range(20):  # deliver until quiet
                sent = [(c.me, dst, m) for c in self.cores.values() for dst, m in c.messages(self.now)]
                if not sent:
                    break
                for src, dst, m in sent:
                    if dst in self.cores:
                        self.cores[dst].receive(src, m, self.now)
            for c in self.cores.values():
                c.actions()


def _core(me: str, now: float = 0.0, **kw) -> Ownership:
    return Ownership(me, kw.pop("config", CFG), _tables, now, founder=kw.pop("founder", False), **kw)


def test_the_probe_round_trips_on_the_wire_and_a_bad_role_is_dropped() -> None:
    msgs: list[Message] = [ViewAsk(7), NoView(7, MAY_FOUND), NoView(8, FORMS)]
    (datagram,) = encode_many("n1", msgs, cluster="c")
    decoded = decode_many(datagram, cluster="c")
    assert decoded is not None and decoded[1] == msgs
    (bad,) = encode_many("n1", [NoView(7, FORMS + 1)], cluster="c")
    assert decode_many(bad, cluster="c") is None


def test_alone_it_never_founds() -> None:
    net = Net()
    lone = net.add(_core("n1", may_found=True))
    net.run(60.0)
    assert lone.lease.num == 0 and lone.counters.refounded == 0 and lone.fenced_reason == "no stable view yet"


def test_a_member_of_a_running_cluster_answers_with_its_view_and_nobody_founds() -> None:
    net = Net()
    running = net.add(_core("n2", founder=True))
    net.run(1.0)
    back = net.add(_core("n1", net.now, may_found=True))
    net.run(30.0)
    assert back.counters.refounded == 0
    assert back.lease.views.view.inc == running.lease.views.view.inc and back.lease.num >= 1


def test_when_everyone_it_sees_waits_it_founds_after_twice_the_lease_with_a_clock_numbered_view() -> None:
    net = Net()
    waiting = [net.add(_core(f"n{i}")) for i in (2, 3)]
    back = net.add(_core("n1", may_found=True, first_view=1000))
    net.run(2 * CFG.lease_s - 0.1)
    assert back.counters.refounded == 0  # not before 2 lease_s
    net.run(30.0)
    assert back.counters.refounded == 1
    # First view 1000 + the seconds since its start; the others learn the cluster and its views.
    assert 1000 + 2 * CFG.lease_s <= back.lease.views.view.num - 1 <= 1000 + 30
    assert all(w.lease.views.view.inc == back.lease.views.view.inc for w in waiting)
    assert {p for c in net.cores.values() for p in c.owned} == set(range(P))
    assert sum(len(c.owned) for c in net.cores.values()) == P


def test_two_that_may_found_found_one_cluster_the_smaller_id() -> None:
    net = Net()
    for me in ("n3", "n1", "n2"):
        net.add(_core(me, may_found=True))
    net.run(30.0)
    assert [c.me for c in net.cores.values() if c.counters.refounded] == ["n1"]
    assert len({c.lease.views.view.inc for c in net.cores.values()}) == 1


@pytest.mark.parametrize("other", ["bootstraps", "resumes"])
def test_a_member_that_forms_a_view_otherwise_keeps_it_from_founding(other: str) -> None:
    net = Net()
    if other == "bootstraps":
        forming = _core("n2", config=dataclasses.replace(CFG, bootstrap=("n2", "n3", "n4")))
    else:
        kept = QuorumLease("n2", witnesses=5, lease_s=3, renew_s=1, resend_s=0.5, max_drift=1e-3, now=0.0)
        kept.found({"n2": 1.0, "n1": 1.0}, 0.0, inc=99)
        forming = _core("n2", restored=kept.durable_state())
    net.add(forming)
    back = net.add(_core("n1", may_found=True))
    net.run(30.0)
    assert back.counters.refounded == 0 and back.lease.num == 0
    forming.receive("n1", ViewAsk(1), net.now)
    asked = [m for _, m in forming.messages(net.now) if isinstance(m, NoView)]
    assert asked == [NoView(1, FORMS)]


def test_a_first_view_number_is_bounded_so_epochs_fit_the_wire() -> None:
    lease = QuorumLease("n1", witnesses=5, lease_s=3, renew_s=1, resend_s=0.5, max_drift=1e-3, now=0.0)
    with pytest.raises(ValueError, match="numbered 1"):
        lease.found({"n1": 1.0}, 0.0, inc=1, num=MAX_FIRST_VIEW + 1)
    assert view_epoch(MAX_FIRST_VIEW + (1 << 26)) < 1 << 62
    assert WAITS == 0  # a plain member answers WAITS (the default of a member without a view)


def _cluster_of(captured: list[Cluster]):
    return lambda cluster: captured.append(cluster)


def _refounds(cluster: Cluster) -> int:
    return sum(n.own.counters.refounded for n in cluster.nodes.values()
               if isinstance(n, SwimNode) and n.own is not None)


@pytest.mark.parametrize("seed", [0, 1])
def test_simulated_whole_cluster_restart_forms_one_cluster_with_rising_epochs(seed: int) -> None:
    """Every node killed and started again through the members it knew: one of them founds
    once all answer that they hold no view; never two owners, epochs rise (both invariants
    are checked at every step), everything owned at the end."""
    captured: list[Cluster] = []
    r = run_scenario("restart-all", system="swim-exclusive", seed=seed, partitions=64, rejoin_files=True,
                     before_run=_cluster_of(captured))
    assert r["dual_owned_partition_s_exact"] == 0 and r["unowned_at_end"] == 0
    assert _refounds(captured[0]) == 1


def test_simulated_rolling_restart_through_members_files_never_founds() -> None:
    """The safety side: with a cluster running, every restarted member is answered with the
    view, so none founds (a second cluster would own what the first owns)."""
    captured: list[Cluster] = []
    r = run_scenario("rolling-restart", system="swim-exclusive", seed=3, partitions=64, rejoin_files=True,
                     params={"every_s": 12.0}, duration_s=120.0, before_run=_cluster_of(captured))
    assert r["dual_owned_partition_s_exact"] == 0 and r["unowned_at_end"] == 0
    assert _refounds(captured[0]) == 0


@pytest.mark.parametrize("keep_state", [False, True], ids=["no-state-dir", "default-state"])
def test_nodes_restarted_all_at_once_with_their_first_commands_form_a_cluster_again(keep_state: bool) -> None:
    """In-process nodes on fixed loopback ports: n1 founded (no join), n2 and n3 joined it.
    All three killed and started again with the same configs: n1 rejoins through its members
    file, n2 and n3 through n1. Keeping no witness state, nobody holds a view, so n1 founds;
    every partition owned once and the new view numbered above the old one. With the state
    they keep by default, they resume the view they held (nobody founds), so its number does
    not fall either."""
    ids = ("n1", "n2", "n3")
    ports = {i: free_port() for i in ids}
    ledger = Ledger()

    def node(i: str) -> Node:
        join = [] if i == "n1" else [("127.0.0.1", ports["n1"])]
        n = Node(dataclasses.replace(config(i, join=join, exclusive=QUICK, keep_state=keep_state),
                                     gossip_bind=("127.0.0.1", ports[i])))
        ledger.attach(n)
        return n

    async def run() -> None:
        nodes = {i: await node(i).start() for i in ids}
        await eventually(lambda: owned_once(nodes.values()) and all(n.owned_partitions() for n in nodes.values()),
                         what="every partition owned once", timeout_s=30)
        old_view = nodes["n1"].ownership_status()["stable_view"]
        assert isinstance(old_view, int)
        # (n2 at once, the first member; n3 within ``REFRESH_S``.)
        assert "n2" in MembersFile(cluster="placement", node="n1").load()
        for i, n in nodes.items():
            n.close()
            ledger.crash(i)
        nodes = {i: await node(i).start() for i in ids}
        assert nodes["n1"].seeds and not nodes["n1"].config.join
        await eventually(lambda: owned_once(nodes.values()), what="one cluster again, everything owned", timeout_s=60)
        new_view = nodes["n1"].ownership_status()["stable_view"]
        assert isinstance(new_view, int) and (new_view >= old_view if keep_state else new_view > old_view)
        counters = [n.ownership_status()["counters"] for n in nodes.values()]
        refounded = sum(c["refounded"] for c in counters if isinstance(c, dict))
        assert refounded == (0 if keep_state else 1)
        for n in nodes.values():
            n.close()

    asyncio.run(run())
    assert ledger.overlaps() == []


def test_a_stranger_guessing_rounds_cannot_make_it_found() -> None:
    """A member that never answers (its answers lost), and a stranger sending ``NoView`` in its
    name for every small round number: they do not count (the round is drawn from the random
    incarnation), so nothing is founded."""
    net = Net()
    silent = net.add(_core("n2"))
    back = net.add(_core("n1", may_found=True, incarnation=0x5EC2E7))
    silent.receive = lambda src, msg, now: None  # type: ignore[method-assign]  # its answers never come
    for _ in range(60):
        net.run(net.now + 0.5)
        for guess in range(16):
            back.receive("n2", NoView(guess, WAITS), net.now)
    assert back.counters.refounded == 0 and back.lease.num == 0
