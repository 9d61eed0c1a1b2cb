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

# ``push_below`` of an update whose whole retransmit budget gossip rounds may push.
_WHOLE_BUDGET = 1 << 30

# A push-pull request from one address is answered at most this often (limits amplification:
# one small request datagram triggers several full-state datagrams).
_PUSH_PULL_REPLY_GUARD_S = 1.0


class Dissemination:
    """The sending side of one member: outbox, broadcast queue, gossip rounds, push-pull."""

    __slots__ = (
        "_drop",
        "_last_round_at",
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
        #: When a gossip round is due (infinity: nothing to push; see ``gossip`` and ``_queue``).
        self.next_gossip_at = math.inf
        self._last_round_at = -math.inf
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
        """Queue an accepted state change for piggybacking (replacing older news of its member).

        How many of its transmissions gossip rounds push (the rest ride on probes and acks):
        an ``Alive`` (a join, a refutation racing a verdict, new metadata) all of them, as
        memberlist does; a suspicion ``suspect_push_rounds`` rounds' worth and a death
        ``dead_push_rounds`` rounds' worth (``MembershipConfig``, issue 14). A newer update about
        the same member, a Lifeguard confirmation included, starts a fresh budget."""
        cfg = self.config
        if isinstance(msg, Alive):
            rounds = None
        else:
            rounds = cfg.suspect_push_rounds if isinstance(msg, Suspect) else cfg.dead_push_rounds
        self._queue(self.codec.encode_message(msg), msg.node, rounds)

    def _queue(self, blob: bytes, node: str, rounds: int | None) -> None:
        # A whole budget is "always fresh" rather than today's limit: the limit grows with the
        # cluster, and an Alive queued while a bootstrap had few members was otherwise pushed
        # only as often as that small cluster needed (N=1,024: views settled 14 s later).
        push_below = _WHOLE_BUDGET if rounds is None else rounds * self.config.gossip_fanout
        self.queue.push(node, blob, push_below)
        # A round is due at once after a quiet spell, else one interval after the last round:
        # an update then crosses the cluster in a chain of rounds at network speed (each
        # receiver's round is due too), instead of waiting up to an interval at every hop.
        self.next_gossip_at = min(self.next_gossip_at, self._last_round_at + self.config.gossip_interval_s)

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

        A round is sent only while some update is within the transmissions it may push (see
        ``broadcast``); the datagram then carries every queued update that fits, and the rest
        of an update's transmissions ride on pings, acks and rounds started by newer updates.
        Why: the first round of a new update spreads it through the whole cluster in a chain
        of rounds (every receiver that was quiet gossips at once, SWIM section 4 / Demers et al.
        1987: the infected set grows about fanout + 1 times per hop); the later rounds mostly
        reach members that know it already. At N=256 with a crash every 20 s, pushing whole
        budgets cost 1.85 gossip datagrams per member per second (issue 14, docs/benchmarks-log.md).
        With nothing left to push no round is due until a new update is queued (``_queue``)."""
        view = self._view
        cfg = self.config
        sent = False
        # A leaving member no longer probes (nothing to ride on): it pushes the whole budget.
        limit = self.retransmit_limit()
        below = limit if view.leaving else None  # None: each update's own push budget
        if self.queue.fresh(below):
            horizon = now - cfg.gossip_to_dead_s
            peers = view.live_peers
            if view.dead_since:
                peers = peers + [k for k, since in view.dead_since.items() if since >= horizon]
            capacity = self.codec.capacity()
            for peer_id in sample(self._rng, peers, min(cfg.gossip_fanout, len(peers))):
                blobs = self.queue.take(capacity, limit)
                if not blobs:
                    break
                sent = True
                self._stats["gossip_datagrams"] += 1
                self.emit(self.codec.seal(blobs), view.members[peer_id].addr)
                if not self.queue.fresh(below):
                    break
        if sent:
            self._last_round_at = now
            self.next_gossip_at = now + cfg.gossip_interval_s
        else:
            self.next_gossip_at = math.inf

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
