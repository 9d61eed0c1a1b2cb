"""Pins (issue 33, "moves of chosen partitions"): the table against the rule written out plainly,
incremental == full, checksums and snapshots, bad input, and the bytes views carry."""

import json

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import placement.table
import placement.zones
from placement import InvalidConfigError, PlacementTable, SnapshotError
from placement.pins import MAX_PINS, decode_pins, encode_pins
from placement.snapshot import PlacementSnapshot

P = 64
ids = [f"m{i}" for i in range(8)]
memberships = st.dictionaries(st.sampled_from(ids), st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0]), max_size=8)
zone_lists = st.lists(st.sampled_from(["", "", "a", "b", "c"]), min_size=8, max_size=8)
pin_sets = st.dictionaries(st.integers(0, P - 1), st.sampled_from([*ids, "ghost"]), max_size=24)


def zones_of(members: dict, zone_list: list) -> dict:
    return {m: z for m, z in zip(ids, zone_list) if m in members}


def reference(members: dict, zones: dict, pins: dict, replicas: int, seed: int) -> list[tuple[str, ...]]:
    """The rule as the README states it, on the owners of the table built without pins."""
    plain = PlacementTable.build(members, partitions=P, replicas=replicas, seed=seed, zones=zones)
    live = {m for m, w in members.items() if w > 0}

    def zone(m: str) -> object:
        return zones.get(m) or ("its own", m)

    rows = []
    for p in range(P):
        row = list(plain.owners(p))
        m = pins.get(p)
        if m is not None and m in live:
            if m in row:
                row.remove(m)
            else:
                same = [x for x in row if zone(x) == zone(m)]
                row.remove(same[-1] if same else row[-1])
            row.insert(0, m)
        rows.append(tuple(row))
    return rows


@settings(max_examples=80, deadline=None)
@given(memberships, zone_lists, pin_sets, st.integers(1, 3), st.integers(0, 2**32 - 1), st.booleans())
def test_pinned_table_follows_the_rule(members, zone_list, pins, replicas, seed, with_zones):
    zones = zones_of(members, zone_list) if with_zones else {}
    t = PlacementTable.build(members, partitions=P, replicas=replicas, seed=seed, zones=zones, pins=pins)
    expected = reference(members, zones, pins, replicas, seed)
    assert [t.owners(p) for p in range(P)] == expected
    live = {m for m, w in members.items() if w > 0}
    assert t.pins == {p: m for p, m in sorted(pins.items()) if m in live}
    for p, m in t.pins.items():
        assert t.owner(p) == m and p in t.owned_by(m, leader_only=True)
    load = {m: 0 for m in sorted(live)}
    for row in expected:
        for m in row:
            load[m] += 1
    assert t.load(leader_only=False) == load
    ids_, idx = t.owner_indices()
    assert [tuple(ids_[i] for i in row) for row in idx.tolist()] == expected


@settings(max_examples=40, deadline=None)
@given(memberships, zone_lists, pin_sets, st.integers(1, 3))
def test_pins_never_worsen_the_zone_spread(members, zone_list, pins, replicas):
    zones = zones_of(members, zone_list)
    plain = PlacementTable.build(members, partitions=P, replicas=replicas, zones=zones)
    pinned = plain.with_pins(pins)

    def spread(row: tuple[str, ...]) -> int:
        return len({zones.get(m) or ("its own", m) for m in row})

    for p in range(P):
        assert len(pinned.owners(p)) == len(plain.owners(p))
        assert spread(pinned.owners(p)) >= spread(plain.owners(p))


# --- incremental == full -----------------------------------------------------------------------
# None: keep the table's own pins; {}: clear them
step_pins: st.SearchStrategy[dict[int, str] | None] = st.one_of(st.none(), st.just({}), pin_sets)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(memberships, zone_lists, step_pins), min_size=2, max_size=6), st.integers(1, 3),
       st.booleans())
