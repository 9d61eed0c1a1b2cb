"""Everything the core sends: piggybacked gossip, gossip rounds, and push-pull state exchange.

Why this module exists: SWIM spreads membership updates by piggybacking them on the protocol's
own datagrams (Das et al. 2002, section 4.1), so every datagram the core sends goes through
one place that fills it with queued updates (``send``), counts it and puts it in the outbox.
The same place runs memberlist's gossip loop (``gossip``: the queue pushed to a few random
members every gossip interval) and the full-state exchange that repairs views gossip missed
(``send_state``, push-pull; when to start one is decided where the trigger is seen: a checksum
mismatch on an ack in ``probing.py``, a join in ``joining.py``).

The outbox is a list the driver drains (``Swim.datagrams_to_send``); nothing here touches a
socket or a clock, and randomness comes from the core's ``random.Random``.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Sequence

from .config import MembershipConfig
from .messages import Addr, Alive, Dead, PushPull, Suspect
from .queue import BroadcastQueue
from .sampling import sample
from .status import ALIVE, LEFT, SUSPECT
from .suspicion import Suspicion
from .view import Member, View
from .wire import Codec

__all__ = ["Dissemination"]

# A push-pull request from one address is answered at most this often (limits amplification:
# one small request datagram triggers several full-state datagrams).
_PUSH_PULL_REPLY_GUARD_S = 1.0


class Dissemination:
    """The sending side of one member: outbox, broadcast queue, gossip rounds, push-pull."""

    __slots__ = (
        "_drop",
        "_push_pull_replies",
        "_retransmit_limits",
        "_rng",
        "_stats",
        "_suspicions",
        "_view",
        "bytes_out",
        "codec",
        "config",
        "datagrams_out",
        "last_push_pull_at",
        "next_gossip_at",
        "node_id",
        "outbox",
        "queue",
    )

    def __init__(self, config: MembershipConfig, view: View, codec: Codec, *,
                 suspicions: dict[str, Suspicion], stats: Counter[str], rng: random.Random,
                 drop: Callable[[str], None], now: float) -> None:
        self.config = config
        self.node_id = view.node_id
        self.codec = codec
        #: Updates waiting to be piggybacked, at most one per member (``queue.py``).
        self.queue = BroadcastQueue(Codec.message_cost)
        #: Datagrams for the driver; ``Swim.datagrams_to_send`` takes the list and puts a new one.
        self.outbox: list[tuple[bytes, Addr]] = []
        # Plain ints, not Counter entries: bumped for every datagram (``Swim.stats`` copies them).
        self.datagrams_out = self.bytes_out = 0
        self.next_gossip_at = now
        self.last_push_pull_at = float("-inf")
        self._view = view
        self._suspicions = suspicions  # read only: who accused a suspect (``state_message``)
        self._stats = stats
        self._rng = rng
        self._drop = drop
        self._retransmit_limits: dict[int, int] = {}  # live count -> limit
        self._push_pull_replies: dict[Addr, tuple[float, int]] = {}

    def send(self, addr: Addr, head: Sequence[bytes], piggyback: bool = True) -> None:
        """Send ``head`` (pre-encoded messages) to ``addr``, filling the rest with gossip."""
        blobs = list(head)
        if piggyback and self.queue:
            budget = self.codec.capacity() - sum(map(Codec.message_cost, head))
            blobs += self.queue.take(budget, self.retransmit_limit())
        self.emit(self.codec.seal(blobs), addr)

    def emit(self, datagram: bytes, addr: Addr) -> None:
        """Put one finished datagram in the outbox."""
        self.datagrams_out += 1
        self.bytes_out += len(datagram)
        self.outbox.append((datagram, addr))

    def broadcast(self, msg: Alive | Suspect | Dead) -> None:
        """Queue an accepted state change for piggybacking (replacing older news of its member)."""
        self.queue.push(msg.node, self.codec.encode_message(msg))

    def pass_on(self, msg: Suspect) -> None:
        """Queue ``msg`` (a Lifeguard confirmation of a suspicion of ``node``): while the
        suspicion is still queued the confirmation replaces it within its remaining budget;
        only a confirmation that arrives later gets a fresh budget (a reset for every
        confirmation cost ~10% more datagrams per failure, for no faster detection)."""
        blob = self.codec.encode_message(msg)
        if msg.node in self.queue:
            self.queue.refine(msg.node, blob)
        else:
            self.queue.push(msg.node, blob)

    def retransmit_limit(self) -> int:
        n = self._view.live_count()
        limit = self._retransmit_limits.get(n)
        if limit is None:
            limit = self._retransmit_limits[n] = self.config.retransmit_limit(n)
        return limit

    def state_message(self, m: Member) -> Alive | Suspect | Dead:
        """The update that states what we hold about ``m``."""
        if m.status == ALIVE:
            return Alive(m.node_id, m.incarnation, m.addr, m.meta)
        if m.status == SUSPECT:
            # Name the original accuser: relaying a suspicion is no independent confirmation.
            s = self._suspicions.get(m.node_id)
            return Suspect(m.node_id, m.incarnation, s.accuser if s is not None else self.node_id)
        return Dead(m.node_id, m.incarnation, m.node_id if m.status == LEFT else self.node_id)

    def gossip(self, now: float) -> None:
        """One gossip round (memberlist's gossip loop): queued updates to ``gossip_fanout``
        random members, recently dead ones included so they can refute.

        A round is sent only while some update is within the first ``gossip_push_share`` of its
        retransmit limit (the datagram then carries every queued update that fits); the rest
        of an update's transmissions ride on pings, acks and rounds started by newer updates.
        Why: the early transmissions spread an update (the infected set grows by about
        fanout + 1 per round, SWIM section 4 / Demers et al. 1987), the late ones mostly reach
        members that know it already; at N=256 a crash every 20 s cost 1.85 gossip datagrams
        per member per second with every transmission pushed, 0.6 with half - but detection
        got slower, so the default (1.0) pushes the whole budget as memberlist does (state.go
        gossip; issue 14, BENCHMARKS.md)."""
        self.next_gossip_at = now + self.config.gossip_interval_s
        horizon = now - self.config.gossip_to_dead_s
        view = self._view
        peers = view.live_peers
        if view.dead_since:
            peers = peers + [k for k, since in view.dead_since.items() if since >= horizon]
        capacity, limit = self.codec.capacity(), self.retransmit_limit()
        # A leaving member no longer probes (nothing to ride on): it pushes the whole budget.
        push_below = limit if view.leaving else max(1, math.ceil(limit * self.config.gossip_push_share))
        for peer_id in sample(self._rng, peers, min(self.config.gossip_fanout, len(peers))):
            if not self.queue.fresh(push_below):
                break
            peer = view.members[peer_id]
            blobs = self.queue.take(capacity, limit)
            if not blobs:
                break
            self._stats["gossip_datagrams"] += 1
            self.emit(self.codec.seal(blobs), peer.addr)

    def send_state(self, addr: Addr, *, reply: bool, now: float) -> None:
        """Send our full state to ``addr`` in as many datagrams as needed (push-pull)."""
        self.last_push_pull_at = now
        self._stats["push_pull_sent"] += 1
        codec = self.codec
        head = codec.encode_message(PushPull(self._rng.getrandbits(32), reply))
        capacity = codec.capacity() - codec.message_cost(head)
        chunk: list[bytes] = [head]
        room = capacity
        for m in self._view.members.values():
            blob = codec.encode_message(self.state_message(m))
            cost = codec.message_cost(blob)
            if cost > capacity:
                self._drop("record_over_mtu")
                continue
            if cost > room:
                self.emit(codec.seal(chunk), addr)
                chunk, room = [head], capacity
            chunk.append(blob)
            room -= cost
        self.emit(codec.seal(chunk), addr)

    def may_reply_push_pull(self, addr: Addr, sync_id: int, now: float) -> bool:
        """Whether to answer a push-pull from ``addr`` (at most one reply per address a second,
        none twice to the same exchange)."""
        last = self._push_pull_replies.get(addr)
        if last is not None and (last[1] == sync_id or now - last[0] < _PUSH_PULL_REPLY_GUARD_S):
            return False
        if len(self._push_pull_replies) > 4096:
            self._push_pull_replies.clear()
        self._push_pull_replies[addr] = (now, sync_id)
        return True
