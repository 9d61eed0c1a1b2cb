"""Wire format: versioned msgpack datagrams, strict validation, optional AES-GCM with a keyring.

Datagram layout::

    b"SW" | version (1 byte) | flags (1 byte) | body
    flags = 0: body = msgpack envelope
    flags = 1: body = nonce (12 bytes) | AES-GCM(envelope), the 4-byte prefix as associated data
    flags = 2: body = one byte, a ``NOTICE_REASONS`` index + 1 (a *notice*, below)

    envelope = [cluster_name, cluster_settings, sender_id, epoch, seq, [message, ...]]
    message  = msgpack bin holding one encoded message: [type_code, field, ...]

Messages are encoded one by one (``Codec.encode_message``) so the core can queue them
pre-encoded, know their exact size and pack as many as fit under the MTU into one datagram.

``epoch`` is random per core instance and ``seq`` counts datagrams; together they let the
receiver drop replayed datagrams (``ReplayFilter``; a 64-datagram sliding window as in IPsec).
Replay protection is only meaningful with encryption, which authenticates the envelope, so the
core consults the filter only then: without keys a stranger can put any (sender, epoch, seq)
in an envelope, and one with a member's real epoch and a huge seq made every later datagram
of that member look replayed (issue 31).

A notice tells the sender of a datagram we could not read why (other keys, no keys, another
protocol version): a joiner with the wrong keys learns so instead of hearing nothing. It is
unauthenticated (nothing else can be, between members that share no key), so it is only a hint
(``Swim`` never lets one stop a member that holds keys), it is never answered, and its layout
must stay the same in every protocol version: receivers look at its flags before the version.

Decoding is strict: exact field counts and types, bounded lengths and integer ranges. Any
failure raises ``Drop(reason)``, which the core counts; nothing else escapes ``Codec.open``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

import msgpack
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .messages import (
    MAX_ZONE_CHARS,
    ZONE_TAG,
    Ack,
    Addr,
    Alive,
    Dead,
    Message,
    Meta,
    Nack,
    Ping,
    PingReq,
    PushPull,
    Refuse,
    Suspect,
)

__all__ = ["PROTOCOL_VERSION", "NOTICE_REASONS", "Drop", "Notice", "Envelope", "Keyring", "Codec", "ReplayFilter",
           "encode_notice"]

MAGIC = b"SW"
PROTOCOL_VERSION = 1
_PREFIX_LEN = 4
_FLAG_PLAIN = 0
_FLAG_ENCRYPTED = 1
_FLAG_NOTICE = 2
#: Drop reasons a notice reports back to the sender (their index + 1 is the notice's body).
NOTICE_REASONS = ("decrypt_failed", "unencrypted", "unexpected_encrypted", "unknown_version")
_NONCE_LEN = 12
_TAG_LEN = 16
_ENCRYPTION_OVERHEAD = _NONCE_LEN + _TAG_LEN
_PREFIX_PLAIN = MAGIC + bytes((PROTOCOL_VERSION, _FLAG_PLAIN))
_PREFIX_ENCRYPTED = MAGIC + bytes((PROTOCOL_VERSION, _FLAG_ENCRYPTED))

_MAX_ID = 128          # node ids, cluster name
_MAX_TEXT = 512        # http address, reasons, settings fingerprint, tags
_MAX_TAGS = 64
_U64 = 2**64 - 1
_MAX_MESSAGES = 512

_PING, _ACK, _NACK, _PINGREQ, _ALIVE, _SUSPECT, _DEAD, _PUSHPULL, _REFUSE = range(1, 10)


class Drop(Exception):
    """A received datagram is invalid; ``reason`` names the counter to bump."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Notice(Drop):
    """A notice (see the module docstring): the member we sent to dropped our datagram for
    ``about`` (one of ``NOTICE_REASONS``); it speaks protocol ``version``."""

    def __init__(self, about: str, version: int) -> None:
        super().__init__("notice")
        self.about = about
        self.version = version


def encode_notice(reason: str) -> bytes:
    """The notice telling a sender that its datagram was dropped for ``reason``."""
    return MAGIC + bytes((PROTOCOL_VERSION, _FLAG_NOTICE, NOTICE_REASONS.index(reason) + 1))


class Envelope(NamedTuple):  # immutable, and cheap to build once per datagram
    cluster: str
    settings: str
    sender: str
    epoch: int
    seq: int
    messages: tuple[Message, ...]


