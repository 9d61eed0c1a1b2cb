"""Applying membership updates to the view: Alive, Suspect, Dead, suspicion and refutation.

Why this module exists: this is where the view changes. An update (gossiped, carried by a
ping or an ack, received by push-pull, or our own failed probe's accusation) applies by the
precedence table in ``status.py`` (SWIM section 4.2 with memberlist's rules), and an applied
update is counted, reported to the driver as a ``MemberEvent`` and queued for gossip. Updates
about ourselves are refuted by raising our incarnation (SWIM 4.2).

Suspicions live here too, from start to verdict: a suspect is held with a Lifeguard suspicion
timer (``suspicion.py``, arXiv 1707.00788 section IV-B) that independent confirmations
shorten, and turns ``dead`` when it runs out - unless one of our additions defers the verdict
(the last-chance ping one probe timeout before it, and the local-health-aware verdict after a
late timer or a reported loop stall; see ``core.py``, "Lifeguard").
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter, deque
from typing import TypeVar

from .awareness import Awareness
from .config import MembershipConfig
from .conflicts import Conflicts
from .dissemination import Dissemination
from .messages import Addr, Alive, Dead, DeclaredDead, Event, MemberEvent, Message, Ping, Suspect
from .probing import Prober
from .status import (
    ALIVE,
    ALIVE_MARGIN_MIN,
    DEAD,
    INCARNATION_MAX,
    INCARNATION_SOFT_MAX,
    INCARNATION_STEP_INTERVAL_S,
    JOINED,
    LEFT,
    SUSPECT,
    UPDATED,
    EventKind,
    Status,
    bounded_incarnation,
    supersedes,
)
from .suspicion import Suspicion
from .view import Member, View

__all__ = ["Updates"]

_Update = TypeVar("_Update", Alive, Suspect, Dead)


class Updates:
    """The rules that change the view, and the suspicions held."""

    __slots__ = (
        "_awareness",
        "_conflicts",
        "_events",
        "_out",
        "_prober",
        "_rng",
        "_stats",
        "_stepped_at",
        "_view",
        "config",
        "node_id",
        "suspicions",
        "woke_at",
    )

    def __init__(self, config: MembershipConfig, view: View, out: Dissemination, prober: Prober,
                 conflicts: Conflicts, awareness: Awareness, *, suspicions: dict[str, Suspicion],
                 events: deque[Event], stats: Counter[str], rng: random.Random) -> None:
        self.config = config
        self.node_id = view.node_id
        #: The suspicion of each suspect we hold (shared with ``Dissemination`` for the accuser).
        self.suspicions = suspicions
        #: When the driver last reported a loop stall (``Swim.report_loop_lag``).
        self.woke_at = -math.inf
        self._view = view
        self._out = out
        self._prober = prober
        self._conflicts = conflicts
        self._awareness = awareness
        self._events = events
        self._stats = stats
        self._rng = rng
        #: When a member's record (ours included) last took a step above the soft maximum
        #: (``status.bounded_incarnation``): only forged updates put anything here.
        self._stepped_at: dict[str, float] = {}

    # ------------------------------------------------------------------ updates

    def on_alive(self, msg: Alive, now: float) -> None:
        view = self._view
        if msg.node == self.node_id:
            me = view.me
            if msg.incarnation > INCARNATION_SOFT_MAX:
                msg = self._bounded(msg, me.incarnation, now)
            # (We hold ourselves alive: a member that left handles no gossip.)
            if supersedes(ALIVE, msg.incarnation, ALIVE, me.incarnation) or (
                    msg.incarnation == me.incarnation and (msg.addr, msg.meta) != (me.addr, me.meta)):
                # Someone holds a newer or different record of us (e.g. from before a restart).
                if msg.addr != me.addr:
                    self._conflicts.foreign_claim(msg.addr, now)
                self.bump_incarnation(msg.incarnation)
            return
        m = view.members.get(msg.node)
        if m is None:
            if msg.incarnation > INCARNATION_SOFT_MAX:
                msg = self._bounded(msg, 0, now)
            m = Member(msg.node, msg.addr, msg.meta, msg.incarnation, ALIVE, now)
            view.add(m)
            self._set_changed(m, JOINED, now)
            self._out.broadcast(msg)
            return
        if msg.incarnation - m.incarnation < ALIVE_MARGIN_MIN:
            return
        if msg.incarnation > INCARNATION_SOFT_MAX:
            msg = self._bounded(msg, m.incarnation, now)
        if not supersedes(ALIVE, msg.incarnation, m.status, m.incarnation):
            return
        if msg.addr != m.addr and m.status in (ALIVE, SUSPECT):
            self._conflicts.address_claim(msg, m, now)
            return
        self._conflicts.drop_claim(msg.node)
        old_status = m.status
        changed = (msg.addr, msg.meta) != (m.addr, m.meta)
        m.incarnation, m.addr, m.meta = msg.incarnation, msg.addr, msg.meta
        self.suspicions.pop(msg.node, None)
        if old_status != ALIVE:
            view.set_status(m, ALIVE, now)
        view.live_changed(m)
        if old_status in (DEAD, LEFT):
            self._set_changed(m, JOINED, now)
        else:
            if old_status == SUSPECT:
                self._set_changed(m, ALIVE, now, by=m.node_id)
            if changed:
                self._set_changed(m, UPDATED, now)
        self._out.broadcast(msg)

    def on_suspect(self, msg: Suspect, now: float) -> None:
        if msg.incarnation > INCARNATION_SOFT_MAX:
            held = self._view.members.get(msg.node)
            msg = self._bounded(msg, held.incarnation if held is not None else 0, now)
        if msg.node == self.node_id:
            if supersedes(SUSPECT, msg.incarnation, ALIVE, self._view.me.incarnation):
                self.refute(msg.incarnation)
            return
        m = self._view.members.get(msg.node)
        if m is None or not supersedes(SUSPECT, msg.incarnation, m.status, m.incarnation):
            return
        current = self.suspicions.get(msg.node)
        if m.status == SUSPECT and current is not None and msg.incarnation == current.incarnation:
            if current.confirm(msg.sender):
                self._stats["confirmations"] += 1
                # Pass independent confirmations on (memberlist does): they must reach the
                # members whose timers they shorten. Queued like any suspicion, so it replaces
                # the queued one with a fresh budget: keeping the old count (our rule while
                # whole budgets were pushed) left a confirmation that came while the suspicion
                # was still queued to probes and acks, too slow to shorten anyone's timer once
                # rounds push only the first transmissions. One accuser per message: a
                # suspicion carrying every accuser we knew (tried, issue 14) cut gossip by ~4%
                # but let members reach the minimum timeout together, and members frozen for
                # up to 4 s were declared dead in the ``stalls`` scenario (2 per 600 s at
                # N=256, 0 before).
                self._out.broadcast(msg)
            return
        self._start_suspicion(m, msg.incarnation, msg.sender, now)
        self._out.broadcast(msg)

    def on_dead(self, msg: Dead, now: float, synced_by: str | None, from_addr: Addr | None = None) -> None:
        """``from_addr``: where the datagram came from, when the member it names sent it."""
        leaving = msg.sender == msg.node
        update: Status = LEFT if leaving else DEAD
        if synced_by is not None and not leaving:
            # Full state says dead: only suspect (memberlist mergeState), so a stale view cannot
            # kill a live member; a live member then refutes the suspicion.
            self.on_suspect(Suspect(msg.node, msg.incarnation, synced_by), now)
            return
        view = self._view
        if msg.incarnation > INCARNATION_SOFT_MAX:
            held = view.members.get(msg.node)
            msg = self._bounded(msg, held.incarnation if held is not None else 0, now)
        if msg.node == self.node_id:
            if supersedes(update, msg.incarnation, ALIVE, view.me.incarnation):
                if not leaving and not view.leaving:  # an old leave of ours is no accusation
                    self._events.append(DeclaredDead(msg.incarnation, now))
                self.refute(msg.incarnation)
            return
        m = view.members.get(msg.node)
        if m is None or not supersedes(update, msg.incarnation, m.status, m.incarnation):
            return
        if leaving and m.status in (ALIVE, SUSPECT) and (
                (from_addr is not None and from_addr != m.addr) or self._conflicts.ambiguous_leave(msg.node, now)):
            # Perhaps a twin's leave, not the live member's: sent by the member itself from an
            # address not its own, or gossiped soon after a claim of its id from another
            # address (see Conflicts.ambiguous_leave). Suspect it: the live process refutes.
            self._stats["ambiguous_leaves"] += 1
            self.on_suspect(Suspect(msg.node, msg.incarnation, self.node_id), now)
            return
        self.suspicions.pop(msg.node, None)
        m.incarnation = msg.incarnation
        view.set_status(m, update, now)
        self._set_changed(m, m.status, now, by=msg.sender)
        self._out.broadcast(msg)
        claim = self._conflicts.take_claim(msg.node)
        if claim is not None and claim.incarnation > m.incarnation:
            # The process that claimed this id from another address outlived the record we
            # kept: a restart at a new address (its claim is not resent, it was refused).
            self.on_alive(claim, now)

    # ------------------------------------------------------------------ suspicions

    def _start_suspicion(self, m: Member, incarnation: int, accuser: str, now: float) -> None:
        view = self._view
        n = view.live_count()
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
        view.live_changed(m)
        if was_alive:
            view.set_status(m, SUSPECT, now)
        self.suspicions[m.node_id] = Suspicion(incarnation=incarnation, accuser=accuser,
                                               start=now, k=k, min_s=min_s, max_s=max_s)
        self._stats["suspicions"] += 1
        if cfg.lifeguard and accuser != self.node_id and was_alive and n > 2 and \
                self._rng.random() < cfg.suspicion_reprobe_members / (n - 2):
            # Probe the suspect next (see MembershipConfig.suspicion_reprobe_members).
            self._prober.reprobe(m.node_id, now)
            self._stats["suspect_reprobes"] += 1
        if was_alive:
            self._set_changed(m, SUSPECT, now, by=accuser)

    def expire_suspicions(self, now: float) -> None:
        """Last-chance pings that are due, then verdicts that are due (or deferred)."""
        if self._awareness.enabled:
            self._last_chance_pings(now)
        threshold = self.config.loop_lag_threshold_s
        for node_id in [n for n, s in self.suspicions.items() if s.deadline <= now]:
            s = self.suspicions[node_id]
            if self._awareness.enabled and (now - s.deadline > threshold or now - self.woke_at < threshold):
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

    def _last_chance_pings(self, now: float) -> None:
        """One probe timeout before a suspicion would expire, ping the suspect ourselves, with
        the suspicion attached (our addition to Lifeguard's buddy system, IV-C). A member that
        was frozen answers as soon as it wakes, and the ack carries its refutation straight
        to us; relayed gossip of that refutation may come too late for a member whose
        verdict is due within a gossip round or two of the wake-up. One datagram per held
        suspicion that is still open at that point (none when refutations arrive in time)."""
        ahead = self.config.probe_timeout_s
        for node_id, s in self.suspicions.items():
            if s.last_chance_sent or now < s.deadline - ahead:
                continue
            s.last_chance_sent = True
            m = self._view.members.get(node_id)
            if m is None or m.status != SUSPECT:
                continue
            self._stats["last_chance_pings"] += 1
            head: list[Message] = [Ping(self._prober.next_seq(), node_id),
                                   Suspect(node_id, m.incarnation, self.node_id)]
            self._out.send(m.addr, [self._out.codec.encode_message(x) for x in head])

    def _suspicion_expired(self, node_id: str, now: float) -> None:
        s = self.suspicions.pop(node_id)
        m = self._view.members.get(node_id)
        if m is None or m.status != SUSPECT or m.incarnation != s.incarnation:
            return
        self._stats["deaths_declared"] += 1
        self.on_dead(Dead(node_id, m.incarnation, self.node_id), now, synced_by=None)

    # ------------------------------------------------------------------ ourselves

    def refute(self, accused_incarnation: int) -> None:
        if self._view.leaving:
            return
        self._stats["refutations"] += 1
        # Having to refute means others could not reach us in time: we may be the slow one
        # (Lifeguard IV-A).
        self._awareness.apply(1)
        self.bump_incarnation(accused_incarnation)

    def bump_incarnation(self, at_least: int) -> None:
        """Raise our incarnation above ``at_least`` and gossip our ``Alive``."""
        me = self._view.me
        if me.incarnation >= INCARNATION_MAX:
            # Nothing to outbid with: only forged updates get here (``bounded_incarnation``).
            self._stats["incarnation_exhausted"] += 1
            return
        me.incarnation = min(max(me.incarnation, at_least) + 1, INCARNATION_MAX)
        self._view.live_changed(me)
        self._out.broadcast(Alive(self.node_id, me.incarnation, me.addr, me.meta))

    def _bounded(self, msg: _Update, held: int, now: float) -> _Update:
        """``msg`` at the incarnation ``bounded_incarnation`` allows over ``held`` (only for
        incarnations above the soft maximum: never on honest traffic)."""
        stepped = self._stepped_at
        may_step = now - stepped.get(msg.node, -math.inf) >= INCARNATION_STEP_INTERVAL_S
        incarnation = bounded_incarnation(msg.incarnation, held, may_step)
        if incarnation > max(INCARNATION_SOFT_MAX, held + 1):
            if len(stepped) >= 4096:
                stepped.clear()
            stepped[msg.node] = now
        if incarnation == msg.incarnation:
            return msg
        self._stats["incarnations_bounded"] += 1
        return dataclasses.replace(msg, incarnation=incarnation)

    def _set_changed(self, m: Member, kind: EventKind, now: float, by: str = "") -> None:
        self._events.append(MemberEvent(kind, m.info(), now, by))

