"""The SWIM + Lifeguard membership protocol as a sans-I/O state machine.

Theory of operation
===================

One ``Swim`` object is one member's view of the cluster. It never reads a clock, never touches
a socket and draws all randomness from the ``random.Random`` it is given. Its driver (the
asyncio driver in ``aio.py``, the simulator, or a unit test) feeds it

* ``receive_datagram(data, addr, now)`` for every datagram that arrives, and
* ``handle_timer(now)`` whenever ``get_timer()`` says something is due,

and after each call drains ``datagrams_to_send()`` and ``next_event()``. The same inputs give
the same outputs, so a simulation is reproduced exactly from its seed.

Failure detection (SWIM, Das et al. DSN 2002, section 3). Every probe period T (scaled by the
local health multiplier, below; the first period starts at a random phase) the member pings one
member; which one is our change to SWIM's round-robin (section 4.3), see "Probe schedule". If no
ack comes within the probe timeout it sends ping-req to ``indirect_checks`` random members, who
ping the target on its behalf and relay the ack, or answer with a nack when they got nothing
(Lifeguard section IV-A). No ack by the end of the period: the target becomes *suspect*.

Probe schedule (ours). SWIM and memberlist have every member walk its own randomly shuffled
list, which bounds the time until a failed member is probed by a *given* member (N periods),
but cluster-wide the wait until *someone* first probes it is about exponential with mean T
(measured at N=256: p50 0.69 T, p99 4.6 T) and was the tail of our detection time. Instead all
members order the live view the same way (a ring sorted by CRC-32 of the id, as Rapid gives
every member fixed observers, Suresh et al., USENIX ATC 2018), and in period ``s`` (the wall
clock divided by T) the member at ring position ``p`` probes position ``p + 1 + s mod (N-1)``.
While views agree each member is probed exactly once per period, by a different member each
time, so a failed member is probed within two periods (mean 0.58 T: this period's prober may
have probed it just before the failure), and each member still probes every other once per
N-1 periods (SWIM's bound). Views that disagree or clocks that are skewed only make the pattern
less regular (a target is probed twice or not at all in a period), never stop probing. The period needs a clock the members
share: the driver passes ``clock_offset_s`` such that ``now + clock_offset_s`` is Unix time
(NTP keeps that within milliseconds; the simulator's clock is shared).

Suspicion (SWIM section 4.2). A suspect is still a member (it keeps its partitions). Members
are ordered by incarnation numbers that only the member itself raises: hearing that it is
suspected or dead, a member refutes by raising its incarnation and gossiping ``Alive``.
Precedence: ``Alive(i)`` beats any state with an incarnation < i; ``Suspect(i)`` beats
``Alive(j <= i)``; ``Dead(i)`` beats ``Alive``/``Suspect`` with j <= i. A suspicion turns into
``dead`` when its timer runs out. The timer starts long and shrinks with each *independent*
accuser (Lifeguard section IV-B, see ``suspicion.py``) down to a minimum of
``max(suspicion_min_floor_s, suspicion_mult * log10(N) * T)`` (memberlist's formula, with a
floor so small clusters do not convict faster than large ones). ``Dead`` sent by a member about itself
means it left gracefully (status ``left``). A restarted process with the same id learns the
incarnation the cluster holds for it from the state it receives (the join's push-pull) and
refutes it, so it rejoins with a higher incarnation; the driver may also pass a time-derived
starting incarnation.

Lifeguard (arXiv 1707.00788). Local health awareness (``awareness.py``) scales probe interval
and timeout by ``score + 1``; the score rises on failed probes with missing nacks, on having to
refute, and on event-loop lag reported by the driver, and falls on successful probes. The
buddy system: a ping to a suspect carries the ``Suspect`` message, so the suspect can refute at
once. Our addition: a few members (``suspicion_reprobe_members``) that hear of a new suspicion
probe the suspect next, so the independent confirmations that shorten the suspicion arrive in
about two periods rather than by chance. Three more additions of ours for members that freeze
(GC pause, CPU starvation), each found by classifying false deaths in the simulator's
``stalls`` scenario: a ping that carries a suspicion of us is refuted first and its ack carries
our ``Alive`` (a member that wakes answers its whole backlog of such pings, beyond the gossip
queue's retransmit limit); one probe timeout before its verdict a member pings the suspect
itself, suspicion attached, so an ack brings the refutation in time; and a suspicion timer that
fires late, or right after a loop stall the driver reported, defers the verdict by one period,
because the refutation may be sitting unread in our socket buffer. ``config.lifeguard = False``
turns all of this off (plain SWIM with a fixed suspicion timeout).

Dissemination (SWIM section 4.1). Every accepted state change is queued (``queue.py``) and
piggybacked on pings, acks and every other datagram, filling each up to ``mtu_bytes``, newest
and least-sent first, each at most ``retransmit_mult * ceil(log10(N+1))`` times. While the
queue is not empty it is also pushed every ``gossip_interval_s`` to ``gossip_fanout`` random
members (memberlist's gossip loop), including recently dead ones so they can refute.

Anti-entropy (Ringpop). Every ack carries a checksum of the sender's live view (member ids and
incarnations). When the ack to our probe has a checksum that differs from ours while no gossip
is in flight (our queue is empty and the datagram carried no updates), the views diverged: we
start a push-pull, i.e.
send our full state (split into as many datagrams as needed, each <= MTU) and the peer answers
with its own. A converged idle cluster therefore never exchanges full state. In state received
by push-pull, ``dead`` is applied as ``suspect`` (as memberlist's mergeState does), so a stale
view cannot kill a live member outright (memberlist#312). A ping from a member we do not know at all
(its arrival's gossip ran out of retransmits before reaching us) also starts a push-pull with
it, at most one per probe interval; a joiner gossips its own ``Alive`` as well as its seed.

Join, leave, partitions. ``join(seeds)`` push-pulls with each seed and retries while we know
no one, with exponential backoff, reporting each failed attempt (``JoinAttempt``: the seeds and
what came back from them). A seed whose cluster name or settings differ answers ``Refuse``; the
refusal stops only a member that never had a live peer (``_mismatch``). ``leave()`` gossips ``Dead(self)`` and stops probing; the driver keeps sending until
``leave_broadcast_done``. Every ``dead_retry_interval_s`` one random dead member's address gets
a ping; if it answers, a push-pull follows, so clusters split by a network partition merge
after it heals.

Bad input. Datagrams are validated strictly (``wire.py``); anything invalid, from another
cluster, with different cluster settings, replayed, or not decryptable with any key of the
keyring is dropped and counted in ``stats["dropped_<reason>"]``; ``receive_datagram`` never
raises and never applies part of an invalid datagram. A datagram we cannot read for its keys
or protocol version is answered with a notice saying why (``wire.py``; ``_unreadable``).
"""

from __future__ import annotations

import math
import random
import zlib
from bisect import bisect_left, insort
from collections import Counter, deque
from typing import Iterable, Iterator, Sequence, TypeVar

