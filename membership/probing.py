"""Failure detection by probing: ping, ping-req, ack and nack, on a shared probe schedule.

Why this module exists: SWIM's failure detector (Das et al. 2002, section 3) is a small state
machine of its own - one probe at a time, a direct ping, after the probe timeout ping-req to
``indirect_checks`` helpers, and no ack by the end of the period makes the target suspect - plus
the other side of it, answering pings and relaying ping-reqs for others. Lifeguard (Dadgar et
al., arXiv 1707.00788) adds nacks from helpers (IV-A: missing nacks point at ourselves), local
health awareness (``awareness.py``: probe interval and timeout scale with our score, which
probe outcomes move) and the buddy system (IV-C: a ping to a suspect carries the suspicion).
Whom to probe follows the shared ring schedule described in ``core.py`` ("Probe schedule").

What a failed probe means for the view is not decided here: ``finish_probe`` returns the
accusation and the core hands it to ``updates.py``. Pings to dead members' addresses (partition
healing) and the ping sequence numbers every ping uses live here too.
"""

from __future__ import annotations

import math
import random
from collections import Counter

from .awareness import Awareness
from .config import MembershipConfig
from .dissemination import Dissemination
from .messages import Ack, Addr, Alive, Dead, Nack, Ping, PingReq, Suspect
from .sampling import sample
from .status import ALIVE, DEAD, LEFT, LIVE_STATUSES, SUSPECT
from .view import Member, View
from .wire import Envelope

__all__ = ["Prober", "Probe", "Relay"]


class Probe:
    """Our current probe of ``target`` (one at a time, as in SWIM)."""

    __slots__ = ("acked", "indirect_sent", "nacks", "nacks_expected", "seq", "target", "timeout_at")

    def __init__(self, seq: int, target: str, timeout_at: float) -> None:
        self.seq = seq
        self.target = target
        self.timeout_at = timeout_at
        self.acked = False
        self.indirect_sent = False
        self.nacks_expected = 0
        self.nacks = 0


class Relay:
    """A ping we send on behalf of a ping-req; its ack (or a nack) goes back to the requester."""

    __slots__ = ("deadline", "requester", "seq")

    def __init__(self, requester: Addr, seq: int, deadline: float) -> None:
        self.requester = requester
        self.seq = seq
        self.deadline = deadline


