"""PlacementTable: shares, movement, incremental == full, determinism, bad input, wire form."""

import json
import os
import subprocess
import sys

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement import InvalidConfigError, NoOwnerError, PlacementTable, SnapshotError

# Every test runs with both screens (numpy, numba): see conftest.both_kernels.
pytestmark = pytest.mark.usefixtures("both_kernels")

P = 4096


def members(n, weight=1.0):
    return {f"node-{i:03d}": weight for i in range(n)}


def test_public_api_shapes():
    t = PlacementTable.build({"n1": 1.0, "n2": 2.0, "n3": 1.0}, partitions=P, replicas=2, seed=0)
    p = t.partition_of("order-42")
    assert 0 <= p < P and t.partitions_of(["order-42"]).tolist() == [p]
    assert t.lookup("order-42") == t.owners(p) and t.owner(p) == t.owners(p)[0]
    assert len(set(t.owners(17))) == 2
    assert len(t.checksum) == 32 and t.checksum == PlacementTable.build({"n3": 1, "n2": 2, "n1": 1}, P, 2).checksum
    assert t.checksum != PlacementTable.build({"n1": 1.0, "n2": 2.0, "n3": 1.0}, P, 2, seed=1).checksum
    assert t.members == {"n1": 1.0, "n2": 2.0, "n3": 1.0}


def test_shares_follow_weights():
    """1:2:4 weights get 1/7, 2/7, 4/7 of 65,536 partitions (binomial sd ~ 0.15% of P)."""
    t = PlacementTable.build({"a": 1.0, "b": 2.0, "c": 4.0}, partitions=65536, seed=3)
    load = t.load()
    for m, w in (("a", 1), ("b", 2), ("c", 4)):
        share = load[m] / 65536
        sd = (w / 7 * (1 - w / 7) / 65536) ** 0.5
        assert abs(share - w / 7) < 4 * sd, (m, share)


def test_shares_follow_weights_many_members():
    weights = {f"m{i}": float(1 + i % 4) for i in range(40)}
    t = PlacementTable.build(weights, partitions=65536, seed=11)
    load, total = t.load(), sum(weights.values())
    chi2 = sum((load[m] - 65536 * w / total) ** 2 / (65536 * w / total) for m, w in weights.items())
    assert chi2 < 80  # 39 degrees of freedom: p ~ 1e-4


def test_join_moves_only_to_newcomer_about_p_w_over_w():
    old = PlacementTable.build(members(20), partitions=65536, seed=5)
    new = old.with_members({**members(20), "joiner": 2.0})
    moved = old.moved(new)
    assert all(new.owner(p) == "joiner" for p in moved)
    expected = 65536 * 2 / 22
    assert abs(len(moved) - expected) < 4 * expected**0.5


def test_leave_moves_only_leavers_partitions():
    old = PlacementTable.build(members(20), partitions=P, replicas=3, seed=5)
    gone = "node-007"
    new = old.with_members({m: w for m, w in members(20).items() if m != gone})
    moved = old.moved(new)
    assert set(moved) == set(old.owned_by(gone))
    for p in moved:  # survivors keep their slots: the leaver's replacement is added at the end or in between
        assert set(old.owners(p)) - {gone} <= set(new.owners(p))


def test_weight_zero_never_owns():
    t = PlacementTable.build({"a": 1.0, "b": 0.0, "c": 1.0}, partitions=P, replicas=3)
    assert t.owned_by("b") == [] and all(len(t.owners(p)) == 2 for p in range(P))
    assert "b" in t.members


def test_no_positive_member():
    t = PlacementTable.build({"a": 0.0}, partitions=8)
    assert t.owners(3) == ()
    with pytest.raises(NoOwnerError):
        t.owner(3)
    with pytest.raises(NoOwnerError):
        t.route(["x"])


membership = st.dictionaries(
    st.sampled_from([f"m{i}" for i in range(12)]), st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0, 3.5]), max_size=12
)


@settings(max_examples=40, deadline=None)
@given(st.lists(membership, min_size=2, max_size=6), st.integers(1, 4), st.sampled_from([None, 1.0, 1.25]))
def test_incremental_equals_full_build(steps, replicas, c):
    t = PlacementTable.build(steps[0], partitions=512, replicas=replicas, seed=9, capacity_factor=c)
    for step in steps[1:]:
        t = t.with_members(step)
        assert t == PlacementTable.build(step, partitions=512, replicas=replicas, seed=9, capacity_factor=c)