from .awareness import Awareness
from .config import MembershipConfig
from .messages import (
    ALIVE, DEAD, LEFT, LIVE_STATUSES, SUSPECT, Ack, Addr, Alive, Dead, DeclaredDead, Event, IdConflict,
    JoinAttempt, JoinRefused, MemberEvent, MemberInfo, Message, Meta, Nack, Ping, PingReq, PushPull, Refuse,
    RefusedPeer, Suspect,
)
from .queue import BroadcastQueue
from .status import JOINED, UPDATED, EventKind, Status, supersedes
from .suspicion import Suspicion
from .wire import (
    NOTICE_REASONS, PROTOCOL_VERSION, Codec, Drop, Envelope, Keyring, Notice, ReplayFilter, check_outgoing, encode_meta,
    encode_notice,
)

__all__ = ["Swim"]

# A push-pull request from one address is answered at most this often (limits amplification:
# one small request datagram triggers several full-state datagrams).
_PUSH_PULL_REPLY_GUARD_S = 1.0
# Raising our incarnation this often within the window because of records of us at another
# address means another live process has our id (see _foreign_claim).
_ID_CONFLICT_BUMPS = 3
_ID_CONFLICT_WINDOW_S = 60.0
# What a joiner tells the operator about a seed (JoinAttempt): datagrams from it we had to drop,
# and notices it sent about ours (wire.py).
_JOIN_DROP_HINTS = {
    "decrypt_failed": "its datagrams do not decrypt with our keys (different gossip keys?)",
    "unexpected_encrypted": "it encrypts gossip and we have no keys",
    "unencrypted": "it does not encrypt gossip and we do",
    "unknown_version": "it speaks another gossip protocol version",
}
_NOTICE_HINTS = {
    "decrypt_failed": "it cannot decrypt our datagrams (different gossip keys?)",
    "unencrypted": "it encrypts gossip and we have no keys",
    "unexpected_encrypted": "it does not encrypt gossip and we do",
    "unknown_version": "it speaks gossip protocol version {theirs}, we speak {ours}",
}
# A notice is sent to one address at most this often.
_NOTICE_INTERVAL_S = 1.0


_T = TypeVar("_T")


def _sample(rng: random.Random, population: list[_T], k: int) -> list[_T]:
    """``rng.sample(population, k)``, with the same draws, for the few picks of gossip targets and
    ping-req helpers. ``Random.sample`` is Python code (~3 us a call, 4% of a compiled 5%-loss
    simulation). For k <= 5 from more than 21 items it draws ``randbelow(n)`` until it hits an
    index not yet picked, and ``randbelow`` draws ``getrandbits(n.bit_length())`` until below n
    (CPython Lib/random.py); this does the same draws in one loop. Other sizes go to
    ``rng.sample``. Checked against ``rng.sample`` in tests/test_membership_parts.py."""
    n = len(population)
    if k > 5 or n <= 21 or k < 0:
        return rng.sample(population, k)
    bits = n.bit_length()
    picked: list[int] = []
    for _ in range(k):
        j = rng.getrandbits(bits)
        while j >= n or j in picked:
            j = rng.getrandbits(bits)
        picked.append(j)
    return [population[j] for j in picked]


def _entry_hash(entry: str) -> int:
    """One live member's term of the view checksum (see Swim.view_checksum)."""
    return zlib.crc32(entry.encode())


def _ring_key(node_id: str) -> tuple[int, str]:
    """A member's place in the probe ring: the same on every member, unrelated to id order."""
    return zlib.crc32(node_id.encode()), node_id


class _Member:
    __slots__ = ("node_id", "addr", "meta", "incarnation", "status", "since", "heard")

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


class _Probe:
    """Our current probe of ``target`` (one at a time, as in SWIM)."""

    __slots__ = ("seq", "target", "timeout_at", "acked", "indirect_sent", "nacks_expected", "nacks")

    def __init__(self, seq: int, target: str, timeout_at: float) -> None:
        self.seq = seq
        self.target = target
        self.timeout_at = timeout_at
        self.acked = False
        self.indirect_sent = False
        self.nacks_expected = 0
        self.nacks = 0


class _Relay:
    """A ping we send on behalf of a ping-req; its ack (or a nack) goes back to the requester."""

    __slots__ = ("requester", "seq", "deadline")

    def __init__(self, requester: Addr, seq: int, deadline: float) -> None:
        self.requester = requester
        self.seq = seq
        self.deadline = deadline


