"""Pins: chosen partitions placed on chosen members (issue 33, "moves of chosen partitions").

Weights move partitions only in bulk and at random; load-aware rebalancing must move *the* hot
partitions. A stable view therefore commits a small set of pins, partition -> member id, and every
table built for that view applies them the same way (the rule is the README's "Pins" section):

* A pin to a member that is not in the table with a positive weight is ignored: a view's pins
  outlive members that leave, and exclusive ownership builds tables without a leaving member.
* The pinned member leads its partition. If it is already a replica it moves to the front;
  otherwise it replaces the last replica in its own zone (a member without a zone is a zone of its
  own), or, when no replica shares its zone, the last replica. So the replica set keeps its size
  and its zone spread never gets worse.

Pins are applied as a last pass over the unpinned owners (plain or zone-aware rendezvous), so a
table keeps its unpinned owners and a new set of pins costs O(P) copying plus O(pins x replicas).

Views carry pins as opaque bytes: ``encode_pins`` is deterministic (msgpack of the sorted
[partition, member] pairs; b"" for none), so equal pins are equal bytes in every node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import msgpack
import numpy as np

from .errors import InvalidConfigError

#: ``decode_pins`` refuses more pins than this: the bytes come from the network.
MAX_PINS: Final = 1 << 20


def validate_pins(pins: object, partitions: int) -> dict[int, str]:
    """Check a {partition: member id} mapping; return it sorted by partition.

    Members are not checked against a membership here: a pin to an absent member is valid and
    ignored (``effective``). Raises ``InvalidConfigError`` saying what is wrong."""
    if pins is None:
        return {}
    if not isinstance(pins, Mapping):
        raise InvalidConfigError(f"pins must map partitions to member ids, got {type(pins).__name__}")
    for p, m in pins.items():
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < partitions:
            raise InvalidConfigError(f"a pin's partition must be an integer in [0, {partitions}), got {p!r}")
        if not isinstance(m, str):
            raise InvalidConfigError(f"the pin of partition {p} must name a member id (a string), got {m!r}")
    return {int(p): pins[p] for p in sorted(pins)}


def effective(pins: Mapping[int, str], units: Mapping[str, int]) -> dict[int, str]:
    """The pins whose member is in the table with a positive weight (the others are ignored)."""
    return {p: m for p, m in pins.items() if units.get(m, 0) > 0}


def apply_pins(owners: np.ndarray, pins: Mapping[int, str], ids: Sequence[str], zones: Mapping[str, str]
               ) -> np.ndarray:
    """The owner array (P, r) of indices into ``ids`` with ``pins`` applied (see the module
    docstring); ``owners`` itself when there are none. Every pinned member must be in ``ids``
    (``effective``); ``zones`` maps members to zones, members without one absent or ""."""
    if not pins:
        return owners
    out = owners.copy()
    index = {m: i for i, m in enumerate(ids)}
    zone = [zones.get(m, "") for m in ids]
    for p, m in pins.items():
        i = index[m]
        row = out[p].tolist()
        if i in row:
            row.remove(i)
        else:  # "" is no zone: a zone of its own, which no other replica shares
            same = [j for j, x in enumerate(row) if zone[i] and zone[x] == zone[i]]
            del row[same[-1] if same else -1]
        out[p] = [i, *row]
    return out


def encode_pins(pins: Mapping[int, str]) -> bytes:
    """Deterministic bytes of a set of pins: msgpack of the sorted [partition, member] pairs, or
    b"" for none. Partitions must be non-negative integers and members strings."""
    for p, m in pins.items():
        if isinstance(p, bool) or not isinstance(p, int) or p < 0 or not isinstance(m, str):
            raise InvalidConfigError(f"a pin must be a partition (integer >= 0) and a member id, got {p!r}: {m!r}")
    if len(pins) > MAX_PINS:
        raise InvalidConfigError(f"{len(pins):,} pins; the limit is {MAX_PINS:,}")
    if not pins:
        return b""
    return msgpack.packb([[int(p), pins[p]] for p in sorted(pins)], use_bin_type=True)


def decode_pins(data: bytes) -> dict[int, str]:
    """The inverse of ``encode_pins``: b"" is no pins; anything malformed (not the sorted,
    duplicate-free pairs ``encode_pins`` writes, or more than ``MAX_PINS``) is an
    ``InvalidConfigError``, never another exception type."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidConfigError(f"pins must be bytes, got {type(data).__name__}")
    if not data:
        return {}
    try:
        pairs = msgpack.unpackb(data, raw=False, max_array_len=MAX_PINS, max_map_len=0, max_bin_len=0,
                                max_ext_len=0)
    except Exception as exc:  # msgpack raises several unrelated types on bad input
        raise InvalidConfigError(f"pins are not valid msgpack: {exc}") from exc
    if not isinstance(pairs, list) or not pairs:
        raise InvalidConfigError("pins must be a non-empty list of [partition, member] pairs")
    out: dict[int, str] = {}
    last = -1
    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2 and type(pair[0]) is int and isinstance(pair[1], str)):
            raise InvalidConfigError(f"a pin must be a [partition, member] pair, got {pair!r:.80}")
        p, m = pair
        if p <= last:  # last starts at -1: this also refuses negative partitions
            raise InvalidConfigError("pins must be sorted by partition (each >= 0), each partition once")
        out[p] = m
        last = p
    return out