class Keyring:
    """AES-GCM keys. The primary (first) key encrypts; every key is tried to decrypt.

    Rotation without downtime: ``install(new)`` on every member, then ``use(new)`` on every
    member, then ``remove(old)`` on every member.
    """

    def __init__(self, keys: Sequence[bytes] = ()) -> None:
        self._keys: list[bytes] = []
        self._aead: dict[bytes, AESGCM] = {}
        #: Whether datagrams are encrypted: there is a key. Read on every datagram, so an
        #: attribute; once set it stays (the last key, the primary, cannot be removed).
        self.enabled = False
        for key in keys:
            self.install(key)

    @property
    def keys(self) -> tuple[bytes, ...]:
        return tuple(self._keys)

    def install(self, key: bytes) -> None:
        """Add a key that is accepted on receive (primary if it is the first key)."""
        if len(key) not in (16, 24, 32):
            raise ValueError("AES-GCM keys must be 16, 24 or 32 bytes long")
        if key not in self._aead:
            self._keys.append(key)
            self._aead[key] = AESGCM(key)
            self.enabled = True

    def use(self, key: bytes) -> None:
        """Make an installed key the primary (encrypting) key."""
        if key not in self._aead:
            raise KeyError("install the key before using it as primary")
        self._keys.remove(key)
        self._keys.insert(0, key)

    def remove(self, key: bytes) -> None:
        """Stop accepting a key. The primary key cannot be removed; ``use`` another first."""
        if self._keys and self._keys[0] == key:
            raise ValueError("cannot remove the primary key; use() another key first")
        if key in self._aead:
            self._keys.remove(key)
            del self._aead[key]

    def seal(self, prefix: bytes, plaintext: bytes) -> bytes:
        # Random nonces (not the core's seeded RNG): two simulated nodes with the same seed must
        # never reuse a (key, nonce) pair. This does not affect the protocol's determinism.
        nonce = os.urandom(_NONCE_LEN)
        return nonce + self._aead[self._keys[0]].encrypt(nonce, plaintext, prefix)

    def open(self, prefix: bytes, body: bytes) -> bytes:
        if len(body) < _ENCRYPTION_OVERHEAD:
            raise Drop("truncated")
        nonce, ciphertext = body[:_NONCE_LEN], body[_NONCE_LEN:]
        for key in self._keys:
            try:
                return self._aead[key].decrypt(nonce, ciphertext, prefix)
            except InvalidTag:
                continue
        raise Drop("decrypt_failed")


_WINDOW = 64
_WINDOW_MASK = (1 << _WINDOW) - 1


class ReplayFilter:
    """Drops datagrams whose (sender, epoch, seq) was already seen or is too old. The core
    uses it only with keys: any envelope can name any (sender, epoch, seq) without them.

    Per sender: the newest epoch seen, the highest seq and a 64-bit bitmap of the seqs below
    it (sliding window as in RFC 4303 section 3.4.3). A new epoch (the sender restarted) resets
    the window. At most ``max_senders`` entries are kept; the sender first seen longest ago
    (in its current epoch) is evicted first. Updating an entry in place keeps its place, so a
    fresh datagram costs one lookup and one store (a least-recently-used order, moving the
    entry on every datagram, cost 7% of a simulated 256-member cluster's time); only a
    cluster of more than ``max_senders`` members can evict a live sender, and that merely
    forgets its window.
    """

    WINDOW: ClassVar[int] = _WINDOW  # (ClassVar: a class attribute in the mypyc build too)

    def __init__(self, max_senders: int = 4096) -> None:
        self._state: dict[str, tuple[int, int, int]] = {}
        self._max = max_senders

    def check_and_record(self, sender: str, epoch: int, seq: int) -> bool:
        """True if fresh (and records it); False if a replay."""
        state = self._state.get(sender)
        if state is not None and state[0] == epoch:
            top = state[1]
            if seq > top:  # the usual case: newer than anything seen
                shift = seq - top
                self._state[sender] = (epoch, seq, ((state[2] << shift) | 1) & _WINDOW_MASK
                                       if shift < _WINDOW else 1)
                return True
            offset = top - seq
            bitmap = state[2]
            if offset >= _WINDOW or bitmap >> offset & 1:
                return False
            self._state[sender] = (epoch, top, bitmap | 1 << offset)
            return True
        if state is not None:
            del self._state[sender]  # a new epoch starts a new place in the eviction order
        elif len(self._state) >= self._max:
            del self._state[next(iter(self._state))]
        self._state[sender] = (epoch, seq, 1)
        return True