class Swim:
    """One member's SWIM/Lifeguard state machine. See the module docstring and ``membership``."""

    def __init__(self, config: MembershipConfig, node_id: str, advertise: Addr, *,
                 rng: random.Random, now: float, meta: Meta | None = None,
                 incarnation: int = 0, clock_offset_s: float = 0.0) -> None:
        # (Required keyword arguments first: mypyc cannot describe a signature otherwise.)
        meta = meta if meta is not None else Meta()
        self._check_meta(config, meta)
        check_outgoing(Alive(node_id, incarnation, (advertise[0], int(advertise[1])), meta))
        self.config = config
        self.node_id = node_id
        self.advertise = (advertise[0], int(advertise[1]))
        self._rng = rng
        self._self = _Member(node_id, self.advertise, meta, incarnation, ALIVE, now)
        self._members: dict[str, _Member] = {node_id: self._self}
        # Indexes kept in step with member statuses by _add_member/_set_status, so per-datagram
        # work does not scan the whole view: live (alive or suspect) members other than us, in
        # a list for O(1) random sampling, and the time each dead member was declared dead.
        self._live_peers: list[str] = []
        self._live_pos: dict[str, int] = {}
        self._dead_since: dict[str, float] = {}
        # "id\x00incarnation" of every live member, us included: what the view checksum hashes.
        self._live_entries: dict[str, str] = {node_id: f"{node_id}\x00{incarnation}"}
        self._checksum = _entry_hash(self._live_entries[node_id])
        # No dead or left member became so before this time (a lower bound), so the reclaim
        # scan of the whole view runs only when one may be due.
        self._reclaim_from = math.inf
        self._retransmit_limits: dict[int, int] = {}  # live count -> limit
        self._awareness = Awareness(config.awareness_max_multiplier, enabled=config.lifeguard)
        self._woke_at = -math.inf  # when the driver last reported a loop stall (see handle_timer)
        self.keyring = Keyring(config.keys)
        self._codec = Codec(cluster=config.cluster_name, settings=config.cluster_settings,
                            sender=node_id, epoch=rng.getrandbits(63), keyring=self.keyring,
                            mtu_bytes=config.mtu_bytes, max_receive_bytes=config.max_receive_bytes)
        self._replay = ReplayFilter()
        self._queue = BroadcastQueue(Codec.message_cost)
        self._suspicions: dict[str, Suspicion] = {}
        self._relays: dict[int, _Relay] = {}
        self._probe: _Probe | None = None
        self._dead_ping_seq: int | None = None  # our ping to a dead member's address
        # The probe ring (see "Probe schedule"): live members and us, sorted by _ring_key.
        self._ring_self = _ring_key(node_id)
        self._ring: list[tuple[int, str]] = [self._ring_self]
        self._clock_offset_s = clock_offset_s
        self._probe_next: list[str] = []  # suspects to probe before the scheduled target
        self._seq = 0
        self._outbox: list[tuple[bytes, Addr]] = []
        self._events: deque[Event] = deque()
        self._seeds: list[Addr] = []
        self._had_peer = False  # ever had a live peer: refusals no longer stop us (JoinRefused)
        self._join_attempts = 0  # failed attempts since we last had a live peer (backoff)
        self._join_heard: dict[Addr, str] = {}  # seed address -> why we dropped what it sent
        self._notified: dict[Addr, float] = {}  # address -> when we last sent it a notice
        self._leaving = False
        # Random phase (memberlist staggers its tickers too): members started together must not
        # probe in lock-step.
        self._next_probe_at = now + rng.random() * config.probe_interval_s
        self._next_gossip_at = now
        self._next_join_at: float | None = None
        self._next_dead_retry_at = now + config.dead_retry_interval_s
        self._last_push_pull_at = float("-inf")
        self._last_unknown_sync_at = float("-inf")
        self._foreign_claims: deque[float] = deque()
        #: Per member, the latest claim refused because it came from a second address while
        #: the member was live (``_on_alive``); applied if that member's record dies.
        self._claims: dict[str, Alive] = {}
        self._claims_told: dict[str, float] = {}  # member -> when we last passed it a claim
        self._id_conflict_at = float("-inf")
        self._push_pull_replies: dict[Addr, tuple[float, int]] = {}
        self._stats: Counter[str] = Counter()  # see the ``stats`` property
        # The four counters bumped for every datagram are plain ints (cheaper than a Counter
        # update, per datagram each way); ``stats`` copies them in.
        self._datagrams_in = self._bytes_in = self._datagrams_out = self._bytes_out = 0

    # ------------------------------------------------------------------ public API: reading

    @property
    def stats(self) -> Counter[str]:
        """Counters: probes, acks, suspicions, refutations, traffic, drops by reason, ..."""
        s = self._stats
        for key, value in (("datagrams_in", self._datagrams_in), ("bytes_in", self._bytes_in),
                           ("datagrams_out", self._datagrams_out), ("bytes_out", self._bytes_out)):
            if value:
                s[key] = value
        return s

    @property
    def incarnation(self) -> int:
        return self._self.incarnation

    @property
    def status(self) -> Status:
        """Our own status: ``alive``, or ``left`` after ``leave``."""
        return self._self.status

    @property
    def meta(self) -> Meta:
        return self._self.meta

    @property
    def local_health(self) -> int:
        """Lifeguard awareness score, 0 (healthy) .. awareness_max_multiplier - 1."""
        return self._awareness.score

    @property
    def view_checksum(self) -> int:
        """Sum mod 2**32 of the CRC-32s of the live members' "id\\x00incarnation"; rides on
        every ack. A sum is independent of order and is kept up to date in O(1) per change
        (sorting and hashing the whole view after every suspicion and refutation cost ~4% of
        a simulated loss run); equal views have equal sums, and two different views collide
        with probability about 2**-32."""
        return self._checksum

    def members(self) -> list[MemberInfo]:
        """Every member the view holds (self included), in all states, sorted by id."""
        return [self._members[k].info() for k in sorted(self._members)]

    def live_members(self) -> list[MemberInfo]:
        """Alive and suspect members, self included: the set placement owns partitions from."""
        return [m for m in self.members() if m.is_live]

    def member(self, node_id: str) -> MemberInfo | None:
        m = self._members.get(node_id)
        return None if m is None else m.info()

    @property
    def leave_broadcast_done(self) -> bool:
        """After ``leave``: our leave was sent at least ``gossip_fanout`` times (or to everyone)."""
        if not self._leaving:
            return False
        sent = self._queue.transmits(self.node_id)
        return sent is None or sent >= min(self.config.gossip_fanout, len(self._live_peers))

    # ------------------------------------------------------------------ public API: driving

    def join(self, seeds: Iterable[Addr], now: float) -> None:
        """Contact seed addresses (push-pull); retried with backoff while we know no one."""
        self.set_seeds(seeds)
        # We gossip our own Alive too (memberlist's setAlive does): otherwise only the seed
        # spreads our arrival, and in a small cluster its few retransmits can all miss a member,
        # which then learns of us only from anti-entropy.
        self._broadcast(self._state_message(self._self))
        self._join_seeds(now)

    def set_seeds(self, seeds: Iterable[Addr]) -> None:
        """Replace the seed addresses the next join attempts go to (a driver that finds seeds by
        DNS re-resolves after each ``JoinAttempt``). Our own address is left out."""
        self._seeds = [(h, int(p)) for h, p in seeds if (h, int(p)) != self.advertise]

    def leave(self, now: float) -> None:
        """Announce a graceful leave; probing stops, the announcement keeps being gossiped."""
        if self._leaving:
            return
        self._leaving = True
        self._probe = None
        self._set_status(self._self, LEFT, now)
        self._broadcast(Dead(self.node_id, self._self.incarnation, self.node_id))

    def update_meta(self, meta: Meta, now: float) -> None:
        """Change our metadata: raise the incarnation and gossip the new ``Alive``."""
        if self._leaving:
            raise RuntimeError("this member has left; start a new one to change metadata")
        self._check_meta(self.config, meta)
        check_outgoing(Alive(self.node_id, self._self.incarnation + 1, self.advertise, meta))
        self._self.meta = meta
        self._bump_incarnation(self._self.incarnation)

    def report_loop_lag(self, lag_s: float, now: float) -> None:
        """Driver hook: the event loop woke up ``lag_s`` late. Large lag lowers our self-trust."""
        if lag_s > self.config.loop_lag_threshold_s:
            self._stats["loop_lag_reports"] += 1
            self._awareness.apply(1)
            self._woke_at = now

    def receive_datagram(self, data: bytes, addr: Addr, now: float) -> None:
        """Process one received datagram. Never raises; invalid input is dropped and counted."""
        self._datagrams_in += 1
        self._bytes_in += len(data)
        addr = (addr[0], addr[1])
        try:
            env = self._codec.open(data)
        except Drop as drop:
            self._drop(drop.reason)
            if isinstance(drop, Notice) or drop.reason in NOTICE_REASONS:
                self._unreadable(drop, addr, now)
            return
        if env.cluster != self.config.cluster_name or env.settings != self.config.cluster_settings:
            self._mismatch(env, addr, now)
            return
        if env.sender == self.node_id:
            self._from_our_id(env, addr, now)
            return
        if not self._replay.check_and_record(env.sender, env.epoch, env.seq):
            self._drop("replayed")
            return
        if self._leaving:
            self._drop("leaving")
            return
        sender = self._members.get(env.sender)
        if sender is not None:
            sender.heard = now
        self._handle(env, addr, now)

    def handle_timer(self, now: float) -> None:
        """Run all work that is due at ``now`` (calling it early is harmless)."""
        if self._relays:
            self._expire_relays(now)
        if self._probe is not None and not self._probe.acked and not self._probe.indirect_sent \
                and now >= self._probe.timeout_at:
            self._send_indirect_probes(now)
            # Woken late (our process stalled)? Give the indirect probes their share of the
            # period before judging the target: our own slowness is no evidence against it.
            window = self._awareness.scale(self.config.probe_interval_s - self.config.probe_timeout_s)
            self._next_probe_at = max(self._next_probe_at, now + window)
        if not self._leaving and now >= self._next_probe_at:
            self._finish_probe(now)
            self._start_probe(now)
        if self._suspicions:
            if self._awareness.enabled:
                self._last_chance_pings(now)
            threshold = self.config.loop_lag_threshold_s
            for node_id in [n for n, s in self._suspicions.items() if s.deadline <= now]:
                s = self._suspicions[node_id]
                if self._awareness.enabled and (now - s.deadline > threshold or now - self._woke_at < threshold):
                    # Local-health-aware verdict (our addition to Lifeguard IV-A): the timer
                    # fired late, or we have just woken from a stall the driver reported, so
                    # the suspect's refutation may be sitting unread in our socket buffer. Read
                    # first, judge one probe interval later. Measured in the `stalls` scenario
                    # (N=64, 300 s): 8 of 10 false deaths were declared by a member at the
                    # instant it woke from its own stall.
                    self._stats["verdicts_deferred"] += 1
                    s.defer(now + self.config.probe_interval_s)
                    continue
                self._suspicion_expired(node_id, now)
        if self._queue and now >= self._next_gossip_at:
            self._gossip(now)
        if self._next_join_at is not None and now >= self._next_join_at:
            self._join_seeds(now)
        if not self._leaving and now >= self._next_dead_retry_at:
            self._retry_dead_and_reclaim(now)

    def get_timer(self) -> float | None:
        """The next time ``handle_timer`` has work to do (None: only input can create work)."""
        # Called after every input, so no lists: a running minimum.
        t = math.inf
        if self._relays:
            t = min(r.deadline for r in self._relays.values())
        if self._suspicions:
            # A verdict, or the last-chance ping one probe timeout before it (Lifeguard only).
            ahead = self.config.probe_timeout_s if self._awareness.enabled else 0.0
            for s in self._suspicions.values():
                due = s.deadline if s.last_chance_sent else s.deadline - ahead
                if due < t:
                    t = due
        if not self._leaving:
            t = min(t, self._next_probe_at, self._next_dead_retry_at)
            p = self._probe
            if p is not None and not p.acked and not p.indirect_sent and p.timeout_at < t:
                t = p.timeout_at
        if self._queue and self._next_gossip_at < t:
            t = self._next_gossip_at
        if self._next_join_at is not None and self._next_join_at < t:
            t = self._next_join_at
        return None if t == math.inf else t

    def datagrams_to_send(self) -> list[tuple[bytes, Addr]]:
        """Drain the outbox: (datagram, destination address) pairs, each <= mtu_bytes."""
        out, self._outbox = self._outbox, []
        return out

    def next_event(self) -> Event | None:
        """Pop the oldest pending event, or None."""
        return self._events.popleft() if self._events else None

    def events(self) -> Iterator[Event]:
        """Drain all pending events."""
        while self._events:
            yield self._events.popleft()

    # ------------------------------------------------------------------ receiving

    def _drop(self, reason: str) -> None:
        self._stats["dropped"] += 1
        self._stats["dropped_" + reason] += 1

    def _unreadable(self, drop: Drop, addr: Addr, now: float) -> None:
        """A datagram we could not read for its keys or version, or a notice that ours was not.

        We tell its sender why (a notice; never in answer to a notice, so never a loop). A
        joiner keeps what it hears from its seeds for the next ``JoinAttempt``. A notice stops
        a joiner (``JoinRefused``) only if it holds no keys - then everything it receives is
        unauthenticated anyway - and only when it says the cluster encrypts or speaks another
        protocol version; a member with keys never lets an unauthenticated datagram stop it."""
        if isinstance(drop, Notice):
            hint = _NOTICE_HINTS[drop.about].format(theirs=drop.version, ours=PROTOCOL_VERSION)
            if self._next_join_at is None:
                return
            self._join_heard[addr] = hint
            if not self.keyring.enabled and not self._had_peer and drop.about in ("unencrypted", "unknown_version"):
                self._events.append(JoinRefused(addr, f"the member at {addr[0]}:{addr[1]}: {hint}; start this "
                                                      "node with the cluster's gossip keys and version", now))
            return
        if self._next_join_at is not None:
            self._join_heard[addr] = _JOIN_DROP_HINTS[drop.reason]
        if self._leaving or now - self._notified.get(addr, -math.inf) < _NOTICE_INTERVAL_S:
            return
        if len(self._notified) > 4096:
            self._notified.clear()
        self._notified[addr] = now
        self._stats["notices_sent"] += 1
        self._emit(encode_notice(drop.reason), addr)

    def _mismatch(self, env: Envelope, addr: Addr, now: float) -> None:
        """A datagram from another cluster, or from a member with other cluster settings.

        Only a newcomer is refused: we answer a join (a push-pull asking for a reply) with
        ``Refuse`` naming both sides' values, and report ``RefusedPeer``; a ``Refuse`` stops us
        (``JoinRefused``) only while we never had a live peer. Deciding by who asked and who
        already belongs keeps a healthy member running when a misconfigured process contacts
        it, and equally when its own join retries reach a seed address where such a process now
        runs (issue 16: both used to stop)."""
        name_differs = env.cluster != self.config.cluster_name
        self._drop("wrong_cluster" if name_differs else "settings_mismatch")
        for msg in env.messages:
            if isinstance(msg, Refuse):
                if self._had_peer or self._leaving:
                    self._stats["refusals_ignored"] += 1
                else:
                    self._events.append(JoinRefused(addr, msg.reason, now))
            elif isinstance(msg, PushPull) and msg.reply and self._may_reply_push_pull(addr, msg.sync_id, now):
                if name_differs:
                    what, ours, theirs = "cluster name differs", self.config.cluster_name, env.cluster
                else:
                    what, ours, theirs = "cluster settings differ", self.config.cluster_settings, env.settings
                reason = (f"{what}: member {self.node_id!r} has {ours!r}, {env.sender!r} has {theirs!r}; "
                          "start it with the cluster's values")[:512]  # wire limit for texts
                self._stats["joins_refused"] += 1
                self._events.append(RefusedPeer(addr, env.sender, reason, now))
                self._send(addr, [self._codec.encode_message(Refuse(reason))], piggyback=False)

    def _handle(self, env: Envelope, addr: Addr, now: float) -> None:
        accusation: Suspect | None = None
        for msg in env.messages:
            if isinstance(msg, Suspect) and msg.node == self.node_id:
                accusation = msg
        # A ping that carries a suspicion of us (Lifeguard buddy system; plain SWIM keeps gossip
        # order): refute before acking, so the ack itself carries the refutation (see _on_ping).
        accused = accusation is not None and self._awareness.enabled \
            and any(isinstance(m, Ping) for m in env.messages)
        if accused and accusation is not None:  # (the second test is for the type checker)
            self._on_suspect(accusation, now)
        in_sync: PushPull | None = None
        for msg in env.messages:
            if isinstance(msg, Ping):
                self._on_ping(msg, env.sender, addr, now, accused)
            elif isinstance(msg, Ack):
                self._on_ack(msg, env, addr, now)
            elif isinstance(msg, Alive):
                self._on_alive(msg, now)
            elif isinstance(msg, Suspect):
                self._on_suspect(msg, now)
            elif isinstance(msg, Dead):
                self._on_dead(msg, now, synced_by=env.sender if in_sync else None)
            elif isinstance(msg, PushPull):
                in_sync = msg
            elif isinstance(msg, Nack):
                if self._probe is not None and self._probe.seq == msg.seq:
                    self._probe.nacks += 1
                    self._stats["nacks_received"] += 1
            elif isinstance(msg, PingReq):
                self._on_ping_req(msg, addr, now)
            else:  # Refuse with equal settings: nothing to refuse
                self._stats["unexpected_refuses"] += 1
        if in_sync is not None:
            self._stats["push_pull_received"] += 1
            if in_sync.reply and self._may_reply_push_pull(addr, in_sync.sync_id, now):
                self._send_state(addr, reply=False, now=now)

    def _on_ping(self, msg: Ping, sender: str, addr: Addr, now: float, accused: bool = False) -> None:
        if msg.target != self.node_id:
            # Another process now lives at the address we hold for ``msg.target``.
            self._stats["misdirected_pings"] += 1
            return
        encode = self._codec.encode_message
        head = [encode(Ack(msg.seq, self.view_checksum))]
        if accused:
            # The pinger suspects us: our refutation goes in the ack itself rather than from
            # the gossip queue, whose retransmit limit runs out when a member that woke from a
            # stall answers a backlog of such pings at once.
            me = self._self
            head.append(encode(Alive(self.node_id, me.incarnation, me.addr, me.meta)))
        known = self._members.get(sender)
        if known is not None and known.status in (SUSPECT, DEAD):
            # Tell a member we hold as suspect/dead what we believe, so it can refute at once.
            head.append(encode(self._state_message(known)))
        self._send(addr, head)
        if known is None and not self._leaving \
                and now - self._last_unknown_sync_at >= self.config.probe_interval_s:
            # A member we have never heard of probes us: its arrival's gossip missed us (or we
            # reclaimed it while it was away). Exchange full state now rather than waiting for a
            # checksum mismatch; at most one such exchange per probe interval.
            self._last_unknown_sync_at = now
            self._stats["unknown_pinger_syncs"] += 1
            self._send_state(addr, reply=True, now=now)

    def _on_ack(self, msg: Ack, env: Envelope, addr: Addr, now: float) -> None:
        relay = self._relays.pop(msg.seq, None)
        if relay is not None:
            self._send(relay.requester, [self._codec.encode_message(Ack(relay.seq, msg.checksum))])
            return
        if msg.seq == self._dead_ping_seq:
            # A member we hold as dead answers: the network healed or it is back. Exchange full
            # state so both sides' refutations and views merge (partition healing).
            self._dead_ping_seq = None
            self._stats["dead_member_answered"] += 1
            self._send_state(addr, reply=True, now=now)
            return
        probe = self._probe
        if probe is None or probe.seq != msg.seq or probe.acked:
            self._stats["stale_acks"] += 1  # late (after the probe ended) or duplicated
            return
        probe.acked = True
        self._stats["acks_received"] += 1
        self._awareness.apply(-1)
        # Anti-entropy (module docstring); the scan for updates riding with the ack comes last,
        # so only a checksum mismatch pays for it.
        if env.sender == probe.target and msg.checksum != self.view_checksum and not self._queue \
                and now - self._last_push_pull_at >= self.config.push_pull_min_interval_s \
                and not any(isinstance(m, (Alive, Suspect, Dead)) for m in env.messages):
            self._stats["anti_entropy_syncs"] += 1
            self._send_state(addr, reply=True, now=now)

    def _on_ping_req(self, msg: PingReq, addr: Addr, now: float) -> None:
        seq = self._next_seq()
        # Nack at 80% of the probe timeout: the requester sent the ping-req after its own probe
        # timeout and waits for the rest of its period (interval - timeout), so a nack sent
        # after a full timeout would arrive too late to count (Lifeguard IV-A needs it to).
        self._relays[seq] = _Relay(addr, msg.seq, now + 0.8 * self.config.probe_timeout_s)
        self._stats["relayed_pings"] += 1
        self._send(msg.target_addr, [self._codec.encode_message(Ping(seq, msg.target))])

    def _expire_relays(self, now: float) -> None:
        for seq in [s for s, r in self._relays.items() if r.deadline <= now]:
            relay = self._relays.pop(seq)
            self._stats["nacks_sent"] += 1
            self._send(relay.requester, [self._codec.encode_message(Nack(relay.seq))])

    # ------------------------------------------------------------------ state updates

    def _on_alive(self, msg: Alive, now: float) -> None:
        if msg.node == self.node_id:
            me = self._self
            # (We hold ourselves alive: a member that left handles no gossip.)
            if supersedes(ALIVE, msg.incarnation, ALIVE, me.incarnation) or (
                    msg.incarnation == me.incarnation and (msg.addr, msg.meta) != (me.addr, me.meta)):
                # Someone holds a newer or different record of us (e.g. from before a restart).
                if msg.addr != me.addr:
                    self._foreign_claim(msg.addr, now)
                self._bump_incarnation(msg.incarnation)
            return
        m = self._members.get(msg.node)
        if m is None:
            m = _Member(msg.node, msg.addr, msg.meta, msg.incarnation, ALIVE, now)
            self._members[msg.node] = m
            self._index_live(msg.node)
            self._live_changed(m)
            self._set_changed(m, JOINED, now)
            self._broadcast(msg)
            return
        if not supersedes(ALIVE, msg.incarnation, m.status, m.incarnation):
            return
        if msg.addr != m.addr and m.status in (ALIVE, SUSPECT):
            # A live member claimed from a second address: another process with its id (a
            # twin), not a move - keep the address we have, as memberlist does ("conflicting
            # address", state.go aliveNode). Taking it made every member flip the record
            # between the two processes while the twin ran (its HTTP address in their
            # snapshots, the real member's lease lost). A member that really moved is taken
            # at its new address once its old record is dead (its old address stops answering).
            self._stats["address_conflicts"] += 1
            held = self._claims.get(msg.node)
            if held is None or msg.incarnation > held.incarnation:
                self._claims[msg.node] = msg  # taken if the record at the old address dies
            if now - self._claims_told.get(msg.node, float("-inf")) >= self.config.probe_interval_s:
                # Tell the member we hold (at its known address: nothing is sent to the claimed
                # one): it sees its id claimed elsewhere, asks that address, and both processes
                # report the conflict (``_foreign_claim``), as when the claim was gossiped.
                self._claims_told[msg.node] = now
                self._send(m.addr, [self._codec.encode_message(msg)], piggyback=False)
            return
        self._claims.pop(msg.node, None)
        old_status = m.status
        changed = (msg.addr, msg.meta) != (m.addr, m.meta)
        m.incarnation, m.addr, m.meta = msg.incarnation, msg.addr, msg.meta
        self._suspicions.pop(msg.node, None)
        if old_status != ALIVE:
            self._set_status(m, ALIVE, now)
        self._live_changed(m)
        if old_status in (DEAD, LEFT):
            self._set_changed(m, JOINED, now)
        else:
            if old_status == SUSPECT:
                self._set_changed(m, ALIVE, now)
            if changed:
                self._set_changed(m, UPDATED, now)
        self._broadcast(msg)

    def _on_suspect(self, msg: Suspect, now: float) -> None:
        if msg.node == self.node_id:
            if supersedes(SUSPECT, msg.incarnation, ALIVE, self._self.incarnation):
                self._refute(msg.incarnation)
            return
        m = self._members.get(msg.node)
        if m is None or not supersedes(SUSPECT, msg.incarnation, m.status, m.incarnation):
            return
        current = self._suspicions.get(msg.node)
        if m.status == SUSPECT and current is not None and msg.incarnation == current.incarnation:
            if current.confirm(msg.sender):
                self._stats["confirmations"] += 1
                # Pass independent confirmations on (memberlist does): they must reach the
                # members whose timers they shorten. While the suspicion is still queued the
                # confirmation replaces it within its remaining budget; only a confirmation
                # that arrives later gets a fresh budget (a reset for every confirmation
                # cost ~10% more datagrams per failure, for no faster detection).
                blob = self._codec.encode_message(msg)
                if msg.node in self._queue:
                    self._queue.refine(msg.node, blob)
                else:
                    self._queue.push(msg.node, blob)
            return
        self._start_suspicion(m, msg.incarnation, msg.sender, now)
        self._broadcast(msg)

    def _on_dead(self, msg: Dead, now: float, synced_by: str | None) -> None:
        leaving = msg.sender == msg.node
        update: Status = LEFT if leaving else DEAD
        if synced_by is not None and not leaving:
            # Full state says dead: only suspect (memberlist mergeState), so a stale view cannot
            # kill a live member; a live member then refutes the suspicion.
            self._on_suspect(Suspect(msg.node, msg.incarnation, synced_by), now)
            return
        if msg.node == self.node_id:
            if supersedes(update, msg.incarnation, ALIVE, self._self.incarnation):
                if not leaving and not self._leaving:  # an old leave of ours is no accusation
                    self._events.append(DeclaredDead(msg.incarnation, now))
                self._refute(msg.incarnation)
            return
        m = self._members.get(msg.node)
        if m is None or not supersedes(update, msg.incarnation, m.status, m.incarnation):
            return
        self._suspicions.pop(msg.node, None)
        m.incarnation = msg.incarnation
        self._set_status(m, update, now)
        self._set_changed(m, m.status, now)
        self._broadcast(msg)
        claim = self._claims.pop(msg.node, None)
        if claim is not None and claim.incarnation > m.incarnation:
            # The process that claimed this id from another address outlived the record we
            # kept: a restart at a new address (its claim is not resent, it was refused).
            self._on_alive(claim, now)

    def _start_suspicion(self, m: _Member, incarnation: int, accuser: str, now: float) -> None:
        n = self._live_count()
        cfg = self.config
        min_s = cfg.suspicion_min_s(n)
        if cfg.lifeguard:
            # Only members other than the suspect and the accuser can confirm
            # (memberlist state.go suspectNode: k = 0 when n - 2 < k).
            k = min(cfg.suspicion_confirmations, max(0, n - 2))
            max_s = cfg.suspicion_max_s(n)
        else:
            k, max_s = 0, min_s  # plain SWIM: one fixed suspicion timeout
        was_alive = m.status == ALIVE
        m.incarnation = incarnation
        self._live_changed(m)
        if was_alive:
            self._set_status(m, SUSPECT, now)
        self._suspicions[m.node_id] = Suspicion(incarnation=incarnation, accuser=accuser,
                                                start=now, k=k, min_s=min_s, max_s=max_s)
        self._stats["suspicions"] += 1
        if cfg.lifeguard and accuser != self.node_id and was_alive and n > 2 and \
                self._rng.random() < cfg.suspicion_reprobe_members / (n - 2):
            # Probe the suspect next (see MembershipConfig.suspicion_reprobe_members).
            self._probe_next.append(m.node_id)
            self._stats["suspect_reprobes"] += 1
        if was_alive:
            self._set_changed(m, SUSPECT, now)

    def _last_chance_pings(self, now: float) -> None:
        """One probe timeout before a suspicion would expire, ping the suspect ourselves, with
        the suspicion attached (our addition to Lifeguard's buddy system, IV-C). A member that
        was frozen answers as soon as it wakes, and the ack carries its refutation straight
        to us; relayed gossip of that refutation may come too late for a member whose
        verdict is due within a gossip round or two of the wake-up. One datagram per held
        suspicion that is still open at that point (none when refutations arrive in time)."""
        ahead = self.config.probe_timeout_s
        for node_id, s in self._suspicions.items():
            if s.last_chance_sent or now < s.deadline - ahead:
                continue
            s.last_chance_sent = True
            m = self._members.get(node_id)
            if m is None or m.status != SUSPECT:
                continue
            self._stats["last_chance_pings"] += 1
            head: list[Message] = [Ping(self._next_seq(), node_id), Suspect(node_id, m.incarnation, self.node_id)]
            self._send(m.addr, [self._codec.encode_message(x) for x in head])

    def _suspicion_expired(self, node_id: str, now: float) -> None:
        s = self._suspicions.pop(node_id)
        m = self._members.get(node_id)
        if m is None or m.status != SUSPECT or m.incarnation != s.incarnation:
            return
        self._stats["deaths_declared"] += 1
        self._on_dead(Dead(node_id, m.incarnation, self.node_id), now, synced_by=None)

    def _foreign_claim(self, addr: Addr, now: float) -> None:
        """A record of us at another address made us raise our incarnation. Once is a restart
        (the cluster still held our old address); again and again within a minute is another
        live process with our id, raising its incarnation over ours each time (memberlist
        logs such conflicts; we report them as an event, at most one a minute).

        That takes several rounds of gossip (tens of seconds when retransmits run out), so we
        also ask the address directly: a ping from us, naming us as its target. Our old
        process is gone and answers nothing; a process with another id ignores a ping for
        someone else; a live twin receives a datagram from its own id with an epoch not its
        own, and reports the conflict at once (``_from_our_id``). Each side of a twin gets a
        claim from the other's refutation, so both report within a round trip or two."""
        claims = self._foreign_claims
        claims.append(now)
        while claims and claims[0] < now - _ID_CONFLICT_WINDOW_S:
            claims.popleft()
        if len(claims) >= _ID_CONFLICT_BUMPS:
            self._report_id_conflict(addr, now)
        if not self._leaving:
            self._send(addr, [self._codec.encode_message(Ping(self._next_seq(), self.node_id))], piggyback=False)

    def _from_our_id(self, env: Envelope, addr: Addr, now: float) -> None:
        """A datagram that names us as its sender: our own, looped back, or - with an epoch
        that is not ours, from another address - another live process with our id."""
        self._drop("from_self")
        if env.epoch != self._codec.epoch and addr != self.advertise and self._report_id_conflict(addr, now) \
                and not self._leaving:
            # Tell the twin the same way, in case its claim has not reached it (once a minute,
            # like the report, so two twins do not ping each other in a loop).
            self._send(addr, [self._codec.encode_message(Ping(self._next_seq(), self.node_id))], piggyback=False)

    def _report_id_conflict(self, addr: Addr, now: float) -> bool:
        if now - self._id_conflict_at < _ID_CONFLICT_WINDOW_S:
            return False
        self._id_conflict_at = now
        self._stats["id_conflicts"] += 1
        self._events.append(IdConflict(addr, len(self._foreign_claims), now))
        return True

    def _refute(self, accused_incarnation: int) -> None:
        if self._leaving:
            return
        self._stats["refutations"] += 1
        # Having to refute means others could not reach us in time: we may be the slow one
        # (Lifeguard IV-A).
        self._awareness.apply(1)
        self._bump_incarnation(accused_incarnation)

    def _bump_incarnation(self, at_least: int) -> None:
        me = self._self
        me.incarnation = max(me.incarnation, at_least) + 1
        self._live_changed(me)
        self._broadcast(Alive(self.node_id, me.incarnation, me.addr, me.meta))

    def _set_changed(self, m: _Member, kind: EventKind, now: float) -> None:
        self._events.append(MemberEvent(kind, m.info(), now))

    def _set_status(self, m: _Member, status: Status, now: float) -> None:
        """The one place a member's status changes (keeps the indexes in step)."""
        was_live = m.status in LIVE_STATUSES
        m.status = status
        m.since = now
        self._live_changed(m)
        if m is self._self:
            return
        if status in (DEAD, LEFT):
            self._reclaim_from = min(self._reclaim_from, now)
        if status == DEAD:
            self._dead_since[m.node_id] = now
        else:
            self._dead_since.pop(m.node_id, None)
        if status in LIVE_STATUSES and not was_live:
            self._index_live(m.node_id)
        elif was_live and status not in LIVE_STATUSES:
            # swap-remove from the sampling list
            pos = self._live_pos.pop(m.node_id)
            last = self._live_peers.pop()
            if last != m.node_id:
                self._live_peers[pos] = last
                self._live_pos[last] = pos
            ring = self._ring
            del ring[bisect_left(ring, _ring_key(m.node_id))]

    def _live_changed(self, m: _Member) -> None:
        """``m``'s status or incarnation may have changed: keep the checksum's entries in step
        (the checksum changes only if they changed; alive <-> suspect does not)."""
        entry = f"{m.node_id}\x00{m.incarnation}" if m.status in LIVE_STATUSES else None
        old = self._live_entries.get(m.node_id)
        if entry == old:
            return
        checksum = self._checksum
        if old is not None:
            checksum -= _entry_hash(old)
            if entry is None:
                del self._live_entries[m.node_id]
        if entry is not None:
            checksum += _entry_hash(entry)
            self._live_entries[m.node_id] = entry
        self._checksum = checksum & 0xFFFFFFFF

    def _index_live(self, node_id: str) -> None:
        self._had_peer = True
        self._live_pos[node_id] = len(self._live_peers)
        self._live_peers.append(node_id)
        insort(self._ring, _ring_key(node_id))

    def _live_count(self) -> int:
        """Live members, us included (N in the SWIM/Lifeguard formulas)."""
        return len(self._live_peers) + (self._self.status in LIVE_STATUSES)

    def check_invariants(self) -> None:
        """Raise AssertionError if the internal indexes disagree with the view (for simulators
        and tests that check invariants after every step)."""
        live = {k for k, m in self._members.items() if m is not self._self and m.status in LIVE_STATUSES}
        assert set(self._live_peers) == live and len(self._live_peers) == len(live), "live index"
        assert all(self._live_peers[i] == k for k, i in self._live_pos.items()), "live positions"
        assert set(self._dead_since) == {k for k, m in self._members.items() if m.status == DEAD}, "dead index"
        assert set(self._suspicions) <= {k for k, m in self._members.items() if m.status == SUSPECT}, "suspicions"
        assert self._self.status in (ALIVE, LEFT), "self status"
        assert self._live_entries == {k: f"{k}\x00{m.incarnation}" for k, m in self._members.items()
                                      if m.status in LIVE_STATUSES}, "checksum entries"
        assert self._checksum == sum(map(_entry_hash, self._live_entries.values())) & 0xFFFFFFFF, "checksum"
        assert self._ring == sorted(_ring_key(k) for k in live | {self.node_id}), "probe ring"

    def _broadcast(self, msg: Alive | Suspect | Dead) -> None:
        self._queue.push(msg.node, self._codec.encode_message(msg))

    def _state_message(self, m: _Member) -> Alive | Suspect | Dead:
        if m.status == ALIVE:
            return Alive(m.node_id, m.incarnation, m.addr, m.meta)
        if m.status == SUSPECT:
            # Name the original accuser: relaying a suspicion is no independent confirmation.
            s = self._suspicions.get(m.node_id)
            return Suspect(m.node_id, m.incarnation, s.accuser if s is not None else self.node_id)
        return Dead(m.node_id, m.incarnation, m.node_id if m.status == LEFT else self.node_id)

    # ------------------------------------------------------------------ probing

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _next_probe_target(self, now: float) -> _Member | None:
        while self._probe_next:  # a suspect we heard of (suspicion_reprobe_members)
            m = self._members.get(self._probe_next.pop())
            if m is not None and m.status in LIVE_STATUSES:
                return m
        ring = self._ring
        n = len(ring)
        if n < 2:
            return None
        # See "Probe schedule" in the module docstring.
        period = math.floor((now + self._clock_offset_s) / self.config.probe_interval_s)
        me = bisect_left(ring, self._ring_self)
        return self._members[ring[(me + 1 + period % (n - 1)) % n][1]]

    def _start_probe(self, now: float) -> None:
        self._next_probe_at = now + self._awareness.scale(self.config.probe_interval_s)
        target = self._next_probe_target(now)
        if target is None:
            return
        self._probe = _Probe(self._next_seq(), target.node_id,
                             now + self._awareness.scale(self.config.probe_timeout_s))
        encode = self._codec.encode_message
        head = [encode(Ping(self._probe.seq, target.node_id))]
        if self.config.lifeguard and target.status == SUSPECT:
            # Buddy system (Lifeguard IV-C): tell the suspect it is suspected.
            head.append(encode(Suspect(target.node_id, target.incarnation, self.node_id)))
        self._stats["probes_sent"] += 1
        self._send(target.addr, head)

    def _send_indirect_probes(self, now: float) -> None:
        probe = self._probe
        assert probe is not None
        probe.indirect_sent = True
        target = self._members.get(probe.target)
        if target is None:
            return
        helpers = [m for m in self._members.values()
                   if m is not self._self and m is not target and m.status == ALIVE]
        helpers = _sample(self._rng, helpers, min(self.config.indirect_checks, len(helpers)))
        probe.nacks_expected = len(helpers)
        blob = self._codec.encode_message(PingReq(probe.seq, target.node_id, target.addr))
        for helper in helpers:
            self._stats["ping_reqs_sent"] += 1
            self._send(helper.addr, [blob])

    def _finish_probe(self, now: float) -> None:
        probe, self._probe = self._probe, None
        if probe is None or probe.acked:
            return
        self._stats["probe_failures"] += 1
        # Lifeguard IV-A (memberlist state.go probeNode): missing nacks mean our own network or
        # process is the likely problem; no helpers at all counts as one failure.
        if probe.nacks_expected:
            self._awareness.apply(probe.nacks_expected - probe.nacks)
        else:
            self._awareness.apply(1)
        m = self._members.get(probe.target)
        if m is None or m.status not in LIVE_STATUSES:
            return
        msg = Suspect(m.node_id, m.incarnation, self.node_id)
        self._on_suspect(msg, now)

    # ------------------------------------------------------------------ gossip and state exchange

    def _send(self, addr: Addr, head: Sequence[bytes], piggyback: bool = True) -> None:
        """Send ``head`` (pre-encoded messages) to ``addr``, filling the rest with gossip."""
        blobs = list(head)
        if piggyback and self._queue:
            budget = self._codec.capacity() - sum(map(Codec.message_cost, head))
            blobs += self._queue.take(budget, self._retransmit_limit())
        self._emit(self._codec.seal(blobs), addr)

    def _emit(self, datagram: bytes, addr: Addr) -> None:
        self._datagrams_out += 1
        self._bytes_out += len(datagram)
        self._outbox.append((datagram, addr))

    def _retransmit_limit(self) -> int:
        n = self._live_count()
        limit = self._retransmit_limits.get(n)
        if limit is None:
            limit = self._retransmit_limits[n] = self.config.retransmit_limit(n)
        return limit

    def _gossip(self, now: float) -> None:
        self._next_gossip_at = now + self.config.gossip_interval_s
        horizon = now - self.config.gossip_to_dead_s
        peers = self._live_peers
        if self._dead_since:
            peers = peers + [k for k, since in self._dead_since.items() if since >= horizon]
        capacity, limit = self._codec.capacity(), self._retransmit_limit()
        for peer_id in _sample(self._rng, peers, min(self.config.gossip_fanout, len(peers))):
            peer = self._members[peer_id]
            blobs = self._queue.take(capacity, limit)
            if not blobs:
                break
            self._stats["gossip_datagrams"] += 1
            self._emit(self._codec.seal(blobs), peer.addr)

    def _send_state(self, addr: Addr, *, reply: bool, now: float) -> None:
        """Send our full state to ``addr`` in as many datagrams as needed (push-pull)."""
        self._last_push_pull_at = now
        self._stats["push_pull_sent"] += 1
        head = self._codec.encode_message(PushPull(self._rng.getrandbits(32), reply))
        capacity = self._codec.capacity() - self._codec.message_cost(head)
        chunk: list[bytes] = [head]
        room = capacity
        for m in self._members.values():
            blob = self._codec.encode_message(self._state_message(m))
            cost = self._codec.message_cost(blob)
            if cost > capacity:
                self._drop("record_over_mtu")
                continue
            if cost > room:
                self._emit(self._codec.seal(chunk), addr)
                chunk, room = [head], capacity
            chunk.append(blob)
            room -= cost
        self._emit(self._codec.seal(chunk), addr)

    def _may_reply_push_pull(self, addr: Addr, sync_id: int, now: float) -> bool:
        last = self._push_pull_replies.get(addr)
        if last is not None and (last[1] == sync_id or now - last[0] < _PUSH_PULL_REPLY_GUARD_S):
            return False
        if len(self._push_pull_replies) > 4096:
            self._push_pull_replies.clear()
        self._push_pull_replies[addr] = (now, sync_id)
        return True

    def _join_seeds(self, now: float) -> None:
        if self._live_peers or self._leaving:
            self._join_attempts = 0
        if not self._seeds or self._live_peers or self._leaving:
            self._next_join_at = None
            return
        config = self.config
        if self._next_join_at is not None:  # a retry: the previous attempt got no member
            self._join_attempts += 1
            wait = min(config.join_retry_max_interval_s,
                       config.join_retry_interval_s * 2 ** min(self._join_attempts, 32))
            heard = "; ".join(f"{h}:{p}: {why}" for (h, p), why in sorted(self._join_heard.items()))
            self._join_heard.clear()
            self._events.append(JoinAttempt(self._join_attempts, tuple(self._seeds), heard or "no answer",
                                            now + wait, now))
        else:
            wait = config.join_retry_interval_s
        for seed in self._seeds:
            self._stats["join_attempts"] += 1
            self._send_state(seed, reply=True, now=now)
        self._next_join_at = now + wait

    def _retry_dead_and_reclaim(self, now: float) -> None:
        self._next_dead_retry_at = now + self.config.dead_retry_interval_s
        horizon = now - self.config.dead_reclaim_s
        if self._reclaim_from < horizon:  # someone may be due: scan (rarely)
            for node_id in [k for k, m in self._members.items()
                            if m.status in (DEAD, LEFT) and m.since < horizon]:
                del self._members[node_id]
                self._dead_since.pop(node_id, None)
            self._reclaim_from = min((m.since for m in self._members.values() if m.status in (DEAD, LEFT)),
                                     default=math.inf)
        if self._dead_since:
            # A single ping (not the full state) to one dead member; an ack triggers push-pull.
            target = self._members[self._rng.choice(list(self._dead_since))]
            self._dead_ping_seq = self._next_seq()
            self._stats["dead_retries"] += 1
            self._send(target.addr, [self._codec.encode_message(
                Ping(self._dead_ping_seq, target.node_id))], piggyback=False)
        if self._next_join_at is None and self._seeds:
            self._join_seeds(now)

    @staticmethod
    def _check_meta(config: MembershipConfig, meta: Meta) -> None:
        size = len(encode_meta(meta))
        if size > config.meta_max_bytes:
            raise ValueError(f"metadata is {size} bytes, more than meta_max_bytes={config.meta_max_bytes}")
