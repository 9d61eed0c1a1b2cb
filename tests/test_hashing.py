"""The bit-exact primitives: scalar and numpy paths agree, and the definitions are pinned."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from placement import hashing as H

u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
EDGES = [0, 1, 2047, 2048, 1 << 63, (1 << 64) - 1, (1 << 64) - 2048, (1 << 64) - 2049] + [1 << b for b in range(11, 64)]


@settings(max_examples=300)
@given(st.lists(u64, min_size=1, max_size=50))
def test_vector_log_equals_scalar(values):
    values = values + EDGES
    got = H.neg_log2_fp_np(np.array(values, dtype=np.uint64)).tolist()
    assert got == [H.neg_log2_fp(v) for v in values]


@given(st.lists(u64, min_size=1, max_size=50))
def test_vector_fmix_equals_scalar(values):
    got = H.fmix64_np(np.array(values, dtype=np.uint64)).tolist()
    assert got == [H.fmix64(v) for v in values]


@settings(max_examples=200)
@given(st.lists(u64, min_size=1, max_size=20), st.lists(u64, min_size=1, max_size=20))
def test_pair_gaps_bound_the_distance_of_h_from_the_top(rows, cols):
    """2**64 - H >= G * 2**32 - 2**31 for every pair, and G is not vacuous (G * 2**32 is
    within 2**32 + 2**31 of 2**64 - H, except where y = 0). Equal row and column hashes
    give H = 0, the far edge."""
    rows, cols = rows + EDGES[:4], cols + EDGES[:4]
    hr, hc = np.array(rows, dtype=np.uint64), np.array(cols, dtype=np.uint64)
    out = np.empty((len(rows), len(cols)), dtype=np.uint64)
    gaps = H.pair_gaps_np(H.premix_np(hr), H.premix_np(hc), out, np.empty_like(out)).tolist()
    for r, row in zip(rows, gaps):
        for c, g in zip(cols, row):
            dist = (1 << 64) - H.pair_hash(r, c)
            assert dist >= g * (1 << 32) - (1 << 31)
            if r != c:
                assert dist <= (g + 1) * (1 << 32) + (1 << 31)


def test_premix_distributes_over_xor():
    a, b = np.array(EDGES, dtype=np.uint64), np.array(EDGES[::-1], dtype=np.uint64)
    x = a ^ b
    assert (H.premix_np(a) ^ H.premix_np(b)).tolist() == (x ^ (x >> np.uint64(33))).tolist()


def test_partition_hashes_vector_equals_scalar():
    ps = np.arange(0, 5000, 7)
    for seed in (0, 1, 2**32 - 1):
        assert H.partition_hashes(ps, seed).tolist() == [H.partition_hash(int(p), seed) for p in ps]


def test_log_is_monotone_and_accurate():
    rng = np.random.default_rng(1)
    hs = np.sort(np.concatenate([rng.integers(0, 2**63, 20000, dtype=np.uint64) * np.uint64(2),
                                 np.array(EDGES, dtype=np.uint64)]))
    L = H.neg_log2_fp_np(hs)
    assert (np.diff(L.astype(np.int64)) <= 0).all(), "L must not increase as H grows"
    for h, lf in zip(hs.tolist()[::50], L.tolist()[::50]):
        u = (2 * (h >> 11) + 1) / 2**54
        exact = -math.log2(u)
        # 32 fraction bits of output plus interpolation error ~1e-7 relative
        assert abs(lf / 2**32 - exact) <= 1e-7 * exact + 2**-30


def test_log_endpoints():
    assert H.neg_log2_fp(0) == (53 << 32) + (1 << 32)  # u = 2**-54 exactly: -log2 = 54
    assert H.neg_log2_fp((1 << 64) - 1) < 2**-50 * 2**32 + 1  # u just below 1


def test_definitions_are_pinned():
    """Golden values: every node, client and language port must reproduce these exactly.

    If this test fails, placement changed for every deployed cluster: that needs a new
    snapshot format version, not a new golden value.
    """
    assert sum(H.G_TABLE) == 1849018012012
    assert H.G_TABLE[0] == round(2**30 / math.log(2)) and H.G_TABLE[-1] == 1 << 31  # g(0)=1/ln2, g(1/2)=2
    assert H.member_hash("n1", 0) == 0xD148310E36C6C909
    assert H.partition_hash(17, 0) == 0x123D1805C5D7F9FA
    assert H.key_hash("order-42", 0) == 0x4B11A18E
    assert H.key_hash("order-42", 0) == H.key_hash(b"order-42", 0)
    assert H.neg_log2_fp(0x0123456789ABCDEF) == 33559934730