class Codec:
    """Encodes and decodes datagrams for one member."""

    def __init__(self, *, cluster: str, settings: str, sender: str, epoch: int,
                 keyring: Keyring, mtu_bytes: int, max_receive_bytes: int) -> None:
        self.cluster = cluster
        self.settings = settings
        self.sender = sender
        self.epoch = epoch
        self.keyring = keyring
        self.mtu_bytes = mtu_bytes
        self.max_receive_bytes = max_receive_bytes
        self._seq = 0
        # Envelope size with no messages and the widest possible seq, plus 3 bytes for an
        # array header of up to 65535 messages.
        self._envelope_overhead = len(msgpack.packb([cluster, settings, sender, epoch, _U64, []])) + 3
        self._capacity_plain = self.mtu_bytes - _PREFIX_LEN - self._envelope_overhead
        # msgpack.packb builds a Packer per call; one per codec does the same encoding cheaper.
        packer = msgpack.Packer(use_bin_type=True)
        self._pack = packer.pack
        # The envelope's first four fields never change: packed once, behind the header of its
        # 6-element array; ``seal`` appends the seq and the messages, which gives the bytes
        # packing the whole list would (a third of seal's cost, once per datagram).
        self._envelope_head = packer.pack_array_header(6) + b"".join(
            map(packer.pack, (cluster, settings, sender, epoch)))
        self._anonymous_head = packer.pack_array_header(6) + b"".join(map(packer.pack, ("", "", "-", 0, 0)))

    # --- sending ---

    def encode_message(self, msg: Message) -> bytes:
        return self._pack(_to_wire(msg))

    def capacity(self) -> int:
        """Bytes available for ``message_cost``-sized messages in one datagram."""
        if self.keyring.enabled:
            return self._capacity_plain - _ENCRYPTION_OVERHEAD
        return self._capacity_plain

    @staticmethod
    def message_cost(blob: bytes) -> int:
        """Upper bound of the bytes one encoded message adds to a datagram (bin8/bin16 header)."""
        return len(blob) + (2 if len(blob) < 256 else 3)

    def seal(self, blobs: Sequence[bytes]) -> bytes:
        """Build one datagram from pre-encoded messages (the caller keeps it within capacity)."""
        self._seq += 1
        pack = self._pack
        if self.keyring.enabled:
            envelope = b"".join((self._envelope_head, pack(self._seq), pack(blobs)))
            return _PREFIX_ENCRYPTED + self.keyring.seal(_PREFIX_ENCRYPTED, envelope)
        return b"".join((_PREFIX_PLAIN, self._envelope_head, pack(self._seq), pack(blobs)))

    def seal_anonymous(self, blobs: Sequence[bytes]) -> bytes:
        """A keyless datagram that tells nothing about us: no cluster name, no settings, the
        sender id ``"-"``, epoch and seq 0. Refusals to strangers go out so (``joining.py``):
        without keys the envelope is all a stranger reads, and ours named what it needs to
        forge gossip that members accept (issue 31)."""
        assert not self.keyring.enabled, "with keys, seal() hides the envelope"
        pack = self._pack
        return b"".join((_PREFIX_PLAIN, self._anonymous_head, pack(blobs)))

    # --- receiving ---

    def open(self, data: bytes) -> Envelope:
        """Decode and validate a datagram; raise ``Drop(reason)`` for anything invalid."""
        if type(data) is bytes and data[:_PREFIX_LEN] == _PREFIX_PLAIN and not self.keyring.enabled \
                and _PREFIX_LEN < len(data) <= self.max_receive_bytes:
            body = data[_PREFIX_LEN:]  # the usual case: every check below passes
        else:
            body = self._checked_body(data)
        try:
            return _decode_envelope(body, self.max_receive_bytes)
        except Drop:
            raise
        except Exception:  # msgpack raises many types on garbage; all mean the same here
            raise Drop("malformed") from None

    def _checked_body(self, data: bytes) -> bytes:
        """The envelope bytes of ``data`` (decrypted if need be), or ``Drop``."""
        if len(data) > self.max_receive_bytes:
            raise Drop("oversized")
        if len(data) < _PREFIX_LEN + 1:
            raise Drop("truncated")
        if data[:2] != MAGIC:
            raise Drop("bad_magic")
        if data[3] == _FLAG_NOTICE:  # before the version: notices read the same in every version
            if len(data) != _PREFIX_LEN + 1 or not 0 < data[4] <= len(NOTICE_REASONS):
                raise Drop("malformed")
            raise Notice(NOTICE_REASONS[data[4] - 1], data[2])
        if data[2] != PROTOCOL_VERSION:
            raise Drop("unknown_version")
        flags = data[3]
        prefix, body = bytes(data[:_PREFIX_LEN]), bytes(data[_PREFIX_LEN:])
        if flags == _FLAG_ENCRYPTED:
            if not self.keyring.enabled:
                raise Drop("unexpected_encrypted")
            body = self.keyring.open(prefix, body)
        elif flags == _FLAG_PLAIN:
            if self.keyring.enabled:
                raise Drop("unencrypted")
        else:
            raise Drop("bad_flags")
        return body


