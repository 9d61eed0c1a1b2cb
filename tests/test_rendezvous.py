"""The vectorised ranking equals the scalar reference, for any weights and replica count."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement import InvalidMembershipError, rendezvous
from placement import hashing as H
from placement.hashing import fmix64_np, partition_hashes
from placement.rendezvous import Members, rank_many, rank_one, validate_members

# Every test runs with both screens (numpy, numba): see conftest.both_kernels.
pytestmark = pytest.mark.usefixtures("both_kernels")

ids = st.text(alphabet="abcdefghijklmnop0123456789-é", min_size=1, max_size=8)
few_weights = st.sampled_from([0.5, 1.0, 2.0, 3.0])
any_weight = st.floats(min_value=0.001, max_value=1000.0)


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(ids, st.one_of(few_weights, any_weight), min_size=1, max_size=40),
    st.integers(1, 5),
    st.integers(0, 2**32 - 1),
)
def test_rank_many_equals_rank_one(weights, k, seed):
    ms = Members.build(validate_members(weights), seed)
    parts = np.arange(0, 3000, 13)
    ranked = rank_many(parts, ms, seed, k)
    for row, p in enumerate(parts.tolist()):
        assert tuple(ranked.idx[row].tolist()) == rank_one(p, ms, seed, k)


def test_all_distinct_weights_path_equals_reference():
    """Every member its own weight, 3 replicas."""
    weights = {f"m{i}": 1.0 + i / 64 for i in range(60)}
    ms = Members.build(validate_members(weights), 7)
    parts = np.arange(500)
    ranked = rank_many(parts, ms, 7, 3)
    assert [tuple(r) for r in ranked.idx.tolist()] == [rank_one(p, ms, 7, 3) for p in range(500)]


# Weight units at the edges: the smallest (1/65536), neighbours differing by one unit, the
# largest (1e6), and the whole range in between.
edge_units = st.one_of(
    st.sampled_from([1, 2, 65535, 65536, 65537, 1 << 20, 65536 * 10**6]),
    st.integers(1, 65536 * 10**6),
    st.integers(60000, 70000),
)


@settings(max_examples=80, deadline=None)
@given(
    st.data(),
    st.integers(1, 60),
    st.integers(1, 5),
    st.integers(0, 2**32 - 1),
)
def test_gap_bound_path_is_exact_where_it_claims_to_be(data, n, k, seed):
    """The screened path's 'sure' rows equal the scalar reference, for any weights and hashes,
    including equal hashes (equal H: ties broken by H then id) and extreme weight ratios;
    rank_many (which re-ranks the unsure rows) equals it everywhere."""
    pool = data.draw(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=n))
    hashes = data.draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))  # duplicates likely
    units = data.draw(st.lists(edge_units, min_size=n, max_size=n))
    ms = Members(tuple(f"m{i:03d}" for i in range(n)), np.array(hashes, dtype=np.uint64),
                 np.array(units, dtype=np.int64))
    k = min(k, n)
    parts = np.arange(0, 1200, 7)
    ranked, unsure = rendezvous._rank_by_gap(partition_hashes(parts, seed), ms, k)
    full = rank_many(parts, ms, seed, k)
    for row, p in enumerate(parts.tolist()):
        want = rank_one(p, ms, seed, k)
        if row not in set(unsure.tolist()):
            assert tuple(ranked.idx[row].tolist()) == want
        assert tuple(full.idx[row].tolist()) == want


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.floats(0.01, 100.0), min_size=60, max_size=150, unique=True),
    st.integers(1, 4),
    st.integers(0, 2**32 - 1),
)
def test_many_distinct_weights_equal_reference(weights, k, seed):
    """Every member its own weight (load- or capacity-derived weights): rank_many takes the
    gap-bound path with the float64 fallback for near ties, and must equal rank_one."""
    ms = Members.build(validate_members({f"node-{i}": w for i, w in enumerate(weights)}), seed)
    parts = np.arange(0, 4000, 41)
    ranked = rank_many(parts, ms, seed, k)
    assert [tuple(r) for r in ranked.idx.tolist()] == [rank_one(p, ms, seed, k) for p in parts.tolist()]


def test_gap_bound_is_sound_at_scale():
    """At N = 1,000 the winners' u is within ~1e-3 of 1, where the bound is tightest: every
    member outside a 'sure' row's top k must draw strictly more than its k-th, checked
    against the exact integer draw of every (partition, member) pair (``draws_np``, itself
    equal to the scalar reference: tests/test_hashing.py)."""
    ms = Members.build(validate_members({f"node-{i}": 1.0 + i / 1000 for i in range(1000)}), 5)
    hp = partition_hashes(np.arange(4000), 5)
    exact = rendezvous.draws_np(fmix64_np(hp[:, None] ^ ms.hashes[None, :]), np.broadcast_to(ms.units, (4000, 1000)))
    for k in (1, 3):
        ranked, unsure = rendezvous._rank_by_gap(hp, ms, k)
        sure = np.setdiff1d(np.arange(4000), unsure)
        assert (np.take_along_axis(exact, ranked.idx, axis=1) == ranked.draw).all()
        outside = exact[sure].copy()
        np.put_along_axis(outside, ranked.idx[sure], np.uint64(2**64 - 1), axis=1)
        assert (outside.min(axis=1) > ranked.draw[sure, -1]).all()


def test_gap_bound_path_settles_almost_every_partition():
    """The fast path must carry the load: at N = 300 distinct weights few rows need the
    fallback, but some do (so the fallback is exercised by the equality tests above)."""
    ms = Members.build(validate_members({f"node-{i}": 1.0 + i / 300 for i in range(300)}), 3)
    for k in (1, 3):
        _ranked, unsure = rendezvous._rank_by_gap(partition_hashes(np.arange(20000), 3), ms, k)
        assert 0 < len(unsure) < 20000 // 20


def _member_hash_giving(h: int, hp: int) -> int:
    """A member hash whose pair hash with partition hash hp is exactly h (fmix64 inverted:
    the 33-bit xorshift is an involution, the multipliers are odd)."""
    mask = (1 << 64) - 1
    for mult in (H._C2, H._C1):
        h ^= h >> 33
        h = (h * pow(mult, -1, 1 << 64)) & mask
    return (h ^ (h >> 33)) ^ hp


def test_member_hash_giving_inverts_the_pair_hash():
    hp = H.partition_hash(3, 9)
    for h in (0, 1, 2**63, 2**64 - 1, 0x0123456789ABCDEF):
        assert H.pair_hash(hp, _member_hash_giving(h, hp)) == h


edge_h = st.one_of(
    st.sampled_from([0, 1, 2, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 2**33, 2**64 - 2**32, 2**64 - 2, 2**64 - 1]),
    st.integers(0, 2**64 - 1),
    st.integers(2**64 - 2**34, 2**64 - 1),  # u within 2**-30 of 1: the winners' regime, at G's resolution
    st.integers(0, 2**34),  # u near 0: G = 2**32 - 1, the uint32 mask value
)


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(1, 9), st.integers(1, 6), st.booleans(), st.integers(0, 2**32 - 1))
def test_crafted_pair_hashes_at_the_edges(data, n, k, uniform, seed):
    """Members whose pair hash with one partition is chosen: equal H, H one apart, H at 0
    and 2**64 - 1, many members with G = 2**32 - 1 (so masked and genuine entries meet),
    with equal weights (the uint32 screen) or edge weights (the float32 screen)."""
    p = data.draw(st.integers(0, 10**6))
    hp = H.partition_hash(p, seed)
    targets = data.draw(st.lists(edge_h, min_size=n, max_size=n))
    units = [65536] * n if uniform else data.draw(st.lists(edge_units, min_size=n, max_size=n))
    hashes = [_member_hash_giving(h, hp) for h in targets]
    ms = Members(tuple(f"m{i}" for i in range(n)), np.array(hashes, dtype=np.uint64), np.array(units, dtype=np.int64))
    for kk in sorted({1, min(k, n), n}):
        assert tuple(rank_many(np.array([p]), ms, seed, kk).idx[0].tolist()) == rank_one(p, ms, seed, kk)


def test_large_k_takes_the_float_path_and_equals_reference():
    """k above _MAX_SCREENED_K (bounded loads widen lists up to N) skips the screen."""
    ms = Members.build(validate_members({f"n{i}": 1.0 + (i % 5) for i in range(50)}), 1)
    k = rendezvous._MAX_SCREENED_K + 3
    ranked = rank_many(np.arange(40), ms, 1, k)
    assert [tuple(r) for r in ranked.idx.tolist()] == [rank_one(p, ms, 1, k) for p in range(40)]


def test_identical_member_hashes_tie_break_by_id():
    """Force equal H for all members: the order must fall back to ids, in both paths."""
    ms = Members(("a", "b", "c"), np.array([5, 5, 5], dtype=np.uint64), np.array([65536] * 3))
    ranked = rank_many(np.arange(20), ms, 0, 3)
    assert ranked.idx.tolist() == [[0, 1, 2]] * 20
    assert all(rank_one(p, ms, 0, 3) == (0, 1, 2) for p in range(20))


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"": 1.0}, "non-empty"),
        ({" a": 1.0}, "spaces"),
        ({"a": -1.0}, ">= 0"),
        ({"a": float("nan")}, "finite"),
        ({"a": float("inf")}, "finite"),
        ({"a": "1"}, "number"),
        ({"a": True}, "number"),
        ({"a": 1e-9}, "smallest positive"),
        ({"a": 2e6}, "maximum"),
        ([("a", 1.0), ("a", 2.0)], "more than once"),
        ("a,b", "dict of id"),
        ({1: 1.0}, "non-empty strings"),
    ],
)
def test_bad_members_are_rejected_clearly(bad, message):
    with pytest.raises(InvalidMembershipError, match=message):
        validate_members(bad)