def test_with_members_equals_a_full_build(steps, replicas, with_zones):
    def zones_for(members, zone_list):
        return zones_of(members, zone_list) if with_zones else {}

    members, zone_list, pins = steps[0]
    t = PlacementTable.build(members, partitions=P, replicas=replicas, seed=3, zones=zones_for(members, zone_list),
                             pins=pins)
    for members, zone_list, pins in steps[1:]:
        zones = zones_for(members, zone_list)
        kept = t.pins if pins is None else pins
        t = t.with_members(members, zones, pins)
        full = PlacementTable.build(members, partitions=P, replicas=replicas, seed=3, zones=zones, pins=kept)
        assert t == full and t.checksum == full.checksum and t.pins == full.pins


@settings(max_examples=40, deadline=None)
@given(memberships, zone_lists, st.lists(pin_sets, min_size=1, max_size=4), st.integers(1, 3))
def test_with_pins_equals_a_full_build(members, zone_list, pin_steps, replicas):
    zones = zones_of(members, zone_list)
    t = PlacementTable.build(members, partitions=P, replicas=replicas, zones=zones)
    for pins in pin_steps:
        t = t.with_pins(pins)
        assert t == PlacementTable.build(members, partitions=P, replicas=replicas, zones=zones, pins=pins)
    assert t.with_pins({}) == PlacementTable.build(members, partitions=P, replicas=replicas, zones=zones)


def test_with_pins_ranks_nothing(monkeypatch):
    members = {f"n{i:02d}": 1.0 + i % 3 for i in range(64)}
    zones = {m: "abc"[i % 3] for i, m in enumerate(members)}
    plain = PlacementTable.build(members, partitions=4096, replicas=3)
    zoned = PlacementTable.build(members, partitions=4096, replicas=3, zones=zones)

    def no_ranking(*args, **kwargs):
        raise AssertionError("with_pins ranked members")

    monkeypatch.setattr(placement.table, "rank_many", no_ranking)
    monkeypatch.setattr(placement.zones, "rank_group", no_ranking)
    for t in (plain, zoned):
        pinned = t
        for p in range(0, 4096, 37):
            pinned = pinned.with_pins({**pinned.pins, p: f"n{p % 64:02d}"})
        assert pinned.with_pins({}) == t


def test_a_table_read_without_verify_still_takes_new_pins():
    members = {"a": 1.0, "b": 1.0, "c": 2.0}
    t = PlacementTable.build(members, partitions=P, replicas=2, pins={1: "a", 2: "b"})
    read = PlacementTable.from_json(t.to_json())  # its owners before pins are unknown
    assert read == t
    assert read.with_pins({3: "c"}) == PlacementTable.build(members, partitions=P, replicas=2, pins={3: "c"})
    assert read.with_members({"a": 1.0, "b": 1.0}) == PlacementTable.build(
        {"a": 1.0, "b": 1.0}, partitions=P, replicas=2, pins={1: "a", 2: "b"})


def test_a_pin_outlives_its_member_but_only_effective_pins_are_kept():
    members = {"a": 1.0, "b": 1.0, "c": 1.0}
    t = PlacementTable.build(members, partitions=P, replicas=2, pins={5: "a", 6: "c", 7: "gone"})
    assert t.pins == {5: "a", 6: "c"}
    without_c = t.with_members({"a": 1.0, "b": 1.0, "c": 0.0})
    assert without_c.pins == {5: "a"} and without_c.owner(5) == "a"
    assert without_c.with_members(members).pins == {5: "a"}  # the table forgot c's pin: views keep them


# --- the leader, moved, replicas=1 -------------------------------------------------------------
def test_replicas_one_is_just_the_pinned_member_and_moved_sees_it():
    members = {f"n{i}": 1.0 for i in range(5)}
    t = PlacementTable.build(members, partitions=P, replicas=1)
    p = next(p for p in range(P) if t.owner(p) != "n0")
    pinned = t.with_pins({p: "n0"})
    assert pinned.owners(p) == ("n0",)
    assert t.moved(pinned, leaders=True) == [p] and t.moved(pinned) == [p]
    key = next(k for k in (f"k{i}" for i in range(10_000)) if t.partition_of(k) == p)
    assert pinned.lookup(key) == ("n0",) and pinned.route([key]) == {"n0": [key]}


