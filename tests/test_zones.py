"""Zone-aware replica sets (issue 33 item 4): the fast path against the definition, the spread,
leaders unchanged, incremental == full, losing a zone, snapshots, bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement import InvalidConfigError, InvalidMembershipError, PlacementTable, SnapshotError
from placement.rendezvous import Members, validate_members
from placement.zones import select_reference

# Every test runs with both screens (numpy, numba): see conftest.both_kernels.
pytestmark = pytest.mark.usefixtures("both_kernels")

P = 1024
ZONES = ("a", "b", "c")


def zoned(n: int, zones=ZONES, weight: float = 1.0) -> tuple[dict[str, float], dict[str, str]]:
    members = {f"n{i:03d}": weight for i in range(n)}
    return members, {m: zones[i % len(zones)] for i, m in enumerate(members)}


def rows(t: PlacementTable) -> list[tuple[str, ...]]:
    return [t.owners(p) for p in range(t.partitions)]


# --- the fast path is the definition ----------------------------------------------------------
ids = [f"m{i}" for i in range(10)]
memberships = st.dictionaries(st.sampled_from(ids), st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0, 3.5]), max_size=10)
zone_names = st.sampled_from(["", "", "a", "b", "c", "m1"])  # "": no zone; "m1": a zone named like a member


@settings(max_examples=60, deadline=None)
@given(memberships, st.lists(zone_names, min_size=10, max_size=10), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_fast_path_equals_reference(members, zone_list, replicas, seed):
    zones = {m: z for m, z in zip(ids, zone_list) if m in members}
    t = PlacementTable.build(members, partitions=64, replicas=replicas, seed=seed, zones=zones)
    ms = Members.build(validate_members(members), seed)
    for p in range(64):
        assert t.owners(p) == tuple(ms.ids[i] for i in select_reference(p, ms, zones, seed, replicas)), p


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(memberships, st.lists(zone_names, min_size=10, max_size=10)), min_size=2, max_size=6),
       st.integers(1, 4))
def test_incremental_equals_full_build(steps, replicas):
    def zones_of(members, zone_list):
        return {m: z for m, z in zip(ids, zone_list) if m in members}

    first = steps[0]
    t = PlacementTable.build(first[0], partitions=256, replicas=replicas, seed=9, zones=zones_of(*first))
    for members, zone_list in steps[1:]:
        zones = zones_of(members, zone_list)
        t = t.with_members(members, zones)
        full = PlacementTable.build(members, partitions=256, replicas=replicas, seed=9, zones=zones)
        assert t == full and t.checksum == full.checksum


def test_incremental_on_a_larger_table():
    members, zones = zoned(60)
    t = PlacementTable.build(members, partitions=4096, replicas=3, seed=4, zones=zones)
    steps = [({**members, "new": 1.0}, {**zones, "new": "b"}),
             (members, zones),
             ({**members, "n010": 3.0}, zones),
             ({m: w for m, w in members.items() if m != "n000"}, {m: z for m, z in zones.items() if m != "n000"}),
             (members, {**zones, "n005": "c"})]  # a member moves zone
    for m, z in steps:
        t = t.with_members(m, z)
        assert t == PlacementTable.build(m, partitions=4096, replicas=3, seed=4, zones=z)


def test_with_members_keeps_zones_unless_given():
    members, zones = zoned(9)
    t = PlacementTable.build(members, partitions=P, replicas=3, zones=zones)
    grown = {**members, "x": 1.0}
    assert t.with_members(grown).zones == zones  # the newcomer has none
    assert t.with_members(grown, {}) == PlacementTable.build(grown, partitions=P, replicas=3)


# --- what zones promise -----------------------------------------------------------------------
@pytest.mark.parametrize("replicas", [2, 3])
def test_replica_sets_span_zones_and_leaders_do_not_move(replicas):
    members, zones = zoned(12)
    plain = PlacementTable.build(members, partitions=P, replicas=replicas, seed=7)
    t = PlacementTable.build(members, partitions=P, replicas=replicas, seed=7, zones=zones)
    for p in range(P):
        owners = t.owners(p)
        assert len({zones[m] for m in owners}) == replicas, (p, owners)
        assert owners[0] == plain.owners(p)[0]
    _, lead_plain = plain.owner_indices()
    _, lead_zoned = t.owner_indices()
    assert np.array_equal(lead_plain[:, 0], lead_zoned[:, 0])  # what ownership and the JVM path read
    assert t.load(leader_only=True) == plain.load(leader_only=True)
    assert t.checksum != plain.checksum


def test_spark_router_leaders_do_not_depend_on_zones():
    """The JVM key path (spark_jobs/jvm: KeyPartition computes the partition, PartitionLeader reads
    the router's leader array) only ever sees leaders, and zones move none."""
    from placement.snapshot import PlacementSnapshot
    from spark_jobs.route import Router

    members, zones = zoned(9)
    plain = Router.of(PlacementSnapshot(PlacementTable.build(members, partitions=P, replicas=3, seed=5), {}))
    snap = PlacementSnapshot(PlacementTable.build(members, partitions=P, replicas=3, seed=5, zones=zones), {})
    router = Router.of(snap)
    assert router.ids == plain.ids and np.array_equal(router.leaders, plain.leaders)
    assert router.checksum != plain.checksum  # requests still name the zoned placement


def test_fewer_zones_than_replicas_uses_every_zone_first():
    members, zones = zoned(8, zones=("a", "b"))
    t = PlacementTable.build(members, partitions=P, replicas=3, seed=1, zones=zones)
    for p in range(P):
        owners = t.owners(p)
        assert len(owners) == 3 and len(set(owners)) == 3
        assert zones[owners[0]] != zones[owners[1]]  # the first min(R, zones) are in distinct zones


def test_losing_a_whole_zone_leaves_every_partition_a_live_replica():
    """Simulated: every member of one zone dies; before anything is recomputed, each
    partition's replica set (of the table everyone holds) still has a live member."""
    for replicas in (2, 3):
        members, zones = zoned(30, weight=1.0)
        members.update({f"h{i}": 2.5 for i in range(3)})  # some weight variety
        zones.update({f"h{i}": ZONES[i] for i in range(3)})
        t = PlacementTable.build(members, partitions=4096, replicas=replicas, seed=11, zones=zones)
        plain = PlacementTable.build(members, partitions=4096, replicas=replicas, seed=11)
        for lost in ZONES:
            live = {m for m in members if zones[m] != lost}
            assert all(set(t.owners(p)) & live for p in range(4096)), lost
            # without zones, some replica sets sit wholly in one zone
            assert not all(set(plain.owners(p)) & live for p in range(4096))


def test_no_zones_is_exactly_the_table_without_the_argument():
    members = {f"n{i}": 1.0 + i % 3 for i in range(25)}
    a = PlacementTable.build(members, partitions=4096, replicas=3, seed=42)
    for zones in (None, {}, {m: "" for m in members}):
        b = PlacementTable.build(members, partitions=4096, replicas=3, seed=42, zones=zones)
        assert b == a and b.to_msgpack() == a.to_msgpack() and "zones" not in b.to_dict()
    assert a.checksum == "9fd66d2d3bd3e14d86ebffaa0d964f1c"  # pinned before zones existed


def test_every_member_its_own_zone_is_plain_rendezvous():
    members = {f"n{i}": 1.0 + i % 3 for i in range(25)}
    plain = PlacementTable.build(members, partitions=P, replicas=3, seed=42)
    t = PlacementTable.build(members, partitions=P, replicas=3, seed=42, zones={m: f"z-{m}" for m in members})
    assert rows(t) == rows(plain)


# --- wire form and input checks ---------------------------------------------------------------
@pytest.mark.parametrize("binary", [False, True])
def test_snapshot_round_trip_with_zones(binary):
    members, zones = zoned(10)
    members["w0"] = 0.0
    zones["w0"] = "c"  # a weight-0 member keeps its zone
    t = PlacementTable.build(members, partitions=P, replicas=2, seed=3, zones=zones)
    data = t.to_dict(binary=binary)
    assert data["zones"] == zones
    for verify in (False, True):
        back = PlacementTable.from_dict(data, verify=verify)
        assert back == t and back.zones == zones and back.zone_of("n001") == "b" and back.zone_of("zz") == ""
    assert PlacementTable.from_msgpack(t.to_msgpack(), verify=True) == t
    assert PlacementTable.from_json(t.to_json(), verify=True) == t
    assert back.with_members({**members, "new": 1.0}, {**zones, "new": "a"}) == PlacementTable.build(
        {**members, "new": 1.0}, partitions=P, replicas=2, seed=3, zones={**zones, "new": "a"})
    stripped = {k: v for k, v in data.items() if k != "zones"}
    with pytest.raises(SnapshotError, match="checksum"):
        PlacementTable.from_dict(stripped)
    with pytest.raises(SnapshotError, match="malformed"):
        PlacementTable.from_dict({**data, "zones": {"nobody": "a"}})


@pytest.mark.parametrize("zones, message", [
    ({"n1": 3}, "must be a string"),
    ({"n1": " a"}, "surrounding spaces"),
    ({"n1": "a\n"}, "surrounding spaces or unprintable"),
    ({"n1": "z" * 65}, "limit is 64"),
    ({"stranger": "a"}, "not a member"),
    (["n1", "a"], "must map member ids"),
])
def test_bad_zones_are_rejected_clearly(zones, message):
    with pytest.raises(InvalidMembershipError, match=message):
        PlacementTable.build({"n1": 1.0, "n2": 1.0}, partitions=8, zones=zones)


def test_zones_do_not_combine_with_capacity_factor():
    members, zones = zoned(6)
    with pytest.raises(InvalidConfigError, match="zones and capacity_factor"):
        PlacementTable.build(members, partitions=8, capacity_factor=1.25, zones=zones)
    t = PlacementTable.build(members, partitions=8, capacity_factor=1.25)
    with pytest.raises(InvalidConfigError, match="zones and capacity_factor"):
        t.with_members(members, zones)
