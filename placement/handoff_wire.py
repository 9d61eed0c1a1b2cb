"""Datagram form of the ownership messages (``placement.exclusive``, ``placement.quorum_lease``):
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
epoch the receiver knows is refused (``placement.exclusive``); lease replies answer one
request sequence number only (``placement.quorum_lease``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from typing import Protocol

import msgpack

from .exclusive import Message, Note, NoteAck, Query, Redirect
from .quorum_lease import Condemn, CondemnReply, LeaseReply, LeaseReq
from .stable_views import Accept, Accepted, Decided, Prepare, Promise

__all__ = ["MAGIC", "encode", "decode"]

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


_PARTITION, _EPOCH, _CK = _uint(1 << 24), _uint(_U62), _uint(1 << 32)
#: kind -> (class, one check per field, in the class's field order)
_KINDS: dict[int, tuple[type, tuple[Callable[[Any], bool], ...]]] = {
    0: (Note, (_PARTITION, _EPOCH, _any)),
    1: (NoteAck, (_PARTITION, _EPOCH)),
    2: (Redirect, (_PARTITION, _id, _EPOCH)),
    3: (Query, (_PARTITION, _EPOCH)),
    4: (LeaseReq, (_EPOCH, _EPOCH, _CK, _EPOCH, _ids, _EPOCH, _EPOCH, _weights)),
    5: (LeaseReply, (_EPOCH, _CK, _bool, _EPOCH, _ids, _EPOCH, _weights, _bool)),
    6: (Condemn, (_id, _CK, _EPOCH)),
    7: (CondemnReply, (_id, _EPOCH, _CK, _bool, _seconds, _EPOCH)),
    8: (Prepare, (_EPOCH, _EPOCH, _CK)),
    9: (Promise, (_EPOCH, _EPOCH, _bool, _EPOCH, _id_or_none, _ids, _weights)),
    10: (Accept, (_EPOCH, _EPOCH, _CK, _ids, _weights)),
    11: (Accepted, (_EPOCH, _EPOCH, _bool)),
    12: (Decided, (_EPOCH, _ids, _weights)),
}
_KIND_OF = {cls: kind for kind, (cls, _) in _KINDS.items()}


#: Messages are packed together up to about this many bytes per datagram (below a 1,500-byte
#: Ethernet MTU with IP, UDP and seal overhead); one larger message goes alone.
MAX_BODY = 1200


def _fields(msg: Message) -> list[Any]:
    values = [getattr(msg, f.name) for f in dataclasses.fields(msg)]
    return [_KIND_OF[type(msg)], *(list(v) if isinstance(v, tuple) else v for v in values)]


def _datagram(body: list[Any], keyring: Keyring | None) -> bytes:
    raw = msgpack.packb(body, use_bin_type=True)
    return MAGIC + (keyring.seal(MAGIC, raw) if keyring is not None and keyring.keys else raw)


def encode_many(src: str, msgs: list[Message], *, cluster: str = "", keyring: Keyring | None = None,
                max_body: int = MAX_BODY) -> list[bytes]:
    """Datagrams carrying ``msgs`` in order, as few as fit ``max_body`` bytes each: a handoff
    of thousands of partitions to one member is dozens of datagrams, not thousands (one per
    note overflowed receive buffers and made every receiver run its rules per note)."""
    out: list[bytes] = []
    batch: list[list[Any]] = []
    size = len(cluster) + len(src) + 16
    for msg in msgs:
        item = _fields(msg)
        n = len(msgpack.packb(item, use_bin_type=True))
        if batch and size + n > max_body:
            out.append(_datagram([cluster, src, batch], keyring))
            batch, size = [], len(cluster) + len(src) + 16
        batch.append(item)
        size += n
    if batch:
        out.append(_datagram([cluster, src, batch], keyring))
    return out


def encode(src: str, msg: Message, *, cluster: str = "", keyring: Keyring | None = None) -> bytes:
    return _datagram([cluster, src, [_fields(msg)]], keyring)


def _message(item: Any) -> Message | None:
    if not isinstance(item, list) or not item or type(item[0]) is not int or item[0] not in _KINDS:
        return None
    cls, checks = _KINDS[item[0]]
    values = item[1:]
    if len(values) != len(checks) or not all(check(v) for check, v in zip(checks, values)):
        return None
    return cls(*(tuple(v) if check is _ids or check is _weights else v for check, v in zip(checks, values)))


def decode_many(data: bytes, *, cluster: str = "", keyring: Keyring | None = None) -> tuple[str, list[Message]] | None:
    """``(sender id, messages)``, or ``None`` for anything malformed (any message in it),
    unsealed when a keyring is set, sealed with another key, or of another cluster."""
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
    msgs = [_message(item) for item in body[2]]
    if any(m is None for m in msgs):
        return None
    return body[1], msgs  # type: ignore[return-value]


def decode(data: bytes, *, cluster: str = "", keyring: Keyring | None = None) -> tuple[str, Message] | None:
    """A datagram of exactly one message: ``(sender id, message)``, else ``None``."""
    got = decode_many(data, cluster=cluster, keyring=keyring)
    return (got[0], got[1][0]) if got is not None and len(got[1]) == 1 else None