class Prober:
    """Probing and answering probes for one member."""

    __slots__ = (
        "_alive_others",
        "_alive_others_at",
        "_awareness",
        "_clock_offset_s",
        "_last_unknown_sync_at",
        "_out",
        "_rng",
        "_seq",
        "_stats",
        "_view",
        "config",
        "dead_ping_seq",
        "next_probe_at",
        "node_id",
        "probe",
        "probe_next",
        "relays",
    )

    def __init__(self, config: MembershipConfig, view: View, out: Dissemination, awareness: Awareness, *,
                 stats: Counter[str], rng: random.Random, clock_offset_s: float, first_probe_at: float) -> None:
        self.config = config
        self.node_id = view.node_id
        self.probe: Probe | None = None
        self.relays: dict[int, Relay] = {}
        #: Suspects to probe before the scheduled target (``suspicion_reprobe_members``).
        self.probe_next: list[str] = []
        self.next_probe_at = first_probe_at
        self.dead_ping_seq: int | None = None  # our ping to a dead member's address
        self._view = view
        self._out = out
        self._awareness = awareness
        self._stats = stats
        self._rng = rng
        self._clock_offset_s = clock_offset_s
        self._seq = 0
        self._last_unknown_sync_at = float("-inf")
        # Alive members other than us, in table order, as of view generation _alive_others_at.
        self._alive_others: list[Member] = []
        self._alive_others_at = -1

    def next_seq(self) -> int:
        """The sequence number of a new ping (any of ours: probes, relays, the others')."""
        self._seq += 1
        return self._seq

    # ------------------------------------------------------------------ our probes

    def next_probe_target(self, now: float) -> Member | None:
        view = self._view
        while self.probe_next:  # a suspect we heard of (suspicion_reprobe_members)
            m = view.members.get(self.probe_next.pop())
            if m is not None and m.status in LIVE_STATUSES:
                return m
        # See "Probe schedule" in core.py.
        return view.ring_target(math.floor((now + self._clock_offset_s) / self.config.probe_interval_s))

    def reprobe(self, node_id: str, now: float) -> None:
        """Probe suspect ``node_id`` next (``suspicion_reprobe_members``): at once if our
        current probe is answered (the usual case), else when it ends. Why at once: waiting
        for our next period cost half a period on average, and the confirmation then came
        after the suspicion's gossip rounds had ended, so it needed rounds of its own; at N=256
        starting at once cut late confirmations by a third (issue 14, docs/benchmarks-log.md). The
        answered probe loses nothing; our schedule restarts from now."""
        self.probe_next.append(node_id)
        probe = self.probe
        if (probe is None or probe.acked) and not self._view.leaving:
            self.probe = None
            self.start_probe(now)

    def start_probe(self, now: float) -> None:
        self.next_probe_at = now + self._awareness.scale(self.config.probe_interval_s)
        target = self.next_probe_target(now)
        if target is None:
            return
        self.probe = Probe(self.next_seq(), target.node_id, now + self._awareness.scale(self.config.probe_timeout_s))
        encode = self._out.codec.encode_message
        head = [encode(Ping(self.probe.seq, target.node_id))]
        if self.config.lifeguard and target.status == SUSPECT:
            # Buddy system (Lifeguard IV-C): tell the suspect it is suspected.
            head.append(encode(Suspect(target.node_id, target.incarnation, self.node_id)))
        self._stats["probes_sent"] += 1
        self._out.send(target.addr, head)

    def probe_timed_out(self, now: float) -> None:
        """No ack within the probe timeout: ask helpers (ping-req)."""
        self.send_indirect_probes(now)
        # Woken late (our process stalled)? Give the indirect probes their share of the
        # period before judging the target: our own slowness is no evidence against it.
        window = self._awareness.scale(self.config.probe_interval_s - self.config.probe_timeout_s)
        self.next_probe_at = max(self.next_probe_at, now + window)

    def send_indirect_probes(self, now: float) -> None:
        probe = self.probe
        assert probe is not None
        probe.indirect_sent = True
        view = self._view
        target = view.members.get(probe.target)
        if target is None:
            return
        helpers = self._helpers_for(target)
        helpers = sample(self._rng, helpers, min(self.config.indirect_checks, len(helpers)))
        probe.nacks_expected = len(helpers)
        blob = self._out.codec.encode_message(PingReq(probe.seq, target.node_id, target.addr))
        for helper in helpers:
            self._stats["ping_reqs_sent"] += 1
            self._out.send(helper.addr, [blob])

    def _helpers_for(self, target: Member) -> list[Member]:
        """Whom a ping-req may go to: every alive member but us and ``target``, in table order
        (the order the sampling draws index). The list of alive others is kept until the view's
        generation moves, so a failed probe copies it in C instead of scanning the table in
        Python (2.4% of a 256-node 5%-loss run)."""
        view = self._view
        if self._alive_others_at != view.generation:
            me = view.me
            self._alive_others = [m for m in view.members.values() if m is not me and m.status == ALIVE]
            self._alive_others_at = view.generation
        helpers = self._alive_others.copy()
        if target.status == ALIVE:
            helpers.remove(target)
        return helpers

    def check_invariants(self) -> None:
        """Raise AssertionError if the kept list of alive others is stale for its generation."""
        view = self._view
        if self._alive_others_at == view.generation:
            assert self._alive_others == [m for m in view.members.values()
                                          if m is not view.me and m.status == ALIVE], "ping-req helpers"

    def finish_probe(self, now: float) -> Suspect | None:
        """End the current probe; the accusation to apply if it failed and its target is live."""
        probe, self.probe = self.probe, None
        if probe is None or probe.acked:
            return None
        self._stats["probe_failures"] += 1
        # Lifeguard IV-A (memberlist state.go probeNode): missing nacks mean our own network or
        # process is the likely problem; no helpers at all counts as one failure.
        if probe.nacks_expected:
            self._awareness.apply(probe.nacks_expected - probe.nacks)
        else:
            self._awareness.apply(1)
        m = self._view.members.get(probe.target)
        if m is None or m.status not in LIVE_STATUSES:
            return None
        return Suspect(m.node_id, m.incarnation, self.node_id)

    def ping_dead(self, node_id: str) -> None:
        """A single ping (not the full state) to a dead member's address; an ack triggers
        push-pull (partition healing, see ``on_ack``)."""
        target = self._view.members[node_id]
        self.dead_ping_seq = self.next_seq()
        self._stats["dead_retries"] += 1
        self._out.send(target.addr, [self._out.codec.encode_message(
            Ping(self.dead_ping_seq, target.node_id))], piggyback=False)

    # ------------------------------------------------------------------ answers

    def on_ping(self, msg: Ping, sender: str, addr: Addr, now: float, accused: bool = False) -> None:
        if msg.target != self.node_id:
            # Another process now lives at the address we hold for ``msg.target``.
            self._stats["misdirected_pings"] += 1
            return
        view, out = self._view, self._out
        encode = out.codec.encode_message
        head = [encode(Ack(msg.seq, view.checksum))]
        if accused:
            # The pinger suspects us: our refutation goes in the ack itself rather than from
            # the gossip queue, whose retransmit limit runs out when a member that woke from a
            # stall answers a backlog of such pings at once.
            me = view.me
            head.append(encode(Alive(self.node_id, me.incarnation, me.addr, me.meta)))
        known = view.members.get(sender)
        if known is not None and known.status in (SUSPECT, DEAD, LEFT):
            # Tell a member we hold as suspect/dead/left what we believe, so it can refute at
            # once (a member that left probes no one: a left member that pings us is alive, and
            # the leave a stranger's forgery, issue 31).
            head.append(encode(out.state_message(known)))
        out.send(addr, head)
        if known is None and not view.leaving \
                and now - self._last_unknown_sync_at >= self.config.probe_interval_s:
            # A member we have never heard of probes us: its arrival's gossip missed us (or we
            # reclaimed it while it was away). Exchange full state now rather than waiting for a
            # checksum mismatch; at most one such exchange per probe interval.
            self._last_unknown_sync_at = now
            self._stats["unknown_pinger_syncs"] += 1
            out.send_state(addr, reply=True, now=now)

    def on_ack(self, msg: Ack, env: Envelope, addr: Addr, now: float) -> None:
        out = self._out
        relay = self.relays.pop(msg.seq, None)
        if relay is not None:
            out.send(relay.requester, [out.codec.encode_message(Ack(relay.seq, msg.checksum))])
            return
        if msg.seq == self.dead_ping_seq:
            # A member we hold as dead answers: the network healed or it is back. Exchange full
            # state so both sides' refutations and views merge (partition healing).
            self.dead_ping_seq = None
            self._stats["dead_member_answered"] += 1
            out.send_state(addr, reply=True, now=now)
            return
        probe = self.probe
        if probe is None or probe.seq != msg.seq or probe.acked:
            self._stats["stale_acks"] += 1  # late (after the probe ended) or duplicated
            return
        probe.acked = True
        self._stats["acks_received"] += 1
        self._awareness.apply(-1)
        # Anti-entropy (core.py docstring); the scan for updates riding with the ack comes
        # last, so only a checksum mismatch pays for it.
        if env.sender == probe.target and msg.checksum != self._view.checksum and not out.queue \
                and now - out.last_push_pull_at >= self.config.push_pull_min_interval_s \
                and not any(isinstance(m, (Alive, Suspect, Dead)) for m in env.messages):
            self._stats["anti_entropy_syncs"] += 1
            out.send_state(addr, reply=True, now=now)

    def on_nack(self, msg: Nack) -> None:
        if self.probe is not None and self.probe.seq == msg.seq:
            self.probe.nacks += 1
            self._stats["nacks_received"] += 1

    def on_ping_req(self, msg: PingReq, addr: Addr, now: float) -> None:
        seq = self.next_seq()
        # Nack at 80% of the probe timeout: the requester sent the ping-req after its own probe
        # timeout and waits for the rest of its period (interval - timeout), so a nack sent
        # after a full timeout would arrive too late to count (Lifeguard IV-A needs it to).
        self.relays[seq] = Relay(addr, msg.seq, now + 0.8 * self.config.probe_timeout_s)
        self._stats["relayed_pings"] += 1
        self._out.send(msg.target_addr, [self._out.codec.encode_message(Ping(seq, msg.target))])

    def expire_relays(self, now: float) -> None:
        """Nack the requesters of relayed pings that got no ack in time (Lifeguard IV-A)."""
        for seq in [s for s, r in self.relays.items() if r.deadline <= now]:
            relay = self.relays.pop(seq)
            self._stats["nacks_sent"] += 1
            self._out.send(relay.requester, [self._out.codec.encode_message(Nack(relay.seq))])
