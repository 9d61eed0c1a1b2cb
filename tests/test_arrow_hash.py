"""The vectorised key hash over Arrow buffers equals ``placement.hashing.key_hash`` bit for bit."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.hashing import key_hash

pa = pytest.importorskip("pyarrow")
from spark_jobs.arrow_hash import key_hashes_arrow, murmur3_32_buffers  # noqa: E402 - needs pyarrow (skip above)

SEEDS = st.one_of(st.sampled_from([0, 1, 7, 42, 2**31, 2**32 - 1]), st.integers(0, 2**32 - 1))
# Any Unicode text Arrow can hold (no lone surrogates: not valid UTF-8), weighted towards short keys
# of every length mod 4 and multi-byte characters.
KEYS = st.one_of(st.text(max_size=40), st.text(alphabet="aé€😀", max_size=9),
                 st.text(alphabet=st.characters(codec="ascii"), max_size=13))


def expected(keys, seed):
    return np.array([key_hash(k, seed) for k in keys], dtype=np.uint32)


@settings(max_examples=300, deadline=None)
@given(st.lists(KEYS, max_size=60), SEEDS)
def test_equals_the_scalar_spec(keys, seed):
    assert np.array_equal(key_hashes_arrow(pa.array(keys, pa.string()), seed), expected(keys, seed))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=30), max_size=40), SEEDS)
def test_binary_keys_hash_their_bytes(keys, seed):
    assert np.array_equal(key_hashes_arrow(pa.array(keys, pa.binary()), seed), expected(keys, seed))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), KEYS), min_size=1, max_size=40), st.data(), SEEDS)
def test_slices_nulls_large_and_chunked_arrays(keys, data, seed):
    """Nulls hash as "" (the caller masks them); a slice starts at a non-zero offset."""
    lo = data.draw(st.integers(0, len(keys)))
    hi = data.draw(st.integers(lo, len(keys)))
    want = expected(["" if k is None else k for k in keys[lo:hi]], seed)
    for typ in (pa.string(), pa.large_string()):
        arr = pa.array(keys, typ)
        assert np.array_equal(key_hashes_arrow(arr.slice(lo, hi - lo), seed), want)
    chunked = pa.chunked_array([pa.array(keys[:lo], pa.string()), pa.array(keys[lo:], pa.string())])
    assert np.array_equal(key_hashes_arrow(chunked, seed), expected(["" if k is None else k for k in keys], seed))


def test_every_length_mod_4_and_the_known_vectors():
    keys = ["", "a", "ab", "abc", "abcd", "abcde", "ünïcode-ключ", "😀", "item-123456", "x" * 1001]
    for seed in (0, 1, 2**32 - 1):
        assert key_hashes_arrow(pa.array(keys), seed).tolist() == [key_hash(k, seed) for k in keys]
    # MurmurHash3_x86_32 reference values (SMHasher): "" seed 0 -> 0, "" seed 1 -> 0x514E28B7
    assert key_hashes_arrow(pa.array(["", ""]), 0)[0] == 0
    assert key_hashes_arrow(pa.array([""]), 1)[0] == 0x514E28B7
    assert murmur3_32_buffers(np.zeros(0, np.uint8), np.array([0]), 0).shape == (0,)


def test_one_million_keys_match_the_table(tmp_path):
    from placement.table import PlacementTable

    table = PlacementTable.build({"a": 1.0, "b": 2.0}, partitions=1000, seed=3)
    keys = [f"item-{i}" for i in range(0, 1_000_000, 7)] + ["é" * i for i in range(20)]
    got = key_hashes_arrow(pa.array(keys), 3) % 1000
    assert np.array_equal(got, table.partitions_of(keys))


def test_rejects_non_string_columns():
    with pytest.raises(TypeError):
        key_hashes_arrow(pa.array([1, 2]), 0)
