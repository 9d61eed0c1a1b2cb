"""Datagram form of the ownership messages (``placement.exclusive``): msgpack, strictly checked.

A handoff datagram starts with ``MAGIC`` (membership datagrams start with ``b"SW"``), so one
UDP port carries both. ``decode`` never raises on bad input: it returns ``None`` and the caller
counts the drop (a garbled note must never grant a partition). Not yet authenticated: the
simulator carries these datagrams; the node process will seal them with the gossip keyring
before it sends them (docs/ownership.md, "Not yet").
"""

from __future__ import annotations

from typing import Any

import msgpack

from .exclusive import Message, Note, NoteAck, Redirect

__all__ = ["MAGIC", "encode", "decode"]

MAGIC = b"\xc1P"  # 0xc1 is "never used" in msgpack
_MAX_PARTITION = 1 << 24
_MAX_EPOCH = 1 << 62


def encode(src: str, msg: Message) -> bytes:
    if isinstance(msg, Note):
        body: list[Any] = [0, src, msg.partition, msg.epoch, msg.payload]
    elif isinstance(msg, NoteAck):
        body = [1, src, msg.partition, msg.epoch]
    else:
        body = [2, src, msg.partition, msg.epoch, msg.holder]
    return MAGIC + msgpack.packb(body, use_bin_type=True)


def decode(data: bytes) -> tuple[str, Message] | None:
    """``(sender id, message)``, or ``None`` for anything malformed."""
    if not data.startswith(MAGIC):
        return None
    try:
        body = msgpack.unpackb(data[len(MAGIC):], raw=False, strict_map_key=True, max_bin_len=65536,
                               max_str_len=65536, max_array_len=64, max_map_len=64)
    except Exception:  # msgpack raises many types on garbage; all mean "drop"
        return None
    if not isinstance(body, list) or len(body) < 4:
        return None
    kind, src, partition, epoch = body[:4]
    if not (isinstance(src, str) and src and type(partition) is int and type(epoch) is int
            and 0 <= partition < _MAX_PARTITION and 0 <= epoch < _MAX_EPOCH):
        return None
    if kind == 0 and len(body) == 5:
        return src, Note(partition, epoch, body[4])
    if kind == 1 and len(body) == 4:
        return src, NoteAck(partition, epoch)
    if kind == 2 and len(body) == 5 and isinstance(body[4], str) and body[4]:
        return src, Redirect(partition, body[4], epoch)
    return None