def test_pinned_member_replaces_the_last_replica_of_its_zone():
    members = {f"n{i}": 1.0 for i in range(9)}
    zones = {m: "abc"[i % 3] for i, m in enumerate(members)}
    t = PlacementTable.build(members, partitions=P, replicas=3, zones=zones)
    row = t.owners(0)
    m = next(x for x in members if x not in row)  # its zone holds one replica of row (3 zones, 3 replicas)
    victim = next(x for x in row if zones[x] == zones[m])
    assert t.with_pins({0: m}).owners(0) == (m, *(x for x in row if x != victim))


# --- checksum and snapshots --------------------------------------------------------------------
@pytest.mark.parametrize("pins", [None, {}, {3: "ghost"}, {4: "zero"}])
def test_no_effective_pins_is_exactly_the_table_without_the_argument(pins):
    members = {"a": 1.0, "b": 2.0, "c": 1.0, "zero": 0.0}
    plain = PlacementTable.build(members, partitions=P, replicas=2, seed=5)
    t = PlacementTable.build(members, partitions=P, replicas=2, seed=5, pins=pins)
    assert t.checksum == plain.checksum and t == plain and hash(t) == hash(plain)
    assert t.to_msgpack() == plain.to_msgpack() and t.to_json() == plain.to_json()
    assert "pins" not in t.to_dict()


def test_pins_change_the_checksum_even_where_owners_do_not():
    members = {"a": 1.0, "b": 2.0, "c": 1.0}
    plain = PlacementTable.build(members, partitions=P, replicas=2)
    same = plain.with_pins({0: plain.owner(0)})  # the leader pinned to itself: owners unchanged
    assert same.owner_indices()[1].tolist() == plain.owner_indices()[1].tolist()
    assert same.checksum != plain.checksum and same != plain
    other = plain.with_pins({0: next(m for m in members if m != plain.owner(0))})
    assert len({plain.checksum, same.checksum, other.checksum}) == 3


@pytest.mark.parametrize("zones", [None, {"a": "x", "b": "y"}])
@pytest.mark.parametrize("form", ["json", "msgpack"])
def test_snapshot_round_trip_with_pins(zones, form):
    members = {"a": 1.0, "b": 2.0, "c": 1.0, "d": 0.0}
    t = PlacementTable.build(members, partitions=P, replicas=2, zones=zones, pins={9: "c", 2: "a", 4: "d"})
    assert t.to_dict()["pins"] == [[2, "a"], [9, "c"]]
    if form == "json":
        back = PlacementTable.from_json(t.to_json(), verify=True)
    else:
        back = PlacementTable.from_msgpack(t.to_msgpack(), verify=True)
    assert back == t and back.pins == t.pins and back.checksum == t.checksum
    snap = PlacementSnapshot(t, {"a": "http://a"})
    assert PlacementSnapshot.from_msgpack(snap.to_msgpack(), verify=True).table == t


def _pinned_dict() -> dict:
    t = PlacementTable.build({"a": 1.0, "b": 1.0, "c": 1.0}, partitions=P, replicas=2, pins={1: "a", 7: "b"})
    return json.loads(t.to_json())


@pytest.mark.parametrize("tamper", [
    lambda d: d["pins"].__setitem__(0, [1, "c"]),  # another member: the checksum says no
    lambda d: d.pop("pins"),  # an old writer's view of it: the checksum says no
    lambda d: d["pins"].pop(),
])
def test_a_tampered_pins_snapshot_is_rejected(tamper):
    data = _pinned_dict()
    tamper(data)
    with pytest.raises(SnapshotError, match="checksum"):
        PlacementTable.from_dict(data)


