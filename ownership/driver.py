"""The glue between a membership core and an ownership protocol that every driver runs (issue 32).

``OwnershipProtocol`` speaks in member ids; a running member also has to feed it the live view its
gossip member holds, tell it when the cluster declared this member dead, find the address of
each id it sends to, leave membership only once its partitions are handed on, and wake for the
earlier of two timers. The node's ``ExclusiveRunner`` and the simulator's ``SwimNode`` each did
that in their own words; now both drive this one ``MemberOwnership``, as every etcd user drives
raft's ``RawNode``, so the simulator proves the glue the node runs. Sans-I/O like the two cores
it joins: no clock, no socket.

    glue = MemberOwnership(proto, member)    # member: the Swim core (its records give addresses)
    glue.event(event, now)                   # every event the membership core drains
    glue.receive_datagram(data, now)         # a datagram of the ownership channel
    glue.handle_timer(now)                   # at glue.get_timer(member.get_timer())
    for action in glue.actions(): ...        # Acquired / Release / Ended, in order
    for data, addr in glue.datagrams_to_send(now): send(data, addr)
    if glue.membership_leave_due(): member.leave(now)   # after glue.leave(now), once handed on

What stays in each driver: the clock and the sockets, the application's side of an action
(handlers on another loop in the node, a simulated drain time in the simulator), and where the
members file and the durable promises are kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from membership import SUSPECT, DeclaredDead, MemberEvent, Swim
from membership.messages import Addr, Event

from .core import Ownership
from .messages import Action
from .protocol import OwnershipProtocol

__all__ = ["MemberOwnership"]


class MemberOwnership:
    """One member's ownership protocol joined to its membership core (module docstring).

    ``sent`` counts datagrams given an address; ``no_address`` those to ids the membership core
    has no record of (yet): dropped, and resent by the rules while they still matter."""

    def __init__(self, proto: OwnershipProtocol, member: Swim) -> None:
        self.proto = proto
        self.member = member
        self.sent = 0
        self.no_address = 0
        self._view_dirty = True  # the first feed gives the rules this member's own view
        self._leave_told = False

    @property
    def core(self) -> Ownership:
        """The rules' state, to read."""
        return self.proto.core

    # ------------------------------------------------------------------ inputs

    def event(self, event: Event, now: float) -> None:
        """One event the membership core drained: a change of another member marks the live
        view for the next feed (``feed_view``); a death the cluster declared of this member
        fences it at once."""
        if isinstance(event, MemberEvent):
            if event.member.node_id != self.proto.core.me:
                self._view_dirty = True
        elif isinstance(event, DeclaredDead):
            self.declared_dead(now)

    def declared_dead(self, now: float) -> None:
        """The cluster declared this member dead: fenced at once (it refutes, and rejoins)."""
        self.proto.declared_dead(now)

    def view_changed(self) -> None:
        """This member's own weight changed (its metadata): feed the view again."""
        self._view_dirty = True

    def feed_view(self, now: float, live: Iterable[Any] | None = None) -> bool:
        """Give the rules the live view (alive and suspect members, id -> weight, and which are
        suspect) if it changed since the last feed; ``live``: the membership core's live
        members, read from it when not given. True if fed."""
        if not self._view_dirty and live is None:
            return False
        self._view_dirty = False
        if live is None:
            view, suspects = self.member.live_weights()
        else:
            view, suspects = {}, []
            for m in live:
                view[m.node_id] = m.meta.weight
                if m.status == SUSPECT:
                    suspects.append(m.node_id)
        self.proto.set_view(view, suspects, now)
        return True

    def set_loads(self, codes: bytes, at_s: int, now: float) -> None:
        """The latest per-partition load figures this member knows, measured at logical time
        ``at_s`` (``Ownership.set_loads``): stable views commit them for a rebalance."""
        self.proto.set_loads(codes, at_s, now)

    def set_pins(self, pins: bytes, base: bytes, loads_at: int, now: float) -> None:
        """Pins a rebalance planned from the stable view whose pins were ``base`` and figures
        were measured at ``loads_at`` (``Ownership.set_pins``): stable views commit them."""
        self.proto.set_pins(pins, base, loads_at, now)

    def receive_datagram(self, data: bytes, now: float) -> None:
        self.proto.receive_datagram(data, now)

    def handle_timer(self, now: float) -> None:
        self.proto.handle_timer(now)

    def releases_done(self, done: list[tuple[int, Any]], now: float) -> None:
        self.proto.releases_done(done, now)

    def leave(self, now: float) -> None:
        """Hand everything on; membership leaves once that is done (``membership_leave_due``)."""
        self.proto.leave(now)

    # ------------------------------------------------------------------ outputs

    def actions(self) -> list[Action]:
        return self.proto.actions()

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Addr]]:
        """``(datagram, address)`` for what is due now, each id looked up once in the
        membership core's records (a witness answers every member's renewal each second: one
        record read per receiver, not the member list built; issue 14, idle CPU)."""
        out: list[tuple[bytes, Addr]] = []
        last: tuple[str, Addr | None] = ("", None)
        for dst, data in self.proto.datagrams_to_send(now):
            if dst != last[0]:
                info = self.member.member(dst)
                last = (dst, None if info is None else info.addr)
            if last[1] is None:
                self.no_address += 1
                continue
            out.append((data, last[1]))
        self.sent += len(out)
        return out

    @property
    def left_ready(self) -> bool:
        """After ``leave``: every partition handed on (or the wait for that given up)."""
        return self.proto.left_ready

    def membership_leave_due(self) -> bool:
        """True once, after ``leave``, when the partitions are handed on: the driver then makes
        the membership core announce the leave (earlier, members would take the partitions over
        as from a dead member instead of receiving them)."""
        if self._leave_told or not self.proto.core.leaving or not self.proto.left_ready:
            return False
        if self.member.status != "alive" or self.member.leave_broadcast_done:
            return False  # not now: declared dead meanwhile (it refutes first), or already left
        self._leave_told = True
        return True

    def get_timer(self, membership_due: float | None = None) -> float:
        """When the ownership rules next need ``handle_timer``, or the membership core's deadline
        ``membership_due`` if earlier (a driver with one timer for both arms this)."""
        due = self.proto.get_timer()
        return due if membership_due is None else min(due, membership_due)
