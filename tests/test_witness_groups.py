"""Witness groups (``ExclusiveConfig.witness_group_members``; ``ownership.views.WitnessSet``): a
member's lease is held by a quorum of its group, a view is chosen by a quorum of every group.
The safety argument needs two intersections (docs/ownership.md, "Witness groups"), checked here
against every subset; then leases, condemnations and the simulator with groups."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ownership import ExclusiveConfig
from ownership.lease import Condemn, QuorumLease
from ownership.survival import assess
from ownership.views import is_quorum, witness_set, witnesses_of
from placement.service.node_config import NodeConfig
from simulations.scenarios import run_scenario

from test_lease_rounds import RENEW_S, RESEND_S, ROLLING_LEASE_S, Net

IDS = [f"m{i:02d}" for i in range(40)]


@given(n=st.integers(1, 40), k=st.sampled_from([1, 3, 5]), per_group=st.sampled_from([0, 1, 3, 5, 6, 10, 17]))
@settings(max_examples=300, deadline=None)
def test_the_groups_of_a_view(n: int, k: int, per_group: int) -> None:
    """G = ceil(N / per_group) groups of k, as many as N fills (one without per_group), the
    witness ranking in order; every member's group is one of them."""
    members = IDS[:n]
    ws = witness_set(members, k, per_group)
    expect = 1 if per_group <= 0 else max(1, min(-(-n // per_group), n // k))
    assert len(ws.groups) == expect
    assert ws.all == witnesses_of(members, expect * k) == tuple(w for g in ws.groups for w in g)
    assert len(set(ws.all)) == len(ws.all)  # disjoint
    assert all(len(g) == min(k, n) for g in ws.groups)
    for m in members:
        assert ws.of(m) in ws.groups and ws.of(m) == witness_set(list(reversed(members)), k, per_group).of(m)
    if expect == 1:
        assert ws.groups == (witnesses_of(members, k),)  # one group: the witness set as it always was


@pytest.mark.parametrize(("n", "k", "per_group"), [(6, 3, 3), (9, 3, 3), (10, 5, 5), (12, 3, 4), (8, 1, 2)])
def test_every_lease_quorum_meets_every_view_quorum_and_view_quorums_meet(n: int, k: int, per_group: int) -> None:
    """Exhaustive over the subsets of the witnesses: a lease quorum (a quorum of one group)
    shares a witness with every view quorum (``quorum``: one of every group), and two view
    quorums share one. Also ``quorum`` against its definition."""
    ws = witness_set(IDS[:n], k, per_group)
    assert len(ws.groups) > 1
    subsets = [frozenset(c) for r in range(len(ws.all) + 1) for c in itertools.combinations(ws.all, r)]
    view_quorums = [s for s in subsets if ws.quorum(s)]
    assert view_quorums
    for s in subsets:
        assert ws.quorum(s) == all(2 * len(s & set(g)) > len(g) or (2 * len(s & set(g)) == len(g) and g[0] in s)
                                   for g in ws.groups)
    minimal = [q for q in view_quorums if not any(o < q for o in view_quorums)]
    for group in ws.groups:
        lease_quorums = [s for s in subsets if s <= set(group) and is_quorum(s, group)]
        for lq in lease_quorums:
            assert all(lq & vq for vq in minimal), (group, lq)
    for a, b in itertools.combinations(minimal, 2):
        assert a & b


def _grouped(members: list[str], k: int, per_group: int) -> dict[str, QuorumLease]:
    nodes = {}
    for m in members:
        q = QuorumLease(m, witnesses=k, lease_s=ROLLING_LEASE_S, renew_s=RENEW_S, resend_s=RESEND_S,
                        max_drift=1e-3, now=0.0, fence_s=1.0, per_group=per_group)
        q.set_stable(members, 0.0)
        nodes[m] = q
    return nodes


def test_a_member_asks_only_its_group_and_holds_its_lease() -> None:
    """N=30, groups of 3 witnesses for every 10 members: each member's requests go to its own
    group only, and every member holds a lease, renewed, for a minute."""
    members = IDS[:30]
    nodes = _grouped(members, 3, 10)
    ws = nodes[members[0]].views.witness_set
    assert len(ws.groups) == 3
    net = Net(nodes)
    t = 0.0
    while t < 60.0:
        net.pump(t)
        if t > 5.0:
            assert all(q.valid(t) for q in nodes.values()), t
        t += 0.25
    for member, witness in net.requests:
        assert witness in ws.of(member), (member, witness)
    per_witness = {w: sum(c for (_, x), c in net.requests.items() if x == w) for w in ws.all}
    # (Each answers about the members of its group: ~10 members x 60 s / (3 witnesses x 1.25 s).)
    assert max(per_witness.values()) < 2 * 10 * 60 / (3 * RENEW_S)


def test_a_condemnation_asks_the_holders_group() -> None:
    members = IDS[:30]
    nodes = _grouped(members, 3, 10)
    taker, holder = nodes[members[0]], members[7]
    ws = taker.views.witness_set
    taker.condemn(holder, 1.0)
    asked = {dst for dst, msg in taker.messages() if isinstance(msg, Condemn)}
    assert asked == set(ws.of(holder)) - {taker.me}


def test_what_a_grouped_view_survives() -> None:
    members = IDS[:20]
    ws = witness_set(members, 3, 5)
    s = assess(dict.fromkeys(members, 1.0), ws.all, ws.groups)
    assert s.crashes == 1 and not s.fatal and f"each of the {len(ws.groups)} witness groups" in s.split
    # Two witnesses of one group lost: no view can be chosen any more.
    g = ws.groups[1]
    alive = set(members) - {g[0], g[1]}
    assert not ws.quorum(alive) and witness_set(members, 3, 0).quorum(alive) is is_quorum(alive, ws.groups[0])


def test_the_setting_is_checked_and_is_a_cluster_setting() -> None:
    """Members that group witnesses differently could hold and condemn a lease with quorums
    that share no witness: the setting is in the fingerprint a joiner must share (only when
    set, so a rolling upgrade of a cluster without it still joins)."""
    with pytest.raises(ValueError, match="--witness-groups"):
        ExclusiveConfig(witnesses=5, witness_group_members=3)
    assert ExclusiveConfig(witnesses=3, witness_group_members=3).witness_group_members == 3
    plain = NodeConfig("n1")
    grouped = NodeConfig("n1", exclusive=ExclusiveConfig(witness_group_members=256))
    assert plain.cluster_settings() == "partitions=4096,replicas=1,seed=0,capacity=None"
    assert grouped.cluster_settings() == plain.cluster_settings() + ",witness_groups=256"


@pytest.mark.parametrize("scenario", ["crash-one", "flapping"])
def test_the_simulator_with_witness_groups_keeps_one_owner(scenario: str) -> None:
    """N=16, groups of 3 witnesses for every 4 members (4 groups, 12 witnesses): a crash and a
    flapping member, exact accounting: never two owners, everything owned at the end."""
    clusters: list[Any] = []
    r = run_scenario(scenario, nodes=16, seed=3, system="swim-exclusive", partitions=128,
                     exclusive={"witness_group_members": 4, "witnesses": 3}, before_run=clusters.append)
    assert r["dual_owned_partition_s_exact"] == 0
    assert r["unowned_at_end"] == 0
    owns = [n.own for n in clusters[0].nodes.values() if n.up and getattr(n, "own", None) is not None]
    assert {len(o.lease.views.witness_set.groups) for o in owns} == {-(-len(owns) // 4)}


def test_the_node_and_the_witness_take_the_setting() -> None:
    """``--witness-groups M`` (and ``PLACEMENT_WITNESS_GROUPS``) on nodes and witnesses alike:
    every member must use the same."""
    from placement.service import node_flags
    from placement_cli.main import build_parser

    env = {"PLACEMENT_ID": "n1"}
    config, _ = node_flags.config_from_args(build_parser().parse_args(["node", "--witness-groups", "256"]), env)
    assert config.exclusive.witness_group_members == 256
    config, _ = node_flags.witness_config_from_args(build_parser().parse_args(["witness"]),
                                                    {**env, "PLACEMENT_WITNESS_GROUPS": "128"})
    assert config.exclusive.witness_group_members == 128
    config, _ = node_flags.config_from_args(build_parser().parse_args(["node"]), env)
    assert config.exclusive.witness_group_members == 0