# --- encoding of single messages -------------------------------------------------------------

def _to_wire(msg: Message) -> list[Any]:
    # Most frequent first: every probe is a ping and an ack.
    if isinstance(msg, Ping):
        return [_PING, msg.seq, msg.target]
    if isinstance(msg, Ack):
        return [_ACK, msg.seq, msg.checksum]
    if isinstance(msg, Alive):
        m = msg.meta
        return [_ALIVE, msg.node, msg.incarnation, msg.addr[0], msg.addr[1], m.weight, m.http,
                _wire_tags(m)]
    if isinstance(msg, Suspect):
        return [_SUSPECT, msg.node, msg.incarnation, msg.sender]
    if isinstance(msg, Dead):
        return [_DEAD, msg.node, msg.incarnation, msg.sender]
    if isinstance(msg, Nack):
        return [_NACK, msg.seq]
    if isinstance(msg, PingReq):
        return [_PINGREQ, msg.seq, msg.target, msg.target_addr[0], msg.target_addr[1]]
    if isinstance(msg, PushPull):
        return [_PUSHPULL, msg.sync_id, msg.reply]
    if isinstance(msg, Refuse):
        return [_REFUSE, msg.reason]
    raise TypeError(f"not a wire message: {msg!r}")


def _wire_tags(meta: Meta) -> dict[str, str]:
    """The tags as they travel: the zone rides as the tag ``ZONE_TAG`` (absent without a zone),
    so an Alive keeps its 8 fields and members that know no zone still decode it."""
    tags = dict(meta.tags)
    if meta.zone:
        tags[ZONE_TAG] = meta.zone
    return tags


def encode_meta(meta: Meta) -> bytes:
    """The metadata as it travels (used to enforce ``meta_max_bytes``)."""
    return msgpack.packb([meta.weight, meta.http, _wire_tags(meta)])


def check_outgoing(msg: Message) -> None:
    """Raise ValueError if receivers would reject ``msg`` (too long ids, too many tags, ...)."""
    try:
        _from_wire(msgpack.unpackb(msgpack.packb(_to_wire(msg)), raw=False, strict_map_key=True,
                                   max_array_len=16, max_map_len=_MAX_TAGS, max_ext_len=0))
    except (Drop, ValueError):  # msgpack's own limits raise ValueError
        raise ValueError(
            f"{msg!r} would be dropped by every receiver: node ids and the cluster name are "
            f"limited to {_MAX_ID} characters, texts to {_MAX_TEXT}, tags to {_MAX_TAGS}") from None


# --- strict decoding -------------------------------------------------------------------------

def _decode_envelope(body: bytes, limit: int) -> Envelope:
    raw = msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True,
                          max_str_len=limit, max_bin_len=limit,
                          max_array_len=_MAX_MESSAGES, max_map_len=_MAX_TAGS, max_ext_len=0)
    cluster, settings, sender, epoch, seq, blobs = _list(raw, 6)
    # The checks of _text, _node_id and _uint, inlined (once per datagram).
    if type(cluster) is not str or len(cluster) > _MAX_ID \
            or type(settings) is not str or len(settings) > _MAX_TEXT \
            or type(sender) is not str or not 0 < len(sender) <= _MAX_ID \
            or type(epoch) is not int or not 0 <= epoch <= _U64 \
            or type(seq) is not int or not 0 <= seq <= _U64 \
            or type(blobs) is not list:
        raise Drop("malformed")
    messages = []
    for blob in blobs:
        if type(blob) is not bytes:
            raise Drop("malformed")
        msg = _decoded.get(blob)
        if msg is None:
            inner = msgpack.unpackb(blob, raw=False, strict_map_key=True, use_list=True,
                                    max_str_len=limit, max_bin_len=0,
                                    max_array_len=16, max_map_len=_MAX_TAGS, max_ext_len=0)
            msg = _from_wire(inner)
            if type(msg) in _CACHED_TYPES:
                if len(_decoded) >= _DECODED_MAX:
                    _decoded.clear()
                _decoded[blob] = msg
        messages.append(msg)
    # tuple.__new__ skips the NamedTuple's Python-level __new__ (half the cost, per datagram).
    return tuple.__new__(Envelope, (cluster, settings, sender, epoch, seq, tuple(messages)))