@settings(max_examples=30, deadline=None)
@given(
    st.one_of(st.sampled_from([1 / 65536, 0.5, 1.0, 1.5, 1e6]), st.floats(1 / 65536, 1e6)),
    st.integers(1, 3),
    st.integers(0, 2**32 - 1),
)
def test_join_with_any_weight_equals_full_build(weight, replicas, seed):
    """A join scores exactly only the rows a log-free bound cannot rule out: any weight."""
    base = {f"node-{i}": 1.0 + i / 37 for i in range(120)}
    t = PlacementTable.build(base, partitions=2048, replicas=replicas, seed=seed)
    grown = {**base, "joiner": weight}
    assert t.with_members(grown) == PlacementTable.build(grown, partitions=2048, replicas=replicas, seed=seed)


def test_incremental_single_changes_on_a_larger_table():
    base = members(50)
    t = PlacementTable.build(base, partitions=P, replicas=2)
    changes = [{**base, "new": 1.0}, base, {**base, "node-010": 3.0},
               {k: v for k, v in base.items() if k != "node-000"}]
    for step in changes:
        t = t.with_members(step)
        assert t == PlacementTable.build(step, partitions=P, replicas=2)


def test_order_independence():
    items = [*members(30).items(), ("heavy", 3.0)]
    a = PlacementTable.build(dict(items), partitions=P, replicas=2)
    b = PlacementTable.build(dict(reversed(items)), partitions=P, replicas=2)
    assert a == b and a.checksum == b.checksum


def _digest_in_subprocess(hashseed: str) -> str:
    code = (
        "from placement import PlacementTable; import hashlib;"
        "t = PlacementTable.build({f'n{i}': 1.0 + i % 3 for i in range(25)}, partitions=4096, replicas=3, seed=42);"
        "print(t.checksum, hashlib.sha256(t.to_msgpack()).hexdigest())"
    )
    env = {**os.environ, "PYTHONHASHSEED": hashseed}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout


def test_pythonhashseed_independence():
    assert _digest_in_subprocess("1") == _digest_in_subprocess("2024")


def test_placement_is_pinned():
    """Golden digest of a fixed placement: a change here changes every deployed cluster."""
    t = PlacementTable.build({f"n{i}": 1.0 + i % 3 for i in range(25)}, partitions=4096, replicas=3, seed=42)
    ids, idx = t.owner_indices()
    rows = [[ids[i] for i in r] for r in idx.tolist()]
    assert rows[0] == GOLDEN_ROW0 and rows[4095] == GOLDEN_ROW4095
    assert t.load() == GOLDEN_LOAD


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(partitions=0), "partitions"),
        (dict(partitions=2.5), "partitions"),
        (dict(partitions=8, replicas=0), "replicas"),
        (dict(partitions=8, seed=-1), "seed"),
        (dict(partitions=8, seed=2**32), "seed"),
        (dict(partitions=8, capacity_factor=0.9), "capacity_factor"),
        (dict(partitions=8, capacity_factor=float("nan")), "capacity_factor"),
    ],
)
def test_bad_config_is_rejected_clearly(kwargs, message):
    with pytest.raises(InvalidConfigError, match=message):
        PlacementTable.build({"a": 1.0}, **kwargs)


def test_partition_index_checked():
    t = PlacementTable.build({"a": 1.0}, partitions=8)
    for bad in (-1, 8, "3", 1.0, True):
        with pytest.raises(IndexError):
            t.owners(bad)  # type: ignore[arg-type]  # deliberately wrong types: the bad input under test


def test_route_groups_by_leader():
    t = PlacementTable.build(members(7), partitions=P, replicas=2)
    keys = [f"k{i}" for i in range(5000)] + [b"raw-bytes"]
    routed = t.route(keys)
    as_text = lambda k: k if isinstance(k, str) else k.decode()  # noqa: E731
    assert sorted(map(as_text, (k for ks in routed.values() for k in ks))) == sorted(map(as_text, keys))
    for leader, ks in routed.items():
        assert all(t.lookup(k)[0] == leader for k in ks)


@pytest.mark.parametrize("c", [None, 1.05])
def test_serialisation_round_trip(c):
    t = PlacementTable.build({**members(9), "z": 0.0, "w": 2.5}, partitions=1000, replicas=2, seed=4, capacity_factor=c)
    for again in (
        PlacementTable.from_json(t.to_json(), verify=True),
        PlacementTable.from_msgpack(t.to_msgpack(), verify=True),
        PlacementTable.from_json(t.to_json()),
    ):
        assert again == t and again.lookup("x") == t.lookup("x")
    # a deserialised table (no scores kept) still supports with_members
    assert PlacementTable.from_json(t.to_json()).with_members(members(3)) == t.with_members(members(3))


