"""The simulator's per-step invariants (simulations.invariants) catch what they claim to: each
test corrupts one node on purpose (white-box) and expects the violation to name the invariant,
the node(s), the partition, the time and the seed. That they stay quiet on correct runs is
checked by every other simulator test, which runs with all of them on."""

from __future__ import annotations

import numpy as np
import pytest

from ownership import Acquired, Ended, ExclusiveConfig
from ownership.core import _Owned
from placement import PlacementTable
from simulations.cluster import Cluster, SwimSystem
from simulations.engine import InvariantViolation
from simulations.nodes import SwimNode


def test_a_membership_core_whose_indexes_disagree_with_its_view_is_caught() -> None:
    cluster = Cluster(SwimSystem(), seed=3, partitions=64)
    cluster.bootstrap(3)
    node = cluster.nodes["n002"]
    assert isinstance(node, SwimNode) and node.core is not None
    node.core._view.live_peers.append("ghost")
    with pytest.raises(InvariantViolation, match=r"'swim core indexes'.*--seed 3.*n002: .*[(]live index[)]"):
        cluster.run(5)


def test_which_invariants_run() -> None:
    def names(cluster: Cluster) -> set:
        return {getattr(c, "__name__", None) for c in cluster.sim.invariants}

    cheap = {"self view", "one leader per partition among equal views"}
    assert names(Cluster(SwimSystem(), seed=1, partitions=64)) == cheap | {"swim core indexes"}
    assert names(Cluster(SwimSystem(), seed=1, partitions=64, check_cores=False)) == cheap
    exclusive = Cluster(SwimSystem(exclusive=ExclusiveConfig()), seed=1, partitions=64, check_cores=False)
    assert names(exclusive) == cheap | {"no dual ownership", "epochs rise"}


def test_two_members_with_equal_views_but_different_leaders_are_caught() -> None:
    cluster = Cluster(SwimSystem(), seed=4, partitions=64)
    cluster.bootstrap(3)
    cluster.run(2)  # every node computed its table (the sampler asked what it leads)
    node = cluster.nodes["n001"]
    assert isinstance(node, SwimNode)
    real = node._table
    assert real is not None
    _, idx = real.owner_indices()
    # The same members and settings (so the same checksum), a different answer.
    forged = PlacementTable(real.config, real._units, real._members, None, np.roll(idx, 1, axis=0))
    assert forged.checksum == real.checksum and forged != real
    node._table = forged
    cluster.sim.touched.append(node)
    with pytest.raises(InvariantViolation) as info:
        cluster.run(1)
    msg = str(info.value)
    assert info.value.invariant == "one leader per partition among equal views" and "--seed 4" in msg
    assert "n001 and n00" in msg and "partition 0 is led by" in msg


def test_a_node_leading_from_a_table_of_another_view_is_caught() -> None:
    cluster = Cluster(SwimSystem(), seed=4, partitions=64)
    cluster.bootstrap(3)
    cluster.run(2)
    node = cluster.nodes["n001"]
    assert isinstance(node, SwimNode)
    node._table = PlacementTable.build({"n000": 1.0, "n001": 1.0}, 64)  # n002 missing
    cluster.sim.touched.append(node)
    with pytest.raises(InvariantViolation, match=r"n001 leads from a table of another view.*n002"):
        cluster.run(1)


def test_a_second_owner_while_the_first_still_holds_its_lease_is_caught() -> None:
    cluster = Cluster(SwimSystem(exclusive=ExclusiveConfig()), seed=5, partitions=64)
    cluster.bootstrap(3)
    cluster.run(2)
    holder = cluster.nodes["n000"]
    assert isinstance(holder, SwimNode) and holder.own is not None
    p = min(holder.own.owned)
    other = cluster.nodes["n001"]
    assert isinstance(other, SwimNode) and other.own is not None
    # n001 starts processing p as if it had acquired it; n000 still owns it, lease valid.
    other.own.owned[p] = _Owned(holder.own.owned[p].epoch + 1)
    cluster.metrics.ownership(other, Acquired(p, holder.own.owned[p].epoch + 1, None, cluster.sim.now))
    with pytest.raises(InvariantViolation) as info:
        cluster.run(2)
    msg = str(info.value)
    assert info.value.invariant == "no dual ownership" and "--seed 5" in msg
    assert f"partition {p} " in msg and "n000" in msg and "n001" in msg


def test_an_acquisition_whose_epoch_does_not_rise_is_caught() -> None:
    """Successive acquisitions of a partition carry strictly rising epochs, whoever acquires it
    and however (docs/ownership.md rule 8); an equal epoch is a regression too. The message names
    the partition, both nodes, both epochs and both times."""
    cluster = Cluster(SwimSystem(exclusive=ExclusiveConfig()), seed=6, partitions=64)
    cluster.bootstrap(3)
    cluster.run(2)
    holder = cluster.nodes["n000"]
    assert isinstance(holder, SwimNode) and holder.own is not None
    p = min(holder.own.owned)
    epoch = holder.own.owned[p].epoch
    assert cluster.metrics.ownership_log.epoch_regressions == []
    other = cluster.nodes["n002"]
    # As if n000's ownership had ended and n002 had acquired p with the same epoch (it never
    # learned it): ends first, so no dual ownership, only the fallen epoch.
    now = cluster.sim.now
    cluster.metrics.ownership(holder, Ended(p, epoch, now))
    cluster.metrics.ownership(other, Acquired(p, epoch, None, now))
    with pytest.raises(InvariantViolation) as info:
        cluster.sim.check_invariants()
    msg = str(info.value)
    assert info.value.invariant == "epochs rise" and "--seed 6" in msg
    assert f"partition {p} acquired by n002" in msg and f"with epoch {epoch}, not above epoch {epoch} " in msg
    assert "acquired by n000" in msg
    assert len(cluster.metrics.ownership_log.epoch_regressions) == 1  # the metric still counts it


def test_the_membership_harness_checks_every_core_after_every_step() -> None:
    from simulations.members import build_cluster

    net = build_cluster(3, seed=6)
    net.run_for(1.0)  # (checked all along: no violation)
    with pytest.raises(InvariantViolation, match=r"'swim core indexes'.*--seed 6.*n1: .*[(]probe ring[)]"):
        net.call("n1", lambda core, now: core._view.ring.reverse())  # white-box corruption