def test_pinned_owners_that_do_not_follow_the_pins_are_caught_by_verify():
    data = _pinned_dict()
    data["owners"][1] = data["owners"][1][::-1]
    assert PlacementTable.from_dict(data).owners(1)[0] != "a"  # the checksum covers inputs, not owners
    with pytest.raises(SnapshotError, match="differ"):
        PlacementTable.from_dict(data, verify=True)


@pytest.mark.parametrize("pins", [
    "1:a", [[1]], [[1, "a", 2]], [["1", "a"]], [[1.0, "a"]], [[True, "a"]], [[64, "a"]], [[-1, "a"]],
    [[1, 2]], [[7, "b"], [1, "a"]], [[1, "a"], [1, "a"]], [[1, "a"], [7, "ghost"]], [[[1], "a"]], None,
])
def test_malformed_snapshot_pins_are_a_snapshot_error(pins):
    data = _pinned_dict()
    data["pins"] = pins
    with pytest.raises(SnapshotError):
        PlacementTable.from_dict(data)


@pytest.mark.parametrize("pins, message", [
    ({-1: "a"}, "partition"), ({P: "a"}, "partition"), ({True: "a"}, "partition"), ({"3": "a"}, "partition"),
    ({1.0: "a"}, "partition"), ({3: 7}, "member id"), ({3: None}, "member id"), ([(3, "a")], "map"),
])
def test_bad_pins_are_rejected_clearly(pins, message):
    t = PlacementTable.build({"a": 1.0}, partitions=P)
    for call in (lambda: PlacementTable.build({"a": 1.0}, partitions=P, pins=pins),
                 lambda: t.with_pins(pins), lambda: t.with_members({"a": 1.0, "b": 1.0}, pins=pins)):
        with pytest.raises(InvalidConfigError, match=message):
            call()


@pytest.mark.parametrize("pins", [{1: "a"}, {1: "ghost"}])
def test_pins_do_not_combine_with_capacity_factor(pins):
    with pytest.raises(InvalidConfigError, match="capacity_factor"):
        PlacementTable.build({"a": 1.0, "b": 1.0}, partitions=P, capacity_factor=1.25, pins=pins)
    t = PlacementTable.build({"a": 1.0, "b": 1.0}, partitions=P, capacity_factor=1.25)
    with pytest.raises(InvalidConfigError, match="capacity_factor"):
        t.with_pins(pins)


# --- the bytes views carry ---------------------------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.integers(0, 2**32), st.text(max_size=20), max_size=30))
def test_encode_decode_round_trip(pins):
    data = encode_pins(pins)
    assert decode_pins(data) == pins
    assert encode_pins(dict(reversed(list(pins.items())))) == data  # deterministic: insertion order is lost
    assert (data == b"") == (not pins)


@pytest.mark.parametrize("data", [
    b"\xc1", b"\x92\x01", b"\x90", msgpack.packb({1: "a"}), msgpack.packb([[1, "a", 2]]),
    msgpack.packb([[-1, "a"]]), msgpack.packb([[True, "a"]]), msgpack.packb([[1.0, "a"]]), msgpack.packb([[1, b"a"]]),
    msgpack.packb([[2, "a"], [1, "b"]]), msgpack.packb([[1, "a"], [1, "a"]]), msgpack.packb([1, "a"]),
    msgpack.packb("pins"),
    b"\xdd" + (MAX_PINS + 1).to_bytes(4, "big") + b"\x92\x01\xa1a" * 4,  # too many: refused before reading them
    "text", None,
])
def test_malformed_pin_bytes_are_an_invalid_config_error(data):
    with pytest.raises(InvalidConfigError):
        decode_pins(data)


def test_encode_refuses_what_decode_would():
    with pytest.raises(InvalidConfigError):
        encode_pins({-1: "a"})
    with pytest.raises(InvalidConfigError):
        encode_pins({1: 2})  # type: ignore[dict-item]
    with pytest.raises(InvalidConfigError, match="limit"):
        encode_pins(dict.fromkeys(range(MAX_PINS + 1), "a"))
