"""Datagram form of the ownership messages (``ownership.core``, ``ownership.lease``):
msgpack, strictly checked.

A datagram starts with ``MAGIC`` (membership datagrams start with ``b"SW"``), so one UDP port
can carry both, then ``[cluster, sender, [[kind, field...], ...]]``: one or more messages, each
with the fields of its class in order. ``decode_many`` never raises on bad input: it returns
``None`` and the caller counts the drop. A datagram of another cluster (name) is dropped.

With a keyring (the gossip keys, ``membership.wire.Keyring``) everything after ``MAGIC`` is
sealed with AES-GCM, ``MAGIC`` as associated data, exactly as gossip is: a process without the
key can neither read nor forge a note, lease grant or condemnation, and a sealed datagram sent
to a member with other keys (or none) is dropped. Replays of a captured datagram are harmless
to the rules: notes are consumed once per (sender, partition, epoch) and a note older than the
epoch the receiver knows is refused (``ownership.core``); lease replies answer one
request sequence number only (``ownership.lease``).
"""

from __future__ import annotations

import dataclasses
import math
import operator
import zlib
from collections.abc import Callable
from typing import Any, Protocol

import msgpack

from .lease import Condemn, CondemnReply, LeaseReply, LeaseReq
from .messages import (
    CENSUS_BATCH,
    FORMS,
    Census,
    Disown,
    Message,
    Note,
    NoteAck,
    NoteRefused,
    NoView,
    Query,
    Redirect,
    ViewAsk,
)
from .views import Accept, Accepted, Decided, DecidedStep, Prepare, Promise

__all__ = ["MAGIC", "encode", "encode_many", "decode", "decode_many", "Reassembler"]

MAGIC = b"\xc1P"  # 0xc1 is "never used" in msgpack

_U62 = 1 << 62


class Keyring(Protocol):
    """What ``membership.wire.Keyring`` offers (not imported: this codec stays free of the
    membership package and of ``cryptography``); ``open`` raises on a datagram it rejects."""

    @property
    def keys(self) -> tuple[bytes, ...]: ...
    def seal(self, prefix: bytes, plaintext: bytes) -> bytes: ...
    def open(self, prefix: bytes, body: bytes) -> bytes: ...



def _uint(limit: int) -> Callable[[Any], bool]:
    return lambda v: type(v) is int and 0 <= v < limit


def _id(v: Any) -> bool:
    return isinstance(v, str) and 0 < len(v) <= 256


def _ids(v: Any) -> bool:
    return isinstance(v, list) and len(v) <= 4096 and all(map(_id, v))


def _id_or_none(v: Any) -> bool:
    return v == "" or _id(v)


def _weights(v: Any) -> bool:
    return isinstance(v, list) and len(v) <= 4096 and all(
        isinstance(w, float) and math.isfinite(w) and w >= 0 for w in v)


def _bool(v: Any) -> bool:
    return type(v) is bool


