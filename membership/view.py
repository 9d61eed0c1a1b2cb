"""One member's view of the cluster: the member table and the indexes kept in step with it.

Why this module exists: every part of the protocol reads the view (who is live, at what
address and incarnation), and three derived structures must change exactly when a status or an
incarnation does - the live list that gossip and ping-req targets are sampled from, the view
checksum that rides on every ack (anti-entropy, as in Ringpop), and the probe ring ("Probe
schedule" in ``core.py``). Keeping all of them behind ``add``, ``set_status`` and
``live_changed`` makes that the one place they can drift apart, and ``check_invariants`` the one
place that says they did not. Nothing here sends, schedules or decides; the rules that change
the view are in ``updates.py``.

No per-datagram work scans the whole view: the checksum is a running sum (see
``View.checksum``), live members sit in a list for O(1) random sampling with a position map for
O(1) removal, and the reclaim of long-dead records scans only when one may be due.
"""

from __future__ import annotations

import math
import zlib
from bisect import bisect_left, insort
from collections.abc import Iterable

from .messages import Addr, MemberInfo, Meta
from .status import ALIVE, DEAD, LEFT, LIVE_STATUSES, SUSPECT, Status

__all__ = ["Member", "View", "entry_hash", "ring_key"]


def entry_hash(entry: str) -> int:
    """One live member's term of the view checksum (see ``View.checksum``)."""
    return zlib.crc32(entry.encode())


def ring_key(node_id: str) -> tuple[int, str]:
    """A member's place in the probe ring: the same on every member, unrelated to id order."""
    return zlib.crc32(node_id.encode()), node_id


class Member:
    """The record of one member (ourselves included) in the view."""

    __slots__ = ("addr", "heard", "incarnation", "meta", "node_id", "since", "status")

    def __init__(self, node_id: str, addr: Addr, meta: Meta, incarnation: int, status: Status,
                 since: float) -> None:
        self.node_id = node_id
        self.addr = addr
        self.meta = meta
        self.incarnation = incarnation
        self.status: Status = status
        self.since = since
        self.heard: float | None = None  # last datagram from it (operators' "last heard from")

    def info(self) -> MemberInfo:
        return MemberInfo(self.node_id, self.addr, self.status, self.incarnation, self.meta, self.heard)