# Gossip repeats itself: the same state message (same bytes) arrives many times, from many
# peers (and, in a simulation, at many members of one process). Decoding and validating it
# is a pure function of its bytes (the limit above cannot bind: a message is shorter than
# its datagram), and messages are immutable, so valid state messages are decoded once and
# shared. Pings and acks are unique (they carry sequence numbers) and are not cached.
_CACHED_TYPES = (Alive, Suspect, Dead)
_DECODED_MAX = 4096
_decoded: dict[bytes, Message] = {}


def _from_wire(raw: Any) -> Message:
    if type(raw) is not list or not raw:
        raise Drop("malformed")
    code = raw[0]
    if type(code) is not int:
        raise Drop("malformed")
    # Most frequent first (state messages are mostly served from the cache above).
    if code == _PING:
        f = _list(raw, 3)
        return Ping(_uint(f[1]), _node_id(f[2]))
    if code == _ACK:
        f = _list(raw, 3)
        return Ack(_uint(f[1]), _uint(f[2]))
    if code == _ALIVE:
        f = _list(raw, 8)
        tags = _tags(f[7])
        zone = tags.pop(ZONE_TAG, "")
        if len(zone) > MAX_ZONE_CHARS or zone != zone.strip() or not zone.isprintable():
            raise Drop("malformed")
        meta = Meta(weight=_weight(f[5]), http=_text(f[6], _MAX_TEXT), tags=tags, zone=zone)
        return Alive(_node_id(f[1]), _uint(f[2]), _addr(f[3], f[4]), meta)
    if code == _SUSPECT:
        f = _list(raw, 4)
        return Suspect(_node_id(f[1]), _uint(f[2]), _node_id(f[3]))
    if code == _DEAD:
        f = _list(raw, 4)
        return Dead(_node_id(f[1]), _uint(f[2]), _node_id(f[3]))
    if code == _NACK:
        f = _list(raw, 2)
        return Nack(_uint(f[1]))
    if code == _PINGREQ:
        f = _list(raw, 5)
        return PingReq(_uint(f[1]), _node_id(f[2]), _addr(f[3], f[4]))
    if code == _PUSHPULL:
        f = _list(raw, 3)
        if type(f[2]) is not bool:
            raise Drop("malformed")
        return PushPull(_uint(f[1]), f[2])
    if code == _REFUSE:
        f = _list(raw, 2)
        return Refuse(_text(f[1], _MAX_TEXT))
    raise Drop("unknown_message")


def _list(raw: Any, n: int) -> list[Any]:
    if type(raw) is not list or len(raw) != n:
        raise Drop("malformed")
    return raw


def _uint(x: Any) -> int:
    if type(x) is not int or not 0 <= x <= _U64:
        raise Drop("malformed")
    return x


def _text(x: Any, max_len: int) -> str:
    if type(x) is not str or len(x) > max_len:
        raise Drop("malformed")
    return x


def _node_id(x: Any) -> str:
    if type(x) is not str or not 0 < len(x) <= _MAX_ID:
        raise Drop("malformed")
    return x


def _addr(host: Any, port: Any) -> Addr:
    if type(host) is not str or not 0 < len(host) <= 255 or type(port) is not int or not 0 < port < 65536:
        raise Drop("malformed")
    return (host, port)


def _weight(x: Any) -> float:
    if type(x) is not float or not math.isfinite(x) or x < 0:
        raise Drop("malformed")
    return x


def _tags(x: Any) -> dict[str, str]:
    if type(x) is not dict or len(x) > _MAX_TAGS:
        raise Drop("malformed")
    for k, v in x.items():
        _text(k, _MAX_TEXT)
        _text(v, _MAX_TEXT)
    return x
