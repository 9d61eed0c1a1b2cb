"""Fragments of ownership messages larger than a datagram (ownership.wire): a view of
hundreds of members round-trips in any order; a lost fragment loses the message (never a wrong
one); garbage and endless partial messages cost bounded memory and are counted. And versions mixed
on the wire (a rolling upgrade)."""

from __future__ import annotations

import random

import msgpack

from ownership import NoteAck
from ownership.views import Decided
from ownership.wire import MAGIC, MAX_BODY, Reassembler, decode_many, encode_many


def big_view(n: int) -> Decided:
    members = tuple(sorted(f"placement-worker-{i:04d}" for i in range(n)))
    return Decided(7, members, tuple(1.0 + (i % 3) for i in range(n)))


def test_a_view_larger_than_a_datagram_round_trips_in_any_order() -> None:
    msg = big_view(600)
    datagrams = encode_many("n1", [NoteAck(1, 2), msg, NoteAck(3, 4)], cluster="c")
    assert len(datagrams) > 10 and all(len(d) <= MAX_BODY + 64 for d in datagrams)
    rng = random.Random(3)
    rng.shuffle(datagrams)
    r = Reassembler()
    got = []
    for d in datagrams:
        decoded = decode_many(d, cluster="c", reassembler=r)
        assert decoded is not None
        got += decoded[1]
    assert sorted(got, key=repr) == sorted([NoteAck(1, 2), msg, NoteAck(3, 4)], key=repr)
    assert r.dropped == 0


def test_a_lost_fragment_loses_the_message_and_partial_ones_are_bounded() -> None:
    r = Reassembler(max_partial=4)
    for k in range(10):  # ten messages, each missing its last fragment
        frags = encode_many("n1", [big_view(200 + k)])
        for d in frags[:-1]:
            assert decode_many(d, reassembler=r) == ("n1", [])
    assert len(r._parts) == 4 and r.dropped == 6  # the oldest given up, counted


def test_fragments_are_malformed_without_a_reassembler_and_garbage_is_dropped() -> None:
    frag = encode_many("n1", [big_view(300)])[0]
    assert decode_many(frag) is None
    r = Reassembler()
    bad = [
        [13, 1, 0, 1, b"x"],          # a message of one fragment is not fragmented
        [13, 1, 5, 2, b"x"],          # index beyond the count
        [13, -1, 0, 2, b"x"],         # bad id
        [13, 1, 0, 999, b"x"],        # too many fragments
        [13, 1, 0, 2, "text"],        # not bytes
    ]
    for item in bad:
        data = MAGIC + msgpack.packb(["", "n1", [item]], use_bin_type=True)
        assert decode_many(data, reassembler=r) is None
    # Well-formed fragments whose bytes are garbage: dropped once assembled, counted.
    for i in range(2):
        data = MAGIC + msgpack.packb(["", "n1", [[13, 9, i, 2, b"\xc1\xc1"]]], use_bin_type=True)
        assert decode_many(data, reassembler=r) == ("n1", [])
    assert r.dropped == 1


def test_a_datagram_is_what_msgpack_makes_of_the_whole_body() -> None:
    """Each message is packed once and the packed messages are joined behind msgpack's array
    header: the same bytes as packing ``[cluster, sender, [[kind, field...], ...]]`` at once
    (from 16 messages on the header is longer)."""
    for n in (1, 15, 16, 40):
        (data,) = encode_many("n1", [NoteAck(i, i + 1) for i in range(n)], cluster="c")
        assert data == MAGIC + msgpack.packb(["c", "n1", [[1, i, i + 1] for i in range(n)]], use_bin_type=True)


def _datagram(*items: list) -> bytes:
    return MAGIC + msgpack.packb(["c", "n1", list(items)], use_bin_type=True)


def test_versions_mix_a_newer_kind_is_skipped_and_counted_newer_fields_ignored_older_ones_defaulted() -> None:
    """A rolling upgrade mixes versions on the wire. A message of a kind this version does not
    know is skipped (counted) and the rest of its datagram read; a known message with fields
    appended by a newer version is read without them; one from an older version, without its
    trailing fields that have defaults, takes the defaults. A known kind with a bad field, or
    without a field that has no default, still drops the whole datagram."""
    from ownership.lease import LeaseReq

    counts: dict[str, int] = {}
    got = decode_many(_datagram([99, "a field of the future"], [1, 5, 6], [1, 7, 8, "later"]), cluster="c",
                      counts=counts)
    assert got == ("n1", [NoteAck(5, 6), NoteAck(7, 8)]) and counts == {"unknown_kind": 1}
    old_request = decode_many(_datagram([4, 3, 1, 77]), cluster="c")  # seq, generation, stable: no more
    assert old_request == ("n1", [LeaseReq(3, 1, 77)])  # (its inc, members, ...: the defaults)
    for bad in ([1, 5], [1, 5, -1], [1, "5", 6], [-1, 2], [13, 1, 0, 2, b"x"]):
        assert decode_many(_datagram([1, 5, 6], bad), cluster="c") is None, bad
