"""Value types of the membership protocol: metadata, member records, wire messages, events.

All are frozen dataclasses. Wire messages are what ``wire.py`` encodes; several of them are
packed into one datagram. Events are what the core hands to its driver.

Wire messages (SWIM section 3 and 4, Lifeguard section IV):

``Ping(seq, target)``                direct probe; ``target`` names the intended member so a
                                      probe that reaches a different process at the same address
                                      is ignored rather than acked.
``Ack(seq, checksum)``, ``Nack(seq)`` answer to a ping; a nack comes from an indirect prober
                                      whose own ping went unanswered (Lifeguard: "the path to me
                                      works").
``PingReq(seq, target, target_addr)`` ask the receiver to probe ``target`` on our behalf.
``Alive/Suspect/Dead``                membership updates ordered by incarnation numbers.
                                      ``Dead`` with ``sender == node`` is a graceful leave.
``PushPull(sync_id, reply)``          marks the datagram as (one chunk of) a full state exchange;
                                      the state records follow it in the same datagram.
``Refuse(reason)``                    answer to a join (``PushPull`` asking for a reply) from a
                                      member whose cluster name or settings differ from ours.

Every ack also carries the sender's view checksum (anti-entropy, as in Ringpop).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .status import ALIVE, DEAD, LEFT, LIVE_STATUSES, SUSPECT, EventKind, Status

__all__ = [
    "Addr", "Meta", "ZONE_TAG", "MemberInfo",
    "Status", "EventKind", "ALIVE", "SUSPECT", "DEAD", "LEFT", "LIVE_STATUSES",
    "Ping", "Ack", "Nack", "PingReq", "Alive", "Suspect", "Dead", "PushPull", "Refuse",
    "Message", "StateMessage", "MemberEvent", "JoinRefused", "RefusedPeer", "JoinAttempt", "Event",
]

Addr = tuple[str, int]


#: The tag that carries ``Meta.zone`` on the wire (``wire``): members of an older version, which
#: know no zone, decode it as one more tag and gossip it on unchanged. Not a tag of one's own.
ZONE_TAG = "@zone"
MAX_ZONE_CHARS = 64


@dataclass(frozen=True)
class Meta:
    """Per-member metadata carried in the view and changed by an incarnation bump.

    ``zone``: the member's failure domain (rack, availability zone; "" = none), which placement
    spreads replica sets over (``placement.zones``)."""

    weight: float = 1.0
    http: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)
    zone: str = ""

    def __post_init__(self) -> None:
        if not (isinstance(self.weight, (int, float)) and math.isfinite(self.weight) and self.weight >= 0):
            raise ValueError("Meta.weight must be a finite number >= 0")
        z = self.zone
        if not isinstance(z, str) or len(z) > MAX_ZONE_CHARS or z != z.strip() or not z.isprintable():
            raise ValueError(f"Meta.zone must be at most {MAX_ZONE_CHARS} printable characters without surrounding "
                             f"spaces, got {z!r}")
        if ZONE_TAG in self.tags:
            raise ValueError(f"the tag {ZONE_TAG!r} is reserved: it carries the zone on the wire (give the zone)")
        # A private read-only copy: the value is shared by views and events, so nobody may
        # change it behind the core's back.
        object.__setattr__(self, "tags", MappingProxyType(dict(self.tags)))
        object.__setattr__(self, "weight", float(self.weight))

    def __hash__(self) -> int:
        return hash((self.weight, self.http, tuple(sorted(self.tags.items())), self.zone))

    def __reduce__(self):  # picklable despite the read-only mapping
        return (Meta, (self.weight, self.http, dict(self.tags), self.zone))


@dataclass(frozen=True)
class MemberInfo:
    """A snapshot of one member as seen by the local view."""

    node_id: str
    addr: Addr
    status: Status
    incarnation: int
    meta: Meta
    #: When this member last heard a datagram from it (the clock the core is driven with; None:
    #: never). Not part of equality: it changes with every datagram, the member does not.
    heard_at: float | None = field(default=None, compare=False)

    @property
    def is_live(self) -> bool:
        """Alive or suspect: a suspect member is not gone and keeps its partitions."""
        return self.status in LIVE_STATUSES


# --- wire messages ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Ping:
    seq: int
    target: str


@dataclass(frozen=True)
class Ack:
    seq: int
    checksum: int  # sender's view checksum (anti-entropy)


@dataclass(frozen=True)
class Nack:
    seq: int


@dataclass(frozen=True)
class PingReq:
    seq: int
    target: str
    target_addr: Addr


@dataclass(frozen=True)
class Alive:
    node: str
    incarnation: int
    addr: Addr
    meta: Meta


@dataclass(frozen=True)
class Suspect:
    node: str
    incarnation: int
    sender: str  # who suspects; independent senders are Lifeguard confirmations


@dataclass(frozen=True)
class Dead:
    node: str
    incarnation: int
    sender: str  # == node for a graceful leave


@dataclass(frozen=True)
class PushPull:
    sync_id: int
    reply: bool  # the receiver should answer with its own full state


@dataclass(frozen=True)
class Refuse:
    reason: str


StateMessage = Alive | Suspect | Dead
Message = Ping | Ack | Nack | PingReq | Alive | Suspect | Dead | PushPull | Refuse


# --- events ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class MemberEvent:
    """A change in the local view.

    kind: ``joined`` (entered the live set), ``updated`` (metadata or address changed),
    ``suspect`` (alive -> suspect; still live), ``alive`` (suspect -> alive, it refuted),
    ``dead`` (declared failed), ``left`` (left gracefully).

    by: who made it happen, as far as this member knows: for ``suspect`` the accuser (this
    member itself when its own probes went unanswered), for ``dead`` the member that declared
    the death (this member when its own suspicion ran out; the sender of a full state that
    said so), for ``left`` and ``alive`` (a refutation) the member itself; empty for the rest.
    """

    kind: EventKind
    member: MemberInfo
    at: float
    by: str = ""


@dataclass(frozen=True)
class JoinRefused:
    """A member at ``addr`` refused our join: our cluster name or settings differ from its.

    Emitted only while this member has never had a live peer: it is the newcomer, and it must
    stop (a node process exits). A member that is or was part of a cluster ignores refusals
    (counted in ``stats["refusals_ignored"]``): one misconfigured process at a seed address
    must not stop the healthy members that contact it."""

    addr: Addr
    reason: str
    at: float


@dataclass(frozen=True)
class RefusedPeer:
    """We refused a join from ``node`` at ``addr`` (its cluster name or settings differ from
    ours; ``reason`` names both). Informational: the refused side stops, we carry on."""

    addr: Addr
    node: str
    reason: str
    at: float


@dataclass(frozen=True)
class JoinAttempt:
    """Join attempt number ``attempt`` to ``seeds`` got no member to answer; ``reason`` says
    what came back from the seed addresses (nothing, or datagrams we had to drop and why).
    The next attempt goes out at ``retry_at`` (exponential backoff up to
    ``join_retry_max_interval_s``)."""

    attempt: int
    seeds: tuple[Addr, ...]
    reason: str
    retry_at: float
    at: float


@dataclass(frozen=True)
class DeclaredDead:
    """Another member declared *this* member dead at ``incarnation``; the core has refuted.

    By now other members may have given away what this member owned, so an application must
    stop owning things at once (the placement node releases every partition and waits a
    hold-down before it takes any back).
    """

    incarnation: int
    at: float


@dataclass(frozen=True)
class IdConflict:
    """Another live process at ``addr`` uses this member's node id: it sent us a datagram as
    that id, or both keep raising their incarnation over each other's (``bumps`` times within a
    minute so far). A restart leaves one such bump at most and sends nothing; a duplicate id is
    a configuration error the core cannot resolve."""

    addr: Addr
    bumps: int
    at: float


Event = MemberEvent | JoinRefused | RefusedPeer | JoinAttempt | DeclaredDead | IdConflict
