"""Two processes, one member id: duplicate-id and address-conflict detection.

Why this module exists: incarnation numbers order the updates of *one* process. A second live
process with the same id (a misconfigured node, or a restart while the old process still
runs) breaks that: both keep refuting each other, and every member's record flips between
their addresses. Nothing in SWIM resolves it; memberlist notices it ("conflicting address",
state.go ``aliveNode``) and keeps the address it has. We do the same and report it:

* a live member claimed from a second address keeps its known address; the claim is held and
  applied only if the record at the old address dies (a member that really moved), and the
  member is told (``address_claim``);
* records of *us* at another address made us raise our incarnation: once is a restart, again
  and again within a minute is a twin (``foreign_claim``), reported as an ``IdConflict`` event;
* a datagram with our id and an epoch not ours is a twin speaking (``from_our_id``).
"""

from __future__ import annotations

from collections import Counter, deque

from .config import MembershipConfig
from .dissemination import Dissemination
from .messages import Addr, Alive, Event, IdConflict, Ping
from .probing import Prober
from .view import Member, View
from .wire import Envelope

__all__ = ["Conflicts"]

# Raising our incarnation this often within the window because of records of us at another
# address means another live process has our id (see foreign_claim).
_ID_CONFLICT_BUMPS = 3
_ID_CONFLICT_WINDOW_S = 60.0


class Conflicts:
    """Claims on member ids from more than one address, ours and others'."""

    __slots__ = (
        "_claimed_at",
        "_claims",
        "_claims_told",
        "_events",
        "_foreign_claims",
        "_id_conflict_at",
        "_out",
        "_prober",
        "_stats",
        "_view",
        "advertise",
        "config",
        "node_id",
    )

    def __init__(self, config: MembershipConfig, view: View, out: Dissemination, prober: Prober, *,
                 advertise: Addr, events: deque[Event], stats: Counter[str]) -> None:
        self.config = config
        self.node_id = view.node_id
        self.advertise = advertise
        self._view = view
        self._out = out
        self._prober = prober
        self._events = events
        self._stats = stats
        self._foreign_claims: deque[float] = deque()
        #: Per member, the latest claim refused because it came from a second address while
        #: the member was live (``address_claim``); applied if that member's record dies.
        self._claims: dict[str, Alive] = {}
        self._claims_told: dict[str, float] = {}  # member -> when we last passed it a claim
        #: Per member, when a claim from a second address last came (``ambiguous_leave``).
        self._claimed_at: dict[str, float] = {}
        self._id_conflict_at = float("-inf")

    def address_claim(self, msg: Alive, m: Member, now: float) -> None:
        """``msg`` claims the live member ``m`` from a second address: another process with its
        id (a twin), not a move - keep the address we have, as memberlist does. Taking it made
        every member flip the record between the two processes while the twin ran (its HTTP
        address in their snapshots, the real member's lease lost). A member that really moved
        is taken at its new address once its old record is dead (its old address stops
        answering): see ``take_claim``."""
        self._stats["address_conflicts"] += 1
        claimed = self._claimed_at
        if len(claimed) >= 1024:  # forget the old ones (bounded whatever strangers send)
            for node in [n for n, t in claimed.items() if now - t > _ID_CONFLICT_WINDOW_S] or list(claimed):
                del claimed[node]
        claimed[msg.node] = now
        held = self._claims.get(msg.node)
        if held is None or msg.incarnation > held.incarnation:
            self._claims[msg.node] = msg  # taken if the record at the old address dies
        if now - self._claims_told.get(msg.node, float("-inf")) >= self.config.probe_interval_s:
            # Tell the member we hold (at its known address: nothing is sent to the claimed
            # one): it sees its id claimed elsewhere, asks that address, and both processes
            # report the conflict (``foreign_claim``), as when the claim was gossiped.
            self._claims_told[msg.node] = now
            self._out.send(m.addr, [self._out.codec.encode_message(msg)], piggyback=False)

    def ambiguous_leave(self, node: str, now: float) -> bool:
        """May a graceful leave of the live member ``node`` come from another process with its
        id? Yes when a claim of that id from a second address came within the last minute. A
        leave names only the id, and a twin, having outbid the live member's incarnation (see
        ``foreign_claim``), announces its own leave at an incarnation above the live record:
        taken as it is, it removed the live member (which then lost its partitions) when an
        operator stopped the twin. The caller suspects the member instead: a live one refutes,
        one that really left is declared dead when the suspicion runs out."""
        at = self._claimed_at.get(node)
        return at is not None and now - at <= _ID_CONFLICT_WINDOW_S

    def drop_claim(self, node: str) -> None:
        """An update from ``node``'s own address was accepted: a held claim is moot."""
        self._claims.pop(node, None)

    def take_claim(self, node: str) -> Alive | None:
        """``node``'s record died: the claim from another address it outlived, if any."""
        return self._claims.pop(node, None)

    def foreign_claim(self, addr: Addr, now: float) -> None:
        """A record of us at another address made us raise our incarnation. Once is a restart
        (the cluster still held our old address); again and again within a minute is another
        live process with our id, raising its incarnation over ours each time (memberlist
        logs such conflicts; we report them as an event, at most one a minute).

        That takes several rounds of gossip (tens of seconds when retransmits run out), so we
        also ask the address directly: a ping from us, naming us as its target. Our old
        process is gone and answers nothing; a process with another id ignores a ping for
        someone else; a live twin receives a datagram from its own id with an epoch not its
        own, and reports the conflict at once (``from_our_id``). Each side of a twin gets a
        claim from the other's refutation, so both report within a round trip or two."""
        claims = self._foreign_claims
        claims.append(now)
        while claims and claims[0] < now - _ID_CONFLICT_WINDOW_S:
            claims.popleft()
        if len(claims) >= _ID_CONFLICT_BUMPS:
            self._report_id_conflict(addr, now)
        if not self._view.leaving:
            self._ping_as_us(addr)

    def from_our_id(self, env: Envelope, addr: Addr, now: float) -> None:
        """A datagram that names us as its sender (already counted as dropped): our own, looped
        back, or - with an epoch that is not ours, from another address - another live process
        with our id."""
        if env.epoch != self._out.codec.epoch and addr != self.advertise and self._report_id_conflict(addr, now) \
                and not self._view.leaving:
            # Tell the twin the same way, in case its claim has not reached it (once a minute,
            # like the report, so two twins do not ping each other in a loop).
            self._ping_as_us(addr)

    def _ping_as_us(self, addr: Addr) -> None:
        self._out.send(addr, [self._out.codec.encode_message(Ping(self._prober.next_seq(), self.node_id))],
                       piggyback=False)

    def _report_id_conflict(self, addr: Addr, now: float) -> bool:
        if now - self._id_conflict_at < _ID_CONFLICT_WINDOW_S:
            return False
        self._id_conflict_at = now
        self._stats["id_conflicts"] += 1
        self._events.append(IdConflict(addr, len(self._foreign_claims), now))
        return True