def test_malformed_snapshots_are_rejected():
    t = PlacementTable.build(members(3), partitions=64, replicas=2)
    good = json.loads(t.to_json())
    cases = [
        "not json",
        "[1, 2]",
        json.dumps({**good, "format": "other/9"}),
        json.dumps({k: v for k, v in good.items() if k != "owners"}),
        json.dumps({**good, "partitions": 65}),
        json.dumps({**good, "owners": [[0, 7]] * 64}),
        json.dumps({**good, "owners": [[0]] * 64}),
        json.dumps({**good, "members": [["node-000", 1.0]]}),
        json.dumps({**good, "owners": "zz"}),
    ]
    for text in cases:
        with pytest.raises(SnapshotError):
            PlacementTable.from_json(text)
    tampered = {**good, "owners": [[r[1], r[0]] for r in good["owners"]]}
    with pytest.raises(SnapshotError, match="differ"):
        PlacementTable.from_json(json.dumps(tampered), verify=True)
    for blob in (b"\xc1", msgpack.packb([1]), b""):
        with pytest.raises(SnapshotError):
            PlacementTable.from_msgpack(blob)


def test_bounded_respects_caps_and_is_order_independent():
    weights = {f"m{i}": float(1 + i % 3) for i in range(60)}
    a = PlacementTable.build(weights, partitions=P, replicas=2, seed=1, capacity_factor=1.05)
    b = PlacementTable.build(dict(reversed(list(weights.items()))), partitions=P, replicas=2, seed=1,
                             capacity_factor=1.05)
    assert a == b
    load, total = a.load(leader_only=False), sum(weights.values())
    for m, w in weights.items():
        assert load[m] <= np.ceil(1.05 * P * 2 * w / total)
    assert sum(load.values()) == P * 2 and all(len(set(a.owners(p))) == 2 for p in range(P))


def test_bounded_is_stable_matching():
    """No (partition, member) pair would both rather be matched to each other."""
    from placement.rendezvous import Members, rank_one

    weights = {f"m{i}": float(1 + i % 2) for i in range(12)}
    t = PlacementTable.build(weights, partitions=300, replicas=1, seed=2, capacity_factor=1.0)
    ms = Members.build({m: int(w * 65536) for m, w in weights.items()}, 2)
    rank = {p: rank_one(p, ms, 2, len(ms)) for p in range(300)}
    owner = {p: ms.ids.index(t.owner(p)) for p in range(300)}
    load = {i: sum(1 for o in owner.values() if o == i) for i in range(len(ms))}
    caps = {i: np.ceil(300 * ms.units[i] / ms.units.sum()) for i in range(len(ms))}
    from placement.hashing import pair_hash, partition_hash
    from placement.rendezvous import draw_of

    def key(p, i):
        h = pair_hash(partition_hash(p, 2), int(ms.hashes[i]))
        return (draw_of(h, int(ms.units[i])), -h, i, p)

    for p in range(300):
        for i in rank[p][: rank[p].index(owner[p])]:  # members p prefers to its owner
            if load[i] < caps[i]:
                pytest.fail(f"partition {p} prefers member {i}, which has room")
            worst = max(key(q, i) for q, o in owner.items() if o == i)
            assert key(p, i) > worst, "member would rather hold partition p"
GOLDEN_ROW0 = ['n22', 'n7', 'n5']
GOLDEN_ROW4095 = ['n20', 'n11', 'n12']
GOLDEN_LOAD = {'n0': 79, 'n1': 155, 'n10': 165, 'n11': 225, 'n12': 86, 'n13': 165, 'n14': 255, 'n15': 102, 'n16': 154,
               'n17': 230, 'n18': 103, 'n19': 160, 'n2': 249, 'n20': 288, 'n21': 82, 'n22': 182, 'n23': 243,
               'n24': 71, 'n3': 91, 'n4': 152, 'n5': 265, 'n6': 83, 'n7': 173, 'n8': 256, 'n9': 82}


def test_lone_surrogate_keys_raise_instead_of_crashing():
    """mmh3 5.3 segfaults on such a str; every key path must encode it first (and fail cleanly)."""
    t = PlacementTable.build(members(3), partitions=64)
    for call in (t.lookup, t.partition_of, lambda k: t.partitions_of([k]), lambda k: t.route([k])):
        with pytest.raises(UnicodeEncodeError):
            call("bad-\ud800")
    assert t.lookup("ünïcödé") == t.lookup("ünïcödé".encode())