def _seconds(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _any(v: Any) -> bool:
    return True


def _loads(v: Any) -> bool:
    """A view's load figures (``View.loads``): one byte per partition; or its pins (``View.pins``)."""
    return isinstance(v, bytes) and len(v) <= 1 << 16


_PARTITION, _EPOCH, _CK = _uint(1 << 24), _uint(_U62), _uint(1 << 32)


def _list_of(check: Callable[[Any], bool], most: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and len(v) <= most and all(map(check, v))


_PARTITIONS, _EPOCHS = _list_of(_PARTITION, CENSUS_BATCH), _list_of(_EPOCH, CENSUS_BATCH)
#: Checks of fields that travel as lists and are tuples in the message classes.
_TUPLES = {_ids, _weights, _PARTITIONS, _EPOCHS}
#: kind -> (class, one check per field, in the class's field order)
_KINDS: dict[int, tuple[type, tuple[Callable[[Any], bool], ...]]] = {
    0: (Note, (_PARTITION, _EPOCH, _any, _EPOCH)),
    1: (NoteAck, (_PARTITION, _EPOCH)),
    2: (Redirect, (_PARTITION, _id, _EPOCH)),
    3: (Query, (_PARTITION, _EPOCH)),
    4: (LeaseReq, (_EPOCH, _EPOCH, _CK, _EPOCH, _ids, _EPOCH, _EPOCH, _weights, _EPOCH, _loads, _EPOCH, _loads)),
    5: (LeaseReply, (_EPOCH, _CK, _bool, _EPOCH, _ids, _EPOCH, _weights, _bool, _EPOCH, _EPOCH, _loads, _EPOCH,
                     _loads)),
    6: (Condemn, (_id, _CK, _EPOCH)),
    7: (CondemnReply, (_id, _EPOCH, _CK, _bool, _seconds, _EPOCH)),
    8: (Prepare, (_EPOCH, _EPOCH, _CK, _EPOCH)),
    9: (Promise, (_EPOCH, _EPOCH, _bool, _EPOCH, _id_or_none, _ids, _weights, _EPOCH, _loads, _EPOCH, _loads)),
    10: (Accept, (_EPOCH, _EPOCH, _CK, _ids, _weights, _EPOCH, _loads, _EPOCH, _loads)),
    11: (Accepted, (_EPOCH, _EPOCH, _bool)),
    12: (Decided, (_EPOCH, _ids, _weights, _EPOCH, _loads, _EPOCH, _loads)),
    14: (Census, (_EPOCH, _PARTITIONS)),
    15: (Disown, (_EPOCH, _PARTITIONS, _EPOCHS)),
    16: (NoteRefused, (_PARTITION, _EPOCH)),
    17: (ViewAsk, (_EPOCH,)),
    18: (NoView, (_EPOCH, _uint(FORMS + 1))),
    19: (DecidedStep, (_EPOCH, _CK, _CK, _ids, _ids, _weights, _bool, _EPOCH, _loads, _EPOCH, _bool, _loads)),
}
_KIND_OF = {cls: kind for kind, (cls, _) in _KINDS.items()}
#: kind -> where its fields that travel as lists are tuples in the class
_TUPLE_AT = {kind: tuple(i for i, check in enumerate(checks) if check in _TUPLES)
             for kind, (_, checks) in _KINDS.items()}
#: class -> (kind, getter of its fields in order): asking ``dataclasses.fields`` for every
#: message sent was most of the encoding's cost (a witness answers every member each second).
def _getter(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    """A tuple of the fields of a message, in order (``attrgetter`` of one name returns the value).
    A message that carries a view ends with its optional parts (``_TAIL``: ``loads, loads_at``,
    then ``pins``, a step's ``same_pins, pins``): those at the end that hold their defaults are
    left out, so a message of a view without figures or pins is byte for byte what it was before
    views carried them (and what a decoder of that time reads; ``_REQUIRED``)."""
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    get = operator.attrgetter(*names)
    tail = 0
    while tail < len(names) and names[len(names) - 1 - tail] in _TAIL:
        tail += 1
    if tail:
        defaults = [f.default for f in fields[len(names) - tail:]]

        def without_defaults(msg: Any) -> tuple[Any, ...]:
            values = get(msg)
            end = len(values)
            while end > len(values) - tail and values[end - 1] == defaults[end - 1 - len(values) + tail]:
                end -= 1
            return values[:end]
        return without_defaults
    return get if len(names) > 1 else lambda msg: (get(msg),)


#: A view's optional parts, last in the messages that carry one (``_getter``).
_TAIL = frozenset({"loads", "loads_at", "same_pins", "pins"})


_ENCODE = {cls: (kind, _getter(cls)) for kind, (cls, _) in _KINDS.items()}


#: Messages are packed together up to about this many bytes per datagram (below a 1,500-byte
#: Ethernet MTU with IP, UDP and seal overhead); a larger message goes in fragments.
MAX_BODY = 1200

#: A fragment: ``[FRAGMENT, message id, index, count, bytes of the packed message]``. Views
#: (members and weights) outgrow one datagram from ~80 members; like IP fragmentation, a lost
#: fragment loses the message, and the protocol's resends cover it.
FRAGMENT = 13
MAX_FRAGMENTS = 64


def _packed(msg: Message) -> bytes:
    """``[kind, field...]`` packed (msgpack writes tuples as arrays, as it does lists)."""
    kind, values = _ENCODE[type(msg)]
    return msgpack.packb((kind, *values(msg)), use_bin_type=True)


def _array_header(n: int) -> bytes:
    """msgpack's header of an array of ``n`` items (fixarray, array 16, array 32)."""
    if n < 16:
        return bytes((0x90 | n,))
    return (b"\xdc" + n.to_bytes(2, "big")) if n < 1 << 16 else (b"\xdd" + n.to_bytes(4, "big"))


def _datagram(head: bytes, items: list[bytes], keyring: Keyring | None) -> bytes:
    """The datagram of ``[cluster, sender, [item, ...]]`` from ``head`` (the first two packed,
    ``_head``) and the packed items: msgpack is concatenative, so these are the bytes
    ``packb`` of the whole would give, without packing every message a second time."""
    raw = head + _array_header(len(items)) + b"".join(items)
    return MAGIC + (keyring.seal(MAGIC, raw) if keyring is not None and keyring.keys else raw)


def _head(cluster: str, src: str) -> bytes:
    return _array_header(3) + msgpack.packb(cluster, use_bin_type=True) + msgpack.packb(src, use_bin_type=True)


def _fragments(packed: bytes, room: int) -> list[bytes]:
    """A packed message cut into packed fragment items whose chunks take at most ``room`` bytes."""
    step = room - 16  # the fragment item's own fields
    count = -(-len(packed) // step)
    if count > MAX_FRAGMENTS:
        raise ValueError(f"a message of {len(packed)} bytes needs over {MAX_FRAGMENTS} datagrams")
    ident = zlib.crc32(packed)  # the same message resent gets the same id: harmless
    return [msgpack.packb([FRAGMENT, ident, i, count, packed[i * step:(i + 1) * step]], use_bin_type=True)
            for i in range(count)]


def encode_many(src: str, msgs: list[Message], *, cluster: str = "", keyring: Keyring | None = None,
                max_body: int = MAX_BODY) -> list[bytes]:
    """Datagrams carrying ``msgs`` in order, as few as fit ``max_body`` bytes each: a handoff
    of thousands of partitions to one member is dozens of datagrams, not thousands (one per
    note overflowed receive buffers and made every receiver run its rules per note). A message
    larger than a datagram goes alone, in fragments (``Reassembler``)."""
    out: list[bytes] = []
    batch: list[bytes] = []
    head = _head(cluster, src)
    overhead = len(cluster.encode()) + len(src.encode()) + 16
    size = overhead
    for msg in msgs:
        packed = _packed(msg)
        if overhead + len(packed) > max_body:
            out.extend(_datagram(head, [f], keyring) for f in _fragments(packed, max_body - overhead))
            continue
        if batch and size + len(packed) > max_body:
            out.append(_datagram(head, batch, keyring))
            batch, size = [], overhead
        batch.append(packed)
        size += len(packed)
    if batch:
        out.append(_datagram(head, batch, keyring))
    return out


def encode(src: str, msg: Message, *, cluster: str = "", keyring: Keyring | None = None) -> bytes:
    return _datagram(_head(cluster, src), [_packed(msg)], keyring)


#: kind -> how many of its leading fields have no default: a message from an older version may
#: end after them (the rest take their defaults); one from a newer version may carry more
#: fields after those this version knows (ignored). So a field is added at the end, with a
#: default that means "the sender did not say", and a rolling upgrade mixes versions.
_REQUIRED = {kind: sum(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                       for f in dataclasses.fields(cls))
             for kind, (cls, _) in _KINDS.items()}
def _unknown(item: Any) -> bool:
    """A message of a kind this version does not know (a newer version's): skipped and counted
    by ``decode_many`` while the rest of its datagram is read."""
    return (isinstance(item, list) and bool(item) and type(item[0]) is int and 0 <= item[0] < 1 << 16
            and item[0] not in _KINDS and item[0] != FRAGMENT)


def _message(item: Any) -> Message | None:
    if not isinstance(item, list) or not item or type(item[0]) is not int or item[0] not in _KINDS:
        return None
    cls, checks = _KINDS[item[0]]
    values = item[1:1 + len(checks)]
    if len(values) < _REQUIRED[item[0]] or not all(map(operator.call, checks, values)):
        return None
    if cls is Disown and len(values[1]) != len(values[2]):
        return None
    for i in _TUPLE_AT[item[0]]:
        if i < len(values):
            values[i] = tuple(values[i])
    return cls(*values)


class Reassembler:
    """Messages from their fragments, per sender. Bounded: at most ``max_partial`` messages
    are in assembly at once (the oldest is dropped), so fragments that never complete (loss,
    or garbage from a sender without the key) cost a fixed amount of memory."""

    def __init__(self, max_partial: int = 64) -> None:
        self.max_partial = max_partial
        self._parts: dict[tuple[str, int, int], dict[int, bytes]] = {}
        self.dropped = 0  # messages given up (evicted) or malformed once assembled

    def add(self, src: str, ident: int, index: int, count: int, chunk: bytes) -> Message | None:
        key = (src, ident, count)
        parts = self._parts.pop(key, None) or {}
        parts[index] = chunk
        if len(parts) < count:
            self._parts[key] = parts  # (re)inserted last: eviction order is oldest activity
            if len(self._parts) > self.max_partial:
                del self._parts[next(iter(self._parts))]
                self.dropped += 1
            return None
        try:
            item = msgpack.unpackb(b"".join(parts[i] for i in range(count)), raw=False, strict_map_key=True,
                                   max_bin_len=65536, max_str_len=65536, max_array_len=4096, max_map_len=64)
        except Exception:  # garbage inside well-formed fragments
            item = None
        msg = _message(item) if isinstance(item, list) and item and item[0] != FRAGMENT else None
        if msg is None:
            self.dropped += 1
        return msg


def _fragment(item: Any) -> tuple[int, int, int, bytes] | None:
    if not (isinstance(item, list) and len(item) == 5 and item[0] == FRAGMENT):
        return None
    _, ident, index, count, chunk = item
    if (type(ident) is int and 0 <= ident < 1 << 32 and type(count) is int and 2 <= count <= MAX_FRAGMENTS
            and type(index) is int and 0 <= index < count and isinstance(chunk, bytes) and 0 < len(chunk) <= 2048):
        return ident, index, count, chunk
    return None


def decode_many(data: bytes, *, cluster: str = "", keyring: Keyring | None = None,
                reassembler: Reassembler | None = None,
                counts: dict[str, int] | None = None) -> tuple[str, list[Message]] | None:
    """``(sender id, messages)``, or ``None`` for anything malformed (any message in it),
    unsealed when a keyring is set, sealed with another key, or of another cluster. Fragments
    go to ``reassembler`` (without one they are malformed); the messages list may then be
    empty until the last fragment of a message arrives. Messages of a kind this version does
    not know are skipped and counted in ``counts["unknown_kind"]`` (``_REQUIRED``)."""
    if not data.startswith(MAGIC):
        return None
    raw = data[len(MAGIC):]
    if keyring is not None and keyring.keys:
        try:
            raw = keyring.open(MAGIC, raw)
        except Exception:  # membership.wire.Drop: truncated, or no key opens it
            return None
    try:
        body = msgpack.unpackb(raw, raw=False, strict_map_key=True, max_bin_len=65536,
                               max_str_len=65536, max_array_len=4096, max_map_len=64)
    except Exception:  # msgpack raises many types on garbage; all mean "drop"
        return None
    if (not isinstance(body, list) or len(body) != 3 or body[0] != cluster or not _id(body[1])
            or not isinstance(body[2], list) or not body[2]):
        return None
    msgs: list[Message] = []
    for item in body[2]:
        frag = _fragment(item) if reassembler is not None else None
        if frag is not None:
            whole = reassembler.add(body[1], *frag)  # type: ignore[union-attr]
            if whole is not None:
                msgs.append(whole)
            continue
        if _unknown(item):
            if counts is not None:
                counts["unknown_kind"] = counts.get("unknown_kind", 0) + 1
            continue
        msg = _message(item)
        if msg is None:
            return None
        msgs.append(msg)
    return body[1], msgs


def decode(data: bytes, *, cluster: str = "", keyring: Keyring | None = None) -> tuple[str, Message] | None:
    """A datagram of exactly one message: ``(sender id, message)``, else ``None``."""
    got = decode_many(data, cluster=cluster, keyring=keyring)
    return (got[0], got[1][0]) if got is not None and len(got[1]) == 1 else None
