"""Lease-based baselines against hand-computed cases, and in the shared harness."""

from __future__ import annotations

import pytest

from simulations.cluster import Cluster
from simulations.leases import SYSTEMS, LeaseNode
from simulations.nodes import Node
from simulations.scenarios import run_scenario


def _cluster(system: str, nodes: int, partitions: int, seed: int = 1) -> Cluster:
    cluster = Cluster(SYSTEMS[system](), seed=seed, partitions=partitions)
    cluster.bootstrap(nodes)
    return cluster


def _lease(node: Node) -> LeaseNode:
    assert isinstance(node, LeaseNode), node
    return node


def _counts(cluster: Cluster) -> list[int]:
    return sorted(len(_lease(n).held) for n in cluster.nodes.values() if n.up)


def test_eventhubs_join_steals_one_lease_per_cycle() -> None:
    # 2 owners of 8 partitions (4 + 4), 1 idle host joins. Its cycles (every 10 s):
    # 1: hosts 3, biggest 4 - mine 0 >= 2 -> steal one (4, 3, 1)
    # 2: biggest 4 - mine 1 >= 2 -> steal one (3, 3, 2); 3: 3 - 2 < 2 -> done.
    # So two cycles, i.e. 10-20 s plus the join's phase offset (< 10 s).
    cluster = _cluster("eventhubs", 2, 8)
    assert _counts(cluster) == [4, 4]
    cluster.metrics.begin()
    newcomer = cluster.nodes[cluster.join()[0]]
    assert isinstance(newcomer, LeaseNode)
    cycles0 = newcomer.cycles
    cluster.sim.run_until(cluster.sim.now + 60)
    assert _counts(cluster) == [2, 3, 3]
    # It stole twice and nothing changed after that.
    assert len(newcomer.held) == 2 and newcomer.cycles - cycles0 >= 3
    assert cluster.metrics.result()["moved_partitions"] == 2


def test_eventhubs_stolen_lease_is_dual_owned_until_the_loser_renews() -> None:
    r = run_scenario("join-one", nodes=2, duration_s=60, partitions=8, system="eventhubs")
    # Each of the 2 steals leaves the victim believing it owns the partition until its next
    # renewal, 0-10 s later: dual ownership is positive and at most 2 x 10 partition-s.
    assert 0 < r["dual_ownership_partition_s"] <= 2 * 10.5
    assert r["moved_partitions"] == 2


def test_durabletask_crash_waits_for_lease_expiry() -> None:
    # A crashed worker's leases expire 30 s after its last renewal (0-10 s before the crash),
    # and are grabbed on the next 10 s cycle: takeover between 20 and 40 s.
    r = run_scenario("crash-one", nodes=4, duration_s=90, partitions=16, system="durabletask")
    assert 20 <= r["takeover_s"]["max"] <= 40.5
    assert r["orphan_partition_s"] > 4 * 20 * 0.9  # ~4 partitions orphaned >= ~20 s each


def test_eventhubs_graceful_leave_releases_leases() -> None:
    r = run_scenario("leave", nodes=4, duration_s=60, partitions=16, system="eventhubs")
    leave = next(e for e in r["events"] if e["kind"] == "leave")
    assert leave["rebalance_s"] is not None and leave["rebalance_s"] <= 25
    assert r["dual_ownership_partition_s"] == 0 or r["moved_partitions"] > r["optimal_moves"]


@pytest.mark.parametrize("system", sorted(SYSTEMS))
def test_baselines_run_the_shared_scenarios(system: str) -> None:
    for name in ("crash-one", "join-one", "stalls"):
        r = run_scenario(name, nodes=6, duration_s=120, partitions=32, system=system, seed=2)
        assert r["system"] == system
        assert r["max_datagram_bytes"] == 0  # no gossip: they talk to the store only
        assert r["balance_max_over_mean"] is not None


def test_redis_race_stalled_owner_loses_its_partitions() -> None:
    # Seed 000's complaint: a node too slow to answer the challenge loses the race.
    r = run_scenario("stalls", nodes=6, duration_s=300, partitions=32, system="redis-race",
                     params={"fraction": 0.34, "gap_s": 5.0})
    assert r["moved_partitions"] > 0


def test_same_seed_same_baseline_metrics() -> None:
    a = run_scenario("crash-one", nodes=4, duration_s=60, partitions=16, system="eventhubs", seed=9)
    b = run_scenario("crash-one", nodes=4, duration_s=60, partitions=16, system="eventhubs", seed=9)
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b
