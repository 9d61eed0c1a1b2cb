"""Entering a cluster: seeds, join retries with backoff, refusals, and notices to peers we
cannot read.

Why this module exists: a member that knows no one must find the cluster (push-pull with each
seed, retried with exponential backoff while no member answers, each failed attempt reported as
a ``JoinAttempt``), and it must learn *why* it gets no answer when the reason is a mismatch an
operator has to fix: another cluster name or settings (answered with ``Refuse``; issue 16),
other gossip keys or another protocol version (answered with a notice, ``wire.py``). These
rules decide who stops: only a newcomer that never had a live peer (``JoinRefused``); a member
that belongs to a cluster reports and carries on (``RefusedPeer``).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Iterable

from .config import MembershipConfig
from .dissemination import Dissemination
from .messages import Addr, Event, JoinAttempt, JoinRefused, PushPull, Refuse, RefusedPeer
from .view import View
from .wire import PROTOCOL_VERSION, Drop, Envelope, Keyring, Notice, encode_notice

__all__ = ["Joiner"]

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


class Joiner:
    """Join attempts and the answers to members that cannot be part of our cluster."""

    __slots__ = (
        "_drop",
        "_events",
        "_join_attempts",
        "_join_heard",
        "_keyring",
        "_notified",
        "_out",
        "_stats",
        "_view",
        "advertise",
        "config",
        "next_join_at",
        "node_id",
        "seeds",
    )

    def __init__(self, config: MembershipConfig, view: View, out: Dissemination, keyring: Keyring, *,
                 advertise: Addr, events: deque[Event], stats: Counter[str], drop: Callable[[str], None]) -> None:
        self.config = config
        self.node_id = view.node_id
        self.advertise = advertise
        self.seeds: list[Addr] = []
        #: When the next join attempt is due (None: not joining).
        self.next_join_at: float | None = None
        self._view = view
        self._out = out
        self._keyring = keyring
        self._events = events
        self._stats = stats
        self._drop = drop
        self._join_attempts = 0  # failed attempts since we last had a live peer (backoff)
        self._join_heard: dict[Addr, str] = {}  # seed address -> why we dropped what it sent
        self._notified: dict[Addr, float] = {}  # address -> when we last sent it a notice

    def set_seeds(self, seeds: Iterable[Addr]) -> None:
        self.seeds = [(h, int(p)) for h, p in seeds if (h, int(p)) != self.advertise]

    def join_seeds(self, now: float) -> None:
        """Push-pull with every seed, unless we know a live member (or left); a retry reports
        the failed attempt before it and doubles the wait."""
        view = self._view
        if view.live_peers or view.leaving:
            self._join_attempts = 0
        if not self.seeds or view.live_peers or view.leaving:
            self.next_join_at = None
            return
        config = self.config
        if self.next_join_at is not None:  # a retry: the previous attempt got no member
            self._join_attempts += 1
            wait = min(config.join_retry_max_interval_s,
                       config.join_retry_interval_s * 2 ** min(self._join_attempts, 32))
            heard = "; ".join(f"{h}:{p}: {why}" for (h, p), why in sorted(self._join_heard.items()))
            self._join_heard.clear()
            self._events.append(JoinAttempt(self._join_attempts, tuple(self.seeds), heard or "no answer",
                                            now + wait, now))
        else:
            wait = config.join_retry_interval_s
        for seed in self.seeds:
            self._stats["join_attempts"] += 1
            self._out.send_state(seed, reply=True, now=now)
        self.next_join_at = now + wait

    def unreadable(self, drop: Drop, addr: Addr, now: float) -> None:
        """A datagram we could not read for its keys or version, or a notice that ours was not.

        We tell its sender why (a notice; never in answer to a notice, so never a loop). A
        joiner keeps what it hears from its seeds for the next ``JoinAttempt``. A notice stops
        a joiner (``JoinRefused``) only if it holds no keys - then everything it receives is
        unauthenticated anyway -, only when it comes from a seed we contacted (a stranger's
        forgery from elsewhere must not stop a joiner; issue 31) and only when it says the
        cluster encrypts or speaks another protocol version; a member with keys never lets an
        unauthenticated datagram stop it."""
        if isinstance(drop, Notice):
            hint = _NOTICE_HINTS[drop.about].format(theirs=drop.version, ours=PROTOCOL_VERSION)
            if self.next_join_at is None:
                return
            self._join_heard[addr] = hint
            if not self._keyring.enabled and not self._view.had_peer and addr in self.seeds \
                    and drop.about in ("unencrypted", "unknown_version"):
                self._events.append(JoinRefused(addr, f"the member at {addr[0]}:{addr[1]}: {hint}; start this "
                                                      "node with the cluster's gossip keys and version", now))
            return
        if self.next_join_at is not None:
            self._join_heard[addr] = _JOIN_DROP_HINTS[drop.reason]
        if self._view.leaving or now - self._notified.get(addr, -math.inf) < _NOTICE_INTERVAL_S:
            return
        if len(self._notified) > 4096:
            self._notified.clear()
        self._notified[addr] = now
        self._stats["notices_sent"] += 1
        self._out.emit(encode_notice(drop.reason), addr)

    def mismatch(self, env: Envelope, addr: Addr, now: float) -> None:
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
                if self._view.had_peer or self._view.leaving:
                    self._stats["refusals_ignored"] += 1
                elif addr not in self.seeds and not self._keyring.enabled:
                    # Keyless, and we sent no join there: a stranger's forgery (or a seed
                    # answering from another address). It does not stop us; the next
                    # JoinAttempt says so. (With keys a refusal comes from a key holder.)
                    self._stats["refusals_ignored"] += 1
                    if self.next_join_at is not None:
                        self._join_heard[addr] = f"refused us, but we did not contact it: {msg.reason}"[:512]
                else:
                    self._events.append(JoinRefused(addr, msg.reason, now))
            elif isinstance(msg, PushPull) and msg.reply and self._out.may_reply_push_pull(addr, msg.sync_id, now):
                self._refuse(env, addr, name_differs, now)

    def _refuse(self, env: Envelope, addr: Addr, name_differs: bool, now: float) -> None:
        """Answer a join from another cluster, or with other settings, with ``Refuse`` naming
        both sides' values (the joiner's operator needs ours to fix its config).

        Without keys the refusal goes out in an anonymous envelope (``Codec.seal_anonymous``):
        anyone can send a join, and the issue-31 attack read the member's epoch from the
        envelope of its refusal. The values themselves are no secret without keys (every
        datagram carries them in clear, and a refused stranger needs them as much as a
        misconfigured member): nothing in the core relies on them being unknown."""
        if name_differs:
            what, ours, theirs = "cluster name differs", self.config.cluster_name, env.cluster
        else:
            what, ours, theirs = "cluster settings differ", self.config.cluster_settings, env.settings
        reason = (f"{what}: member {self.node_id!r} has {ours!r}, {env.sender!r} has {theirs!r}; "
                  "start it with the cluster's values")[:512]  # wire limit for texts
        self._stats["joins_refused"] += 1
        self._events.append(RefusedPeer(addr, env.sender, reason, now))
        codec = self._out.codec
        if self._keyring.enabled:
            self._out.send(addr, [codec.encode_message(Refuse(reason))], piggyback=False)
        else:
            self._out.emit(codec.seal_anonymous([codec.encode_message(Refuse(reason))]), addr)
