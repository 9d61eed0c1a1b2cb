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
less regular (a target is probed twice or not at all in a period), never stop probing. The
period needs a clock the members share: the driver passes ``clock_offset_s`` such that
``now + clock_offset_s`` is Unix time (NTP keeps that within milliseconds; the simulator's clock
is shared).

Suspicion (SWIM section 4.2). A suspect is still a member (it keeps its partitions). Members
are ordered by incarnation numbers that only the member itself raises: hearing that it is
suspected or dead, a member refutes by raising its incarnation and gossiping ``Alive``.
Precedence: ``Alive(i)`` beats any state with an incarnation < i; ``Suspect(i)`` beats
``Alive(j <= i)``; ``Dead(i)`` beats ``Alive``/``Suspect`` with j <= i (the table
``status.PRECEDENCE``, with its sources). A suspicion turns into
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
and least-sent first, each at most ``retransmit_mult * ceil(log10(N+1))`` times. While some update is within
the part of that budget gossip rounds may push (an ``Alive`` all of it, a suspicion one round's
worth, a death two: ``suspect_push_rounds``, ``dead_push_rounds``) the queue is also pushed
every ``gossip_interval_s`` to ``gossip_fanout`` random members (memberlist's gossip loop),
including recently dead ones so they can refute; the first round after a quiet spell goes out at
once. An idle cluster only probes.

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
refusal stops only a member that never had a live peer (``joining.py``). ``leave()`` gossips
``Dead(self)`` and stops probing; the driver keeps sending until ``leave_broadcast_done``. Every
``dead_retry_interval_s`` one random dead member's address gets a ping, from each member with
probability dead / live (Serf's reconnect); if it answers, a push-pull follows, so clusters split
by a network partition merge after it heals.

Bad input. Datagrams are validated strictly (``wire.py``); anything invalid, from another
cluster, with different cluster settings, replayed, or not decryptable with any key of the
keyring is dropped and counted in ``stats["dropped_<reason>"]`` (replays only with keys: see
"Forged datagrams" below); ``receive_datagram`` never raises and never applies part of an
invalid datagram. A datagram we cannot read for its keys or protocol version is answered with
a notice saying why (``wire.py``; ``joining.py``).

Forged datagrams (issue 31). Without keys nothing authenticates a datagram: anyone who can
send us UDP can gossip in any member's name. What we guarantee is that nothing such a datagram
carries does lasting damage that honest traffic cannot repair. The replay filter, which
authenticates nothing without keys and was poisoned by one envelope with a member's epoch and a
huge seq, is used only with keys; above ``INCARNATION_SOFT_MAX`` an update moves a record by
one, or by up to ``INCARNATION_STEP_MAX`` once a second (``status.bounded_incarnation``), so no
flood of updates leaves a member unable to refute; a refusal to a stranger is anonymous and a keyless
joiner stops only on a refusal or notice from a seed it contacted (``joining.py``); a member
that holds a member as left and gets its ping says so, so a forged leave is refuted within a
probe. What stays possible without keys (tests/test_forged_datagrams.py measures each): a
forged ``Dead`` kills its subject at the members that get it until the refutation arrives
(about one gossip round), and makes the subject report ``DeclaredDead``; a forged ``Suspect``
or ``Alive`` is refuted as SWIM intends; a stranger who knows the cluster name can join, read
the full state, and add members that are removed only when their suspicion runs out.

Layout
======

``Swim`` is a facade: it owns the inputs and outputs and routes each message and timer to the
part that holds the state it concerns (composition, as memberlist splits its one ``Memberlist``
over state.go, net.go and friends, and aioquic its connection over recovery and streams). Each
part uses only parts above it in this list; the one step against that order, a failed probe's
accusation applied by ``Updates``, is taken by ``Swim.handle_timer``:

``view.View``                     member table, live index, view checksum, probe ring
``dissemination.Dissemination``   outbox, piggyback queue, gossip rounds, push-pull
``probing.Prober``                probes, ping-req relays, nacks, pings to dead members
``conflicts.Conflicts``           duplicate ids and address conflicts
``updates.Updates``               Alive/Suspect/Dead by ``status.PRECEDENCE``, suspicions, refutation
``joining.Joiner``                seeds, join retries, refusals, notices

This module keeps the receive path, the timer schedule and the public API.
"""


from __future__ import annotations

import math
import random
from collections import Counter, deque
from collections.abc import Iterable, Iterator

from .awareness import Awareness
from .config import MembershipConfig
from .conflicts import Conflicts
from .dissemination import Dissemination
from .joining import Joiner
from .messages import (
    Ack,
    Addr,
    Alive,
    Dead,
    Event,
    MemberInfo,
    Meta,
    Nack,
    Ping,
    PingReq,
    PushPull,
    Suspect,
)
from .probing import Prober
from .status import ALIVE, LEFT, LIVE_STATUSES, SUSPECT, Status
from .suspicion import Suspicion
from .updates import Updates
from .view import Member, View
from .wire import NOTICE_REASONS, Codec, Drop, Envelope, Keyring, Notice, ReplayFilter, check_outgoing, encode_meta

__all__ = ["Swim"]


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
        self._self = Member(node_id, self.advertise, meta, incarnation, ALIVE, now)  # our record in the view
        self._view = View(self._self)
        self._stats: Counter[str] = Counter()  # see the ``stats`` property
        self._events: deque[Event] = deque()
        self._awareness = Awareness(config.awareness_max_multiplier, enabled=config.lifeguard)
        self.keyring = Keyring(config.keys)
        self._codec = Codec(cluster=config.cluster_name, settings=config.cluster_settings,
                            sender=node_id, epoch=rng.getrandbits(63), keyring=self.keyring,
                            mtu_bytes=config.mtu_bytes, max_receive_bytes=config.max_receive_bytes)
        self._replay = ReplayFilter()
        # Kept by Updates; Dissemination reads the accusers, the timer methods here the deadlines.
        self._suspicions: dict[str, Suspicion] = {}
        self._out = Dissemination(config, self._view, self._codec, suspicions=self._suspicions,
                                  stats=self._stats, rng=rng, drop=self._drop, now=now)
        # Random phase (memberlist staggers its tickers too): members started together must not
        # probe in lock-step.
        self._prober = Prober(config, self._view, self._out, self._awareness, stats=self._stats, rng=rng,
                              clock_offset_s=clock_offset_s,
                              first_probe_at=now + rng.random() * config.probe_interval_s)
        self._conflicts = Conflicts(config, self._view, self._out, self._prober, advertise=self.advertise,
                                    events=self._events, stats=self._stats)
        self._updates = Updates(config, self._view, self._out, self._prober, self._conflicts, self._awareness,
                                suspicions=self._suspicions, events=self._events, stats=self._stats, rng=rng)
        self._joiner = Joiner(config, self._view, self._out, self.keyring, advertise=self.advertise,
                              events=self._events, stats=self._stats, drop=self._drop)
        self._next_dead_retry_at = now + config.dead_retry_interval_s
        # The two counters bumped for every datagram received are plain ints (cheaper than a
        # Counter update); ``stats`` copies them in.
        self._datagrams_in = self._bytes_in = 0

    # ------------------------------------------------------------------ public API: reading

    @property
    def stats(self) -> Counter[str]:
        """Counters: probes, acks, suspicions, refutations, traffic, drops by reason, ..."""
        s = self._stats
        for key, value in (("datagrams_in", self._datagrams_in), ("bytes_in", self._bytes_in),
                           ("datagrams_out", self._out.datagrams_out), ("bytes_out", self._out.bytes_out)):
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
        return self._view.checksum

    def members(self) -> list[MemberInfo]:
        """Every member the view holds (self included), in all states, sorted by id."""
        members = self._view.members
        return [members[k].info() for k in sorted(members)]

    def live_members(self) -> list[MemberInfo]:
        """Alive and suspect members, self included: the set placement owns partitions from."""
        return [m for m in self.members() if m.is_live]

    def live_weights(self) -> tuple[dict[str, float], list[str]]:
        """The live members' weights by id (self included, in the order of ``live_members``)
        and which of them are suspect: what ownership reads after every change of the view,
        without a ``MemberInfo`` built per member (at N=1,024 that was 2/3 of the bootstrap's
        time: every join is a change at every member; issue 34)."""
        members = self._view.members
        weights: dict[str, float] = {}
        suspects: list[str] = []
        for k in sorted(members):
            m = members[k]
            if m.status in LIVE_STATUSES:
                weights[k] = m.meta.weight
                if m.status == SUSPECT:
                    suspects.append(k)
        return weights, suspects

    def member(self, node_id: str) -> MemberInfo | None:
        m = self._view.members.get(node_id)
        return None if m is None else m.info()

    @property
    def leave_broadcast_done(self) -> bool:
        """After ``leave``: our leave was sent at least ``gossip_fanout`` times (or to everyone)."""
        if not self._view.leaving:
            return False
        sent = self._out.queue.transmits(self.node_id)
        return sent is None or sent >= min(self.config.gossip_fanout, len(self._view.live_peers))

    # ------------------------------------------------------------------ public API: driving

    def join(self, seeds: Iterable[Addr], now: float) -> None:
        """Contact seed addresses (push-pull); retried with backoff while we know no one."""
        self.set_seeds(seeds)
        # We gossip our own Alive too (memberlist's setAlive does): otherwise only the seed
        # spreads our arrival, and in a small cluster its few retransmits can all miss a member,
        # which then learns of us only from anti-entropy.
        self._out.broadcast(self._out.state_message(self._self))
        self._joiner.join_seeds(now)

    def set_seeds(self, seeds: Iterable[Addr]) -> None:
        """Replace the seed addresses the next join attempts go to (a driver that finds seeds by
        DNS re-resolves after each ``JoinAttempt``). Our own address is left out."""
        self._joiner.set_seeds(seeds)

    def leave(self, now: float) -> None:
        """Announce a graceful leave; probing stops, the announcement keeps being gossiped."""
        if self._view.leaving:
            return
        self._view.leaving = True
        self._prober.probe = None
        self._view.set_status(self._self, LEFT, now)
        self._out.broadcast(Dead(self.node_id, self._self.incarnation, self.node_id))

    def update_meta(self, meta: Meta, now: float) -> None:
        """Change our metadata: raise the incarnation and gossip the new ``Alive``."""
        if self._view.leaving:
            raise RuntimeError("this member has left; start a new one to change metadata")
        self._check_meta(self.config, meta)
        check_outgoing(Alive(self.node_id, self._self.incarnation + 1, self.advertise, meta))
        self._self.meta = meta
        self._updates.bump_incarnation(self._self.incarnation)

    def report_loop_lag(self, lag_s: float, now: float) -> None:
        """Driver hook: the event loop woke up ``lag_s`` late. Large lag lowers our self-trust."""
        if lag_s > self.config.loop_lag_threshold_s:
            self._stats["loop_lag_reports"] += 1
            self._awareness.apply(1)
            self._updates.woke_at = now

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
                self._joiner.unreadable(drop, addr, now)
            return
        if env.cluster != self.config.cluster_name or env.settings != self.config.cluster_settings:
            self._joiner.mismatch(env, addr, now)
            return
        if env.sender == self.node_id:
            self._drop("from_self")
            self._conflicts.from_our_id(env, addr, now)
            return
        # Replays are dropped only with keys: without them nothing authenticates (sender, epoch,
        # seq), and a stranger who sent one envelope with a member's epoch and a huge seq made
        # every later datagram of that member "replayed" (issue 31). Keyless, a replayed
        # datagram does nothing a forged one could not, and SWIM's messages are idempotent.
        if self.keyring.enabled and not self._replay.check_and_record(env.sender, env.epoch, env.seq):
            self._drop("replayed")
            return
        if self._view.leaving:
            self._drop("leaving")
            return
        sender = self._view.members.get(env.sender)
        if sender is not None:
            sender.heard = now
        self._handle(env, addr, now)

    def handle_timer(self, now: float) -> None:
        """Run all work that is due at ``now`` (calling it early is harmless)."""
        prober, view = self._prober, self._view
        if prober.relays:
            prober.expire_relays(now)
        p = prober.probe
        if p is not None and not p.acked and not p.indirect_sent and now >= p.timeout_at:
            prober.probe_timed_out(now)
        if not view.leaving and now >= prober.next_probe_at:
            accusation = prober.finish_probe(now)
            if accusation is not None:
                self._updates.on_suspect(accusation, now)
            prober.start_probe(now)
        if self._suspicions:
            self._updates.expire_suspicions(now)
        out = self._out
        if out.queue and now >= out.next_gossip_at:
            out.gossip(now)
        joiner = self._joiner
        if joiner.next_join_at is not None and now >= joiner.next_join_at:
            joiner.join_seeds(now)
        if not view.leaving and now >= self._next_dead_retry_at:
            self._retry_dead_and_reclaim(now)

    def get_timer(self) -> float | None:
        """The next time ``handle_timer`` has work to do (None: only input can create work)."""
        # Called after every input, so no lists and no calls: a running minimum over the parts'
        # deadlines.
        prober = self._prober
        t = math.inf
        if prober.relays:
            t = min(r.deadline for r in prober.relays.values())
        if self._suspicions:
            # A verdict, or the last-chance ping one probe timeout before it (Lifeguard only).
            ahead = self.config.probe_timeout_s if self._awareness.enabled else 0.0
            for s in self._suspicions.values():
                due = s.deadline if s.last_chance_sent else s.deadline - ahead
                if due < t:
                    t = due
        if not self._view.leaving:
            if prober.next_probe_at < t:
                t = prober.next_probe_at
            if self._next_dead_retry_at < t:
                t = self._next_dead_retry_at
            p = prober.probe
            if p is not None and not p.acked and not p.indirect_sent and p.timeout_at < t:
                t = p.timeout_at
        out = self._out
        if out.queue and out.next_gossip_at < t:
            t = out.next_gossip_at
        next_join_at = self._joiner.next_join_at
        if next_join_at is not None and next_join_at < t:
            t = next_join_at
        return None if t == math.inf else t

    def datagrams_to_send(self) -> list[tuple[bytes, Addr]]:
        """Drain the outbox: (datagram, destination address) pairs, each <= mtu_bytes."""
        out = self._out  # (no call into it: drivers ask after every input)
        datagrams, out.outbox = out.outbox, []
        return datagrams

    def next_event(self) -> Event | None:
        """Pop the oldest pending event, or None."""
        return self._events.popleft() if self._events else None

    def events(self) -> Iterator[Event]:
        """Drain all pending events."""
        while self._events:
            yield self._events.popleft()

    def check_invariants(self) -> None:
        """Raise AssertionError if the internal indexes disagree with the view (for simulators
        and tests that check invariants after every step)."""
        self._view.check_invariants(self._suspicions)
        self._prober.check_invariants()

    # ------------------------------------------------------------------ receiving

    def _drop(self, reason: str) -> None:
        self._stats["dropped"] += 1
        self._stats["dropped_" + reason] += 1

    def _handle(self, env: Envelope, addr: Addr, now: float) -> None:
        """Route the messages of one valid datagram from a member of our cluster."""
        prober, updates = self._prober, self._updates
        accusation: Suspect | None = None
        for msg in env.messages:
            if isinstance(msg, Suspect) and msg.node == self.node_id:
                accusation = msg
        # A ping that carries a suspicion of us (Lifeguard buddy system; plain SWIM keeps gossip
        # order): refute before acking, so the ack itself carries the refutation (see on_ping).
        accused = accusation is not None and self._awareness.enabled \
            and any(isinstance(m, Ping) for m in env.messages)
        if accused and accusation is not None:  # (the second test is for the type checker)
            updates.on_suspect(accusation, now)
        in_sync: PushPull | None = None
        for msg in env.messages:
            if isinstance(msg, Ping):
                prober.on_ping(msg, env.sender, addr, now, accused)
            elif isinstance(msg, Ack):
                prober.on_ack(msg, env, addr, now)
            elif isinstance(msg, Alive):
                updates.on_alive(msg, now)
            elif isinstance(msg, Suspect):
                updates.on_suspect(msg, now)
            elif isinstance(msg, Dead):
                updates.on_dead(msg, now, synced_by=env.sender if in_sync else None,
                                from_addr=addr if env.sender == msg.node else None)
            elif isinstance(msg, PushPull):
                in_sync = msg
            elif isinstance(msg, Nack):
                prober.on_nack(msg)
            elif isinstance(msg, PingReq):
                prober.on_ping_req(msg, addr, now)
            else:  # Refuse with equal settings: nothing to refuse
                self._stats["unexpected_refuses"] += 1
        if in_sync is not None:
            self._stats["push_pull_received"] += 1
            if in_sync.reply and self._out.may_reply_push_pull(addr, in_sync.sync_id, now):
                self._out.send_state(addr, reply=False, now=now)

    # ------------------------------------------------------------------ housekeeping

    def _retry_dead_and_reclaim(self, now: float) -> None:
        """Every ``dead_retry_interval_s``: forget long-dead members, ping one dead member's
        address (partition healing), and retry the join if it stopped while seeds remain."""
        self._next_dead_retry_at = now + self.config.dead_retry_interval_s
        view = self._view
        view.reclaim(now - self.config.dead_reclaim_s)
        # Each member tries with probability dead / live, so the cluster as a whole pings each
        # dead member about once per interval (Serf's reconnect, serf/serf.go); at N=256 every
        # member pinging one dead address every interval was 0.09 datagrams/member/s whenever
        # anyone was dead. On each side of a split (as many dead as live) every member tries.
        dead = view.dead_since
        if dead and self._rng.random() * view.live_count() < len(dead):
            self._prober.ping_dead(self._rng.choice(list(dead)))
        if self._joiner.next_join_at is None and self._joiner.seeds:
            self._joiner.join_seeds(now)

    @staticmethod
    def _check_meta(config: MembershipConfig, meta: Meta) -> None:
        size = len(encode_meta(meta))
        if size > config.meta_max_bytes:
            raise ValueError(f"metadata is {size} bytes, more than meta_max_bytes={config.meta_max_bytes}")
