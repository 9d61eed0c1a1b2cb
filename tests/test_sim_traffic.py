"""The simulator's traffic accounting (``metrics.json`` key ``traffic``): per member and per
witness of the stable view, sent and received, the ownership datagrams apart from the gossip."""

from __future__ import annotations

import pytest

from ownership import wire
from ownership.views import witnesses_of
from simulations.engine import OWNERSHIP_FIRST_BYTE, TRAFFIC_FIELDS
from simulations.metrics import witnesses_now
from simulations.scenarios import run_scenario


def _run(system: str, **kw):
    seen = {}

    def before(cluster) -> None:
        seen["cluster"] = cluster
        cluster.metrics.mark_traffic("half", cluster.sim.now + 10.0)

    r = run_scenario("crash-one", nodes=16, duration_s=20, seed=3, system=system, partitions=256,
                     before_run=before, **kw)
    return r, seen["cluster"]


def test_the_engine_tells_ownership_datagrams_by_their_magic() -> None:
    assert wire.MAGIC[0] == OWNERSHIP_FIRST_BYTE
    assert b"SW"[0] != OWNERSHIP_FIRST_BYTE  # membership datagrams (membership.wire)


def test_witness_traffic_adds_up_and_exceeds_the_member_average() -> None:
    r, cluster = _run("swim-exclusive")
    nodes = list(cluster.nodes.values())
    sim = cluster.sim
    # Every datagram sent is charged to its sender; what arrives is at most what was sent.
    assert sum(n.sent for n in nodes) == sim.datagrams
    assert sum(n.sent_bytes for n in nodes) == sim.datagram_bytes
    assert 0 < sum(n.received for n in nodes) <= sim.datagrams
    for n in nodes:
        assert 0 <= n.own_sent <= n.sent and 0 <= n.own_received <= n.received
        assert n.own_sent_bytes <= n.sent_bytes and n.own_received_bytes <= n.received_bytes

    t = r["traffic"]
    member, witness, other = t["member"], t["witness"], t["non_witness"]
    assert member["sent_datagrams_s"] == r["datagrams_per_member_s"]
    assert member["sent_bytes_s"] == r["bytes_per_member_s"]
    # The five witnesses of the stable view, all 20 s long (the crashed node is not one of them
    # in this seed), 0.5 s samples.
    up_ids = sorted(n.node_id for n in nodes if n.up)
    assert witnesses_now([n for n in nodes if n.up]) == witnesses_of(up_ids, 5)
    assert t["witness_nodes"] == 5 and t["witness_s"] == pytest.approx(5 * 20.0)
    # Member-seconds split into witness- and non-witness-seconds; the traffic with them.
    # (Rates are rounded, bytes to 0.1/s: each side of the sum may be off by 0.05 per second of
    # its member-seconds.)
    rounding = 0.1 * t["member_s"]
    for key in member:
        whole = member[key] * t["member_s"]
        parts = witness[key] * t["witness_s"] + other[key] * (t["member_s"] - t["witness_s"])
        assert parts == pytest.approx(whole, rel=1e-3, abs=rounding), key
    # Each member renews with the witnesses: a witness receives and sends more than the average
    # member, in ownership datagrams above all; gossip is about even.
    assert witness["received_datagrams_s"] > member["received_datagrams_s"] > other["received_datagrams_s"]
    assert witness["sent_datagrams_s"] > member["sent_datagrams_s"]
    assert witness["ownership_received_datagrams_s"] > 2 * other["ownership_received_datagrams_s"]
    gossip = [g["received_datagrams_s"] - g["ownership_received_datagrams_s"] for g in (witness, other)]
    assert gossip[0] == pytest.approx(gossip[1], rel=0.25)
    assert t["busiest_witness"]["received_datagrams_s"] >= witness["received_datagrams_s"]
    # A window's figures (``mark_traffic``): the two halves make up the whole.
    rec = cluster.metrics
    halves = rec.traffic(until="half"), rec.traffic(since="half")
    assert [h["window_s"] for h in halves] == [10.0, 10.0]
    for group, seconds in (("member", "member_s"), ("witness", "witness_s"), ("non_witness", None)):
        def total(tr, key, group=group, seconds=seconds):
            s = tr[seconds] if seconds else tr["member_s"] - tr["witness_s"]
            return tr[group][key] * s
        whole_s = t[seconds] if seconds else t["member_s"] - t["witness_s"]
        for key in member:
            assert total(halves[0], key) + total(halves[1], key) == pytest.approx(total(t, key), rel=1e-3,
                                                                                  abs=0.1 * whole_s), key
    assert set(member) == {f.replace("own_", "ownership_") + ("_s" if f.endswith("bytes") else "_datagrams_s")
                           for f in TRAFFIC_FIELDS}


def test_without_exclusive_ownership_there_are_no_witnesses_nor_ownership_datagrams() -> None:
    r, _ = _run("swim")
    t = r["traffic"]
    assert "witness" not in t
    assert t["member"]["ownership_sent_datagrams_s"] == 0 == t["member"]["ownership_received_datagrams_s"]
    assert t["member"]["sent_datagrams_s"] == r["datagrams_per_member_s"] > 0
