"""Configuration of the membership protocol: one frozen dataclass, LAN defaults.

Every knob carries its unit in its name. Defaults follow hashicorp/memberlist's
``DefaultLANConfig`` (config.go) where that fits our goals, and deviate where the
project's goals (issue 3: dead everywhere p50 <= 5 s / p99 <= 8 s at N=256,
<= 3 datagrams/s per member) require it; each deviation is explained next to the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["MembershipConfig"]


@dataclass(frozen=True)
class MembershipConfig:
    """All protocol settings of one member. Every member of a cluster should use the same values.

    Derived quantities (documented with their formula) are methods, so they cannot drift
    from the fields they depend on.
    """

    #: Name of the cluster. Carried on every datagram; datagrams with another name are dropped.
    cluster_name: str = "default"
    #: Opaque fingerprint of settings that must agree cluster-wide (e.g. partition count,
    #: replica count, hash seed of the placement layer). Carried on every datagram; a node whose
    #: fingerprint (or cluster name) differs is refused: its datagrams are dropped and, when it
    #: tries to join, it is told so and emits a ``JoinRefused`` event (the contacted member only
    #: reports ``RefusedPeer`` and carries on). Empty string = no check beyond equality of "".
    cluster_settings: str = ""

    # --- failure detection (SWIM section 3, memberlist config.go) ---
    #: Period T between two probes of randomly ordered members (memberlist ProbeInterval 1 s).
    probe_interval_s: float = 1.0
    #: How long to wait for a direct ack before asking others (memberlist ProbeTimeout 500 ms).
    #: Must be < probe_interval_s: indirect probes use the rest of the period.
    probe_timeout_s: float = 0.5
    #: Number k of members asked to ping-req a silent target (SWIM 3.1; memberlist IndirectChecks 3).
    indirect_checks: int = 3

    # --- suspicion (Lifeguard section IV-B, arXiv 1707.00788; memberlist suspicion.go) ---
    #: Minimum suspicion timeout = suspicion_mult * max(1, log10(N)) * probe_interval_s.
    #: memberlist uses 4 (about 9.6 s at N=256); we use 1.25 (about 3.0 s at N=256) to meet the
    #: detection goal, and rely on the Lifeguard maximum below (reached only through
    #: independent confirmations) so one slow or unlucky prober cannot kill a member quickly.
    suspicion_mult: float = 1.25
    #: Lower bound of that minimum, so small clusters are not quicker to convict than large
    #: ones (our addition). Measured in the simulator at N=16: a member frozen for 4 s, or
    #: handling every datagram 2 s late, is never declared dead; frozen for 6 s, it is.
    suspicion_min_floor_s: float = 3.0
    #: Maximum (initial) suspicion timeout = suspicion_max_timeout_mult * minimum (memberlist 6).
    suspicion_max_timeout_mult: float = 6.0
    #: Independent confirmations K after which the timeout reaches its minimum
    #: (memberlist uses SuspicionMult - 2 = 2; we keep 3 so a quick kill needs 4 accusers).
    suspicion_confirmations: int = 3
    #: Our addition (not in memberlist): about this many of the members that hear of a new
    #: suspicion probe the suspect next, at once if their current probe is answered (each with
    #: probability reprobe / (N - 2)). Their failures are independent confirmations, gathered
    #: within about a period instead of K periods of chance probes; their pings carry the suspicion
    #: (buddy system), so a slow-but-alive suspect learns of it sooner and refutes. 0 disables.
    suspicion_reprobe_members: int = 8

    # --- Lifeguard local health awareness (Lifeguard section IV-A) ---
    #: Saturation S of the local health counter (0..S-1). Probe interval and timeout are
    #: multiplied by (score + 1) (memberlist AwarenessMaxMultiplier 8).
    awareness_max_multiplier: int = 8
    #: Event-loop lag above which the driver-reported lag counts as a health problem.
    loop_lag_threshold_s: float = 0.2
    #: Master switch: False turns off local health awareness, the confirmation-based
    #: suspicion timeout (a fixed timeout = the minimum is used, as in plain SWIM), the buddy
    #: system and suspect re-probing, so simulations can compare plain SWIM with SWIM + Lifeguard.
    lifeguard: bool = True

    # --- dissemination (SWIM section 4) ---
    #: Each update is piggybacked retransmit_mult * ceil(log10(N + 1)) times (memberlist 4).
    retransmit_mult: int = 4
    #: While updates are queued, every gossip_interval_s they are also sent to
    #: gossip_fanout random members (memberlist GossipInterval 200 ms, GossipNodes 3).
    #: With an empty queue nothing is sent, so an idle cluster only probes.
    gossip_interval_s: float = 0.2
    gossip_fanout: int = 3
    #: Our addition (issue 14): gossip rounds push a suspicion or a confirmation for this many
    #: rounds' worth of transmissions (rounds x gossip_fanout, at most the retransmit limit), a
    #: death for dead_push_rounds; an Alive (join, refutation) for its whole budget, as in
    #: memberlist. The rest of each budget rides on probes and acks. The first round after a
    #: quiet spell crosses the cluster at network speed (every receiver's round is due at once);
    #: the later ones mostly reach members that know already. Measured at N=256, a crash every
    #: 20 s, 128 kills (docs/benchmarks-log.md, "Lighter gossip"): 4.05 -> 2.90 datagrams/member/s
    #: with dead-everywhere p50 4.65 s (4.62 s before), p99 5.61 s (5.64 s); 3 rounds for a death: 3.03 and a shorter
    #: tail for the last member to hear (max 3.37 s after the first suspicion instead of 3.74).
    suspect_push_rounds: int = 1
    dead_push_rounds: int = 2
    #: Dead members keep receiving gossip this long so they learn they were declared dead and
    #: can refute (memberlist GossipToTheDeadTime 30 s).
    gossip_to_dead_s: float = 30.0
    #: Largest datagram we send, all headers and encryption included (memberlist UDPBufferSize).
    mtu_bytes: int = 1400
    #: Larger received datagrams are dropped as oversized. Must be >= every member's mtu_bytes.
    max_receive_bytes: int = 8192
    #: Size limit of the encoded metadata (memberlist MetaMaxSize 512).
    meta_max_bytes: int = 512

    # --- anti-entropy, join, partitions ---
    #: A checksum of the view rides on every ack; on mismatch, once dissemination has gone
    #: quiet, a push-pull full state exchange is started, at most once per this interval.
    push_pull_min_interval_s: float = 5.0
    #: While no other live member is known, seeds are contacted again: first after this long,
    #: then twice as long after each failed attempt, up to join_retry_max_interval_s (a seed
    #: that is down for long is not flooded; memberlist leaves retries to the application).
    join_retry_interval_s: float = 2.0
    join_retry_max_interval_s: float = 10.0
    #: Every this often one random dead (not left) member's address is pinged, by each member
    #: with probability dead / live (Serf's reconnect: each dead member is tried about once per
    #: interval cluster-wide); if it answers, a push-pull follows, so a cluster split by a
    #: network partition merges again after it heals (Ringpop's healer; Serf retries every 30 s).
    dead_retry_interval_s: float = 10.0
    #: Dead and left members are forgotten after this long (and stop being retried).
    dead_reclaim_s: float = 3600.0

    #: Shared AES-GCM keys (16, 24 or 32 bytes). Empty: no encryption. The first key encrypts;
    #: all keys are tried on receive, so keys rotate without downtime (see wire.Keyring).
    keys: tuple[bytes, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if not 0 < len(self.cluster_name) <= 128 or len(self.cluster_settings) > 200:
            raise ValueError("cluster_name: 1-128 characters; cluster_settings: at most 200")
        if not 0 < self.probe_timeout_s < self.probe_interval_s:
            raise ValueError("need 0 < probe_timeout_s < probe_interval_s")
        if self.mtu_bytes < 256 or self.mtu_bytes > self.max_receive_bytes:
            raise ValueError("need 256 <= mtu_bytes <= max_receive_bytes")
        if self.indirect_checks < 0 or self.gossip_fanout < 1 or self.retransmit_mult < 1:
            raise ValueError("indirect_checks >= 0, gossip_fanout >= 1, retransmit_mult >= 1")
        if self.suspect_push_rounds < 1 or self.dead_push_rounds < 1:
            raise ValueError("suspect_push_rounds >= 1, dead_push_rounds >= 1")
        if not 0 < self.join_retry_interval_s <= self.join_retry_max_interval_s:
            raise ValueError("need 0 < join_retry_interval_s <= join_retry_max_interval_s")
        if self.awareness_max_multiplier < 1 or self.suspicion_confirmations < 0:
            raise ValueError("awareness_max_multiplier >= 1, suspicion_confirmations >= 0")
        for key in self.keys:
            if len(key) not in (16, 24, 32):
                raise ValueError("AES-GCM keys must be 16, 24 or 32 bytes long")

    def retransmit_limit(self, n_members: int) -> int:
        """retransmit_mult * ceil(log10(N + 1)) (SWIM section 4; memberlist util.go retransmitLimit)."""
        return self.retransmit_mult * max(1, math.ceil(math.log10(n_members + 1)))

    def suspicion_min_s(self, n_members: int) -> float:
        """max(floor, suspicion_mult * max(1, log10(N)) * probe_interval_s); the second term is
        memberlist's suspicionTimeout (state.go / util.go)."""
        scaled = self.suspicion_mult * max(1.0, math.log10(max(1, n_members))) * self.probe_interval_s
        return max(self.suspicion_min_floor_s, scaled)

    def suspicion_max_s(self, n_members: int) -> float:
        return self.suspicion_max_timeout_mult * self.suspicion_min_s(n_members)
