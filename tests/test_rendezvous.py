"""The vectorised ranking equals the scalar reference, for any weights and replica count."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from placement import InvalidMembershipError
from placement.rendezvous import Members, rank_many, rank_one, validate_members

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
    """Every member in its own weight group: the 'score everyone' path."""
    weights = {f"m{i}": 1.0 + i / 64 for i in range(60)}
    ms = Members.build(validate_members(weights), 7)
    parts = np.arange(500)
    ranked = rank_many(parts, ms, 7, 3)
    assert [tuple(r) for r in ranked.idx.tolist()] == [rank_one(p, ms, 7, 3) for p in range(500)]


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
