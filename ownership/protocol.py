"""Ownership in ``membership``'s sans-I/O shape: datagrams in, datagrams out (issue 32).

``OwnershipProtocol`` wraps the rules (``ownership.core.Ownership``) with what both drivers, the
node's ``ExclusiveRunner`` and the simulator's ``SwimNode``, used to do each in its own copy:
decoding datagrams (fragments reassembled here, malformed ones and unknown kinds counted),
encoding what the rules send into as few datagrams per receiver as fit, and keeping a witness's
promises *before* anything that depends on them goes out (``persist``). A driver feeds it the
live view and the clock and carries datagrams to the addresses of member ids; it decides
nothing, so the simulator runs the glue the node runs.

    proto = OwnershipProtocol(Ownership(...), cluster="prod", keyring=keys, persist=save)
    proto.receive_datagram(data, now)          # a datagram on the gossip socket's channel
    proto.handle_timer(now)                    # at proto.get_timer()
    while (action := proto.next_event()) is not None: ...   # Acquired / Release / Ended, in order
    for dst, data in proto.datagrams_to_send(now): send(data, address_of(dst))
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import wire
from .core import Ownership
from .lease import WitnessState
from .messages import Action, Message

__all__ = ["OwnershipProtocol"]


class OwnershipProtocol:
    """One member's ownership protocol (module docstring). ``core``: the rules' state, to read
    (what it owns, its stable view, its counters). ``persist``: called with the durable state
    (``QuorumLease.durable_state``) whenever it changed, before the next datagrams are made;
    False (it could not be written): those datagrams are withheld, and the write is tried
    again before the next ones (the core resends, as after a loss)."""

    def __init__(self, core: Ownership, *, cluster: str = "", keyring: wire.Keyring | None = None,
                 persist: Callable[[WitnessState], bool] | None = None) -> None:
        self.core = core
        self.cluster = cluster
        self.keyring = keyring
        self._persist = persist
        self._persisted = core.lease.durable_changes
        self.fragments = wire.Reassembler()  # views outgrow a datagram (~80 members)
        #: Datagrams dropped: "malformed" (garbage, another cluster, not sealed with our keys),
        #: and messages of kinds this version does not know, skipped ("unknown_kind").
        self.dropped: dict[str, int] = {"malformed": 0, "unknown_kind": 0}
        self._pending: deque[Action] = deque()  # taken from the rules, not yet given out

    # ------------------------------------------------------------------ inputs

    def receive_datagram(self, data: bytes, now: float) -> None:
        decoded = wire.decode_many(data, cluster=self.cluster, keyring=self.keyring, reassembler=self.fragments,
                                   counts=self.dropped)
        if decoded is None:
            self.dropped["malformed"] += 1
            return
        self.core.receive_many(decoded[0], decoded[1], now)

    def set_view(self, view: Mapping[str, float], suspects: Iterable[str], now: float) -> None:
        """The live members (id -> weight, this member included) and the suspect ones."""
        self.core.set_view(view, suspects, now)

    def set_loads(self, codes: bytes, at_s: int, now: float) -> None:
        """The latest load figures this member knows (``Ownership.set_loads``)."""
        self.core.set_loads(codes, at_s, now)

    def set_pins(self, pins: bytes, base: bytes, loads_at: int, now: float) -> None:
        """Pins a rebalance planned from a stable view (``Ownership.set_pins``)."""
        self.core.set_pins(pins, base, loads_at, now)

    def handle_timer(self, now: float) -> None:
        self.core.handle_timer(now)

    def declared_dead(self, now: float) -> None:
        self.core.declared_dead(now)

    def leave(self, now: float) -> None:
        self.core.leave(now)

    def releases_done(self, done: Iterable[tuple[int, Any]], now: float) -> None:
        self.core.releases_done(done, now)

    # ------------------------------------------------------------------ outputs

    def actions(self) -> list[Action]:
        """Every action due, oldest first (``next_event`` one at a time, as membership's core)."""
        if not self._pending:
            return self.core.actions()
        out = [*self._pending, *self.core.actions()]
        self._pending.clear()
        return out

    def next_event(self) -> Action | None:
        """The oldest action due (``Acquired``, ``Release``, ``Ended``), or None."""
        if not self._pending:
            self._pending.extend(self.core.actions())
        return self._pending.popleft() if self._pending else None

    def get_timer(self) -> float:
        return self.core.get_timer()

    @property
    def left_ready(self) -> bool:
        return self.core.left_ready

    @property
    def malformed(self) -> int:
        """Datagrams dropped as malformed, fragments given up included."""
        return self.dropped["malformed"] + self.fragments.dropped

    def datagrams_to_send(self, now: float) -> list[tuple[str, bytes]]:
        """``(member id, datagram)`` for what is due now, the messages to one member packed
        together; after ``persist`` kept any change of the promises (class docstring)."""
        by_dst: dict[str, list[Message]] = {}
        for dst, msg in self.core.messages(now):
            by_dst.setdefault(dst, []).append(msg)
        lease = self.core.lease
        if self._persist is not None and lease.durable_changes != self._persisted:
            changes = lease.durable_changes
            if not self._persist(lease.durable_state()):
                return []
            self._persisted = changes
        me = self.core.me
        return [(dst, data) for dst, msgs in by_dst.items()
                for data in wire.encode_many(me, msgs, cluster=self.cluster, keyring=self.keyring)]