class View:
    """The member table of one member, its indexes, and whether it has left.

    The containers are shared with the other parts of the core by reference and are never
    rebound; change them only through the methods here (reading them directly is fine)."""

    __slots__ = (
        "checksum",
        "dead_since",
        "generation",
        "had_peer",
        "leaving",
        "live_entries",
        "live_peers",
        "live_pos",
        "me",
        "members",
        "node_id",
        "reclaim_from",
        "ring",
        "ring_pos",
        "ring_self",
    )

    def __init__(self, me: Member) -> None:
        node_id = me.node_id
        self.node_id = node_id
        #: Our own record (status ``alive``, or ``left`` after a leave).
        self.me = me
        self.members: dict[str, Member] = {node_id: me}
        # Live (alive or suspect) members other than us, in a list for O(1) random sampling,
        # with each one's position, and the time each dead member was declared dead.
        self.live_peers: list[str] = []
        self.live_pos: dict[str, int] = {}
        self.dead_since: dict[str, float] = {}
        # "id\x00incarnation" of every live member, us included: what the view checksum hashes.
        self.live_entries: dict[str, str] = {node_id: f"{node_id}\x00{me.incarnation}"}
        #: Sum mod 2**32 of the CRC-32s of ``live_entries``' values: independent of order and
        #: kept up to date in O(1) per change (sorting and hashing the whole view after every
        #: suspicion and refutation cost ~4% of a simulated loss run); equal views have equal
        #: sums, and two different views collide with probability about 2**-32.
        self.checksum = entry_hash(self.live_entries[node_id])
        # No dead or left member became so before this time (a lower bound), so the reclaim
        # scan of the whole view runs only when one may be due.
        self.reclaim_from = math.inf
        #: The probe ring ("Probe schedule" in core.py): live members and us, sorted by ring_key.
        self.ring_self = ring_key(node_id)
        self.ring: list[tuple[int, str]] = [self.ring_self]
        #: Our index in ``ring``, or -1 until ``ring_target`` needs it after the ring changed (it
        #: changes on joins and deaths, while every member finds its place once per period).
        self.ring_pos = 0
        #: Ever had a live peer: refusals no longer stop us (``JoinRefused``).
        self.had_peer = False
        #: We left (``Swim.leave``): no input is handled, no one is probed.
        self.leaving = False
        #: Bumped whenever a member enters or leaves the table or changes status, so a list
        #: derived from the table (``Prober``'s ping-req helpers) is rebuilt only when stale.
        self.generation = 0

    def add(self, m: Member) -> None:
        """Enter a member we did not hold (live: it comes from an ``Alive``)."""
        self.members[m.node_id] = m
        self.generation += 1
        self._index_live(m.node_id)
        self.live_changed(m)

    def set_status(self, m: Member, status: Status, now: float) -> None:
        """The one place a member's status changes (keeps the indexes in step)."""
        was_live = m.status in LIVE_STATUSES
        m.status = status
        m.since = now
        self.generation += 1
        self.live_changed(m)
        if m is self.me:
            return
        if status in (DEAD, LEFT):
            self.reclaim_from = min(self.reclaim_from, now)
        if status == DEAD:
            self.dead_since[m.node_id] = now
        else:
            self.dead_since.pop(m.node_id, None)
        if status in LIVE_STATUSES and not was_live:
            self._index_live(m.node_id)
        elif was_live and status not in LIVE_STATUSES:
            # swap-remove from the sampling list
            pos = self.live_pos.pop(m.node_id)
            last = self.live_peers.pop()
            if last != m.node_id:
                self.live_peers[pos] = last
                self.live_pos[last] = pos
            ring = self.ring
            del ring[bisect_left(ring, ring_key(m.node_id))]
            self.ring_pos = -1

    def live_changed(self, m: Member) -> None:
        """``m``'s status or incarnation may have changed: keep the checksum's entries in step
        (the checksum changes only if they changed; alive <-> suspect does not)."""
        entry = f"{m.node_id}\x00{m.incarnation}" if m.status in LIVE_STATUSES else None
        old = self.live_entries.get(m.node_id)
        if entry == old:
            return
        checksum = self.checksum
        if old is not None:
            checksum -= entry_hash(old)
            if entry is None:
                del self.live_entries[m.node_id]
        if entry is not None:
            checksum += entry_hash(entry)
            self.live_entries[m.node_id] = entry
        self.checksum = checksum & 0xFFFFFFFF

    def _index_live(self, node_id: str) -> None:
        self.had_peer = True
        self.live_pos[node_id] = len(self.live_peers)
        self.live_peers.append(node_id)
        insort(self.ring, ring_key(node_id))
        self.ring_pos = -1

    def live_count(self) -> int:
        """Live members, us included (N in the SWIM/Lifeguard formulas)."""
        return len(self.live_peers) + (self.me.status in LIVE_STATUSES)

    def ring_target(self, period: int) -> Member | None:
        """Whom we probe in probe period ``period`` ("Probe schedule" in core.py): the member
        ``1 + period mod (N-1)`` places after us on the ring; None while we know no one."""
        ring = self.ring
        n = len(ring)
        if n < 2:
            return None
        me = self.ring_pos
        if me < 0:
            me = self.ring_pos = bisect_left(ring, self.ring_self)
        return self.members[ring[(me + 1 + period % (n - 1)) % n][1]]

    def reclaim(self, horizon: float) -> None:
        """Forget dead and left members that became so before ``horizon`` (as memberlist drops
        dead nodes after GossipToTheDeadTime, state.go resetNodes); cheap unless one may be due."""
        if self.reclaim_from < horizon:  # someone may be due: scan (rarely)
            for node_id in [k for k, m in self.members.items()
                            if m.status in (DEAD, LEFT) and m.since < horizon]:
                del self.members[node_id]
                self.dead_since.pop(node_id, None)
                self.generation += 1
            self.reclaim_from = min((m.since for m in self.members.values() if m.status in (DEAD, LEFT)),
                                    default=math.inf)

    def check_invariants(self, suspected: Iterable[str]) -> None:
        """Raise AssertionError if the indexes disagree with the table, or a member we hold a
        suspicion of (``suspected``) is not suspect."""
        live = {k for k, m in self.members.items() if m is not self.me and m.status in LIVE_STATUSES}
        assert set(self.live_peers) == live and len(self.live_peers) == len(live), "live index"
        assert all(self.live_peers[i] == k for k, i in self.live_pos.items()), "live positions"
        assert set(self.dead_since) == {k for k, m in self.members.items() if m.status == DEAD}, "dead index"
        assert set(suspected) <= {k for k, m in self.members.items() if m.status == SUSPECT}, "suspicions"
        assert self.me.status in (ALIVE, LEFT), "self status"
        assert self.live_entries == {k: f"{k}\x00{m.incarnation}" for k, m in self.members.items()
                                     if m.status in LIVE_STATUSES}, "checksum entries"
        assert self.checksum == sum(map(entry_hash, self.live_entries.values())) & 0xFFFFFFFF, "checksum"
        assert self.ring == sorted(ring_key(k) for k in live | {self.node_id}), "probe ring"
        assert self.ring_pos < 0 or self.ring[self.ring_pos] == self.ring_self, "probe ring position"
