"""The churn simulator: determinism, every scenario at a small size, invariant reporting."""

from __future__ import annotations

import random
from typing import Any

import pytest

from simulations.cluster import Cluster, SwimSystem
from simulations.engine import InvariantViolation
from simulations.nodes import SwimNode
from simulations.scenarios import SCENARIOS, run_scenario
from simulations.stats import percentiles

REQUIRED_KEYS = {
    "scenario", "nodes", "seed", "simulated_s", "wall_s", "detection_s", "false_deaths",
    "false_suspicions", "convergence_s", "moved_partitions", "optimal_moves",
    "balance_max_over_mean", "dual_ownership_partition_s", "orphan_partition_s",
    "datagrams_per_member_s",
}


def _strip(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("wall_s",)}


def test_same_seed_same_metrics_and_other_seed_differs() -> None:
    a = run_scenario("crash-one", nodes=8, duration_s=30, seed=5, partitions=256)
    b = run_scenario("crash-one", nodes=8, duration_s=30, seed=5, partitions=256)
    c = run_scenario("crash-one", nodes=8, duration_s=30, seed=6, partitions=256)
    assert _strip(a) == _strip(b)
    assert _strip(a) != _strip(c)
    assert REQUIRED_KEYS <= set(a)


SMALL: dict[str, dict[str, Any]] = {
    # The second kill well after the first is detected everywhere: moves are counted from
    # samples every 0.5 s, so a partition that passes through a node killed before the next
    # sample would count once where the optimum counts twice.
    "crash-many": {"count": 2, "every_s": 10.0},
    "scale-out": {"to": 12},
    "scale-in": {"to": 6},
    "rolling-restart": {"every_s": 15.0},
    "split": {"split_s": 20.0},
    "flapping": {"period_s": 20.0},
    "loss": {"crash_at_s": 20.0},
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_runs_small(name: str) -> None:
    nodes = 12 if name == "scale-in" else 8
    r = run_scenario(name, nodes=nodes, duration_s=60, seed=3, partitions=256, params=SMALL.get(name))
    assert REQUIRED_KEYS <= set(r)
    assert r["simulated_s"] == 60
    assert r["max_datagram_bytes"] <= 1400
    assert r["undetected_crashes"] == 0
    if name in ("steady", "crash-one", "crash-many", "leave", "scale-out", "scale-in", "loss"):
        # Faults that need no false suspicion: every healthy node keeps its partitions, and
        # placement moves exactly the optimum (HRW) once views settled.
        assert r["false_deaths"] == 0
        assert r["healthy_moves"] == 0
        assert r["moved_partitions"] == r["optimal_moves"]
        assert r["dual_ownership_partition_s"] <= 0.01 * 256 * 60


def test_crash_is_detected_everywhere_and_partitions_taken_over() -> None:
    r = run_scenario("crash-one", nodes=8, duration_s=30, seed=2, partitions=256)
    assert r["detection_s"]["n"] == 1
    assert 0 < r["first_suspect_s"]["p50"] <= r["first_dead_s"]["p50"] <= r["detection_s"]["p50"] < 10
    assert r["takeover_s"]["n"] == 1 and r["takeover_s"]["max"] < 10
    assert r["orphan_partition_s"] > 0  # until detection, the dead node's partitions are orphans
    assert r["balance_max_over_mean"] < 1.5


def test_a_crashed_node_is_suspected_within_three_periods_and_skewed_clocks_still_detect() -> None:
    # The shared probe schedule at work: with one clock, a crashed member's next scheduled
    # prober comes within two periods (the one due this period may have probed it already), and
    # one period later it is suspect. Skewed clocks lose that bound, not detection.
    kw: dict[str, Any] = dict(nodes=32, duration_s=150, seed=7, partitions=256, params={"count": 12, "every_s": 10.0})
    shared = run_scenario("crash-many", **kw)
    skewed = run_scenario("crash-many", clock_skew_s=1000.0, **kw)
    assert shared["clock_skew_s"] == 0.0 and skewed["clock_skew_s"] == 1000.0
    assert shared["first_suspect_s"]["n"] == skewed["first_suspect_s"]["n"] == 12
    assert shared["first_suspect_s"]["max"] <= 3 * 1.0 + 0.05  # default probe period 1 s
    assert skewed["detection_s"]["n"] == 12 and skewed["undetected_crashes"] == 0
    assert shared["false_deaths"] == skewed["false_deaths"] == 0
    with pytest.raises(ValueError, match="no clocks"):
        run_scenario("crash-one", nodes=4, duration_s=5, system="eventhubs", clock_skew_s=1.0)


def test_split_merges_after_heal() -> None:
    r = run_scenario("split", nodes=8, duration_s=60, seed=4, partitions=256, params={"split_s": 20.0})
    heal = next(e for e in r["events"] if e["kind"] == "heal")
    assert heal["converged_s"] is not None and heal["converged_s"] < 15
    assert r["false_deaths"] > 0  # each side declares the other dead: expected in a split
    assert r["dual_ownership_partition_s"] > 0


def test_invariant_violation_names_seed_and_time() -> None:
    cluster = Cluster(SwimSystem(), seed=7, partitions=64)
    cluster.bootstrap(4)
    t_bad = cluster.sim.now + 2
    cluster.sim.invariants.append(lambda sim: "injected" if sim.now > t_bad else None)
    with pytest.raises(InvariantViolation, match=r"--seed 7.*injected") as info:
        cluster.run(10)
    assert info.value.seed == 7 and t_bad < info.value.now < t_bad + 1


def test_datagram_over_mtu_is_a_violation() -> None:
    cluster = Cluster(SwimSystem(), seed=1, partitions=64)
    cluster.sim.mtu_bytes = 60  # smaller than any real datagram
    with pytest.raises(InvariantViolation, match="mtu 60"):
        cluster.bootstrap(3)


def test_node_that_believes_itself_dead_is_caught() -> None:
    cluster = Cluster(SwimSystem(), seed=1, partitions=64)
    cluster.bootstrap(3)
    node = cluster.nodes["n001"]
    assert isinstance(node, SwimNode) and node.core is not None
    node.core._self.status = "dead"  # corrupt it on purpose (white-box)
    with pytest.raises(InvariantViolation, match="n001 considers itself dead"):
        cluster.run(5)


def test_percentiles_are_nearest_rank_at_the_ranks_asked() -> None:
    """``metrics.percentiles`` (the simulator's reports, and ``bench_hosts.py --pool`` with p90):
    the smallest value with at least p % of the values at or below it, against a plain count."""
    assert percentiles([]) == {"p50": None, "p99": None, "max": None, "n": 0}
    assert percentiles([], (90,)) == {"p90": None, "max": None, "n": 0}
    rng = random.Random(7)
    for n in (1, 2, 3, 10, 40, 101):
        values = [round(rng.uniform(0, 10), 3) for _ in range(n)]
        got = percentiles(values, (50, 90, 99))
        for p in (50, 90, 99):
            expected = min(v for v in values if sum(w <= v for w in values) * 100 >= p * n)
            assert got[f"p{p}"] == expected, (n, p)
        assert got["max"] == max(values) and got["n"] == n
