"""Exclusive ownership: one sans-I/O state machine that decides when this member may process a
partition, so that no two members process it at once - with no lease store.

Theory of operation
===================

Placement (``placement.table``) says who *should* lead each partition given a view. Views
differ between members for a while after every change, and in a network split they differ for
as long as the split lasts, so "lead it when my table says so" gives two owners. This core
turns the table into *ownership* with four rules. It takes the view, handoff messages and
``now`` as inputs and returns actions (``Acquired``, ``Release``, ``Ended``) and messages to
send; it never reads a clock, so the node and the simulator run it unchanged.

1. **Handoff, not hand-over** (Kafka KIP-429's revoke-then-assign, member to member). A member
   that stops leading a partition it owns *releases* it: the application drains (``Release``
   with a deadline of ``handoff_timeout_s``), and only when it reports done (or the deadline
   passes) does ownership end (``Ended``); then a ``Note(partition, epoch, payload)`` goes to
   the new leader, resent until acknowledged. A member acquires a partition from a live
   previous holder *only* on such a note. Notes are consumed once: a note's epoch at or below
   what the receiver knows is stale and dropped; a receiver that does not lead the partition
   passes it on (as its own note) to the member it believes leads it. This needs no timing
   assumption: a note exists only after its sender stopped.

2. **Takeover from a dead holder, after a grace.** A crashed holder sends no note. The member
   that leads a partition whose awaited holder is dead (or left without its note arriving)
   acquires it ``takeover_grace_s`` after learning of the death, and only while it holds
   quorum (rule 3). The holder it waits for starts as the partition's leader in its previous
   table; a member that is itself still waiting when the partition moves on tells the new
   leader whom it was waiting for (``Redirect``), so chains of quick changes end at the member
   that really holds the partition.

3. **Keep-majority over the last stable view** (Akka's split brain resolver). The *stable
   view* is the set of alive members once the view has been unchanged, with no suspects, for
   ``stable_after_s``; a new stable view is adopted only if it contains a quorum of the old one,
   so a minority can never make itself a majority by forgetting the others. A member *holds
   quorum* while the members of the stable view that it sees alive and not suspect (itself
   included) are more than half of it, or exactly half including the tie-breaker (the
   smallest id of the stable view): a 50/50 split keeps exactly one side. A member also loses
   quorum when it has heard nothing from anyone for ``isolation_s`` (a lone member learns it is
   cut off in one probe period instead of one period per member). Without quorum a member
   *fences*: it releases everything with a deadline of ``fence_drain_s`` and takes nothing.

4. **Self-fencing after a freeze** (Cassandra distrusts its own view after a pause > 5 s). The
   driver calls the core at least every ``tick_s``; if more than ``freeze_fence_s`` passed since
   the last call, the process was frozen: ownership is considered to have ended
   ``freeze_fence_s`` after the last call (nothing ran in between, and the worker API checks
   ``valid_until`` before each unit of work), and the member re-acquires only through rules 1-2,
   as if it had been declared dead (it may have been).

The safety inequality (pause deadline vs the earliest takeover). A member x that is cut off
at time t0 is convicted by the other side no earlier than t0 + suspicion_min_s (SWIM: a
suspicion needs a failed probe after t0 and lasts at least the minimum timeout), and its
partitions are taken ``takeover_grace_s`` after that. x must have *finished* releasing by then,
measured on clocks whose *rates* differ by at most ``max_drift`` (no synchronised wall clock)::

    (detect_s + fence_drain_s) * (1 + max_drift) <= (suspicion_min_s + takeover_grace_s) * (1 - max_drift)

where detect_s is how long x needs to notice: ``isolation_s`` for a member cut off alone, and
the time for its view to show the other side suspect for a larger minority (see
docs/ownership.md for what is and is not guaranteed, and the measured figures).
``check_inequality`` evaluates the rule for a config; ``ExclusiveConfig`` rejects settings
that break it for the isolated case.

Fencing tokens (Kleppmann, "How to do distributed locking", 2016): every acquisition carries
an epoch one above the highest epoch this member knows for the partition (from notes) and
above every epoch it has used or seen on any note, so a store that remembers the highest
epoch per partition rejects a stale writer. After a crash takeover the new epoch exceeds the
dead holder's only if the taker saw an epoch at least as high (docs/ownership.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from .table import PlacementTable

__all__ = [
    "ExclusiveConfig", "Ownership", "Acquired", "Release", "Ended", "Note", "NoteAck", "Redirect",
    "Action", "Message", "check_inequality",
]


@dataclass(frozen=True)
class ExclusiveConfig:
    """Timing of the ownership rules (module docstring). Units in the names."""

    #: Longest a graceful release may drain before ownership ends anyway.
    handoff_timeout_s: float = 5.0
    #: A takeover from a dead holder waits this long after the death is known.
    takeover_grace_s: float = 1.0
    #: A fenced release (quorum lost, isolation) gets this long to drain.
    fence_drain_s: float = 1.0
    #: Heard nothing from anyone this long: cut off, fence (about two probe periods).
    isolation_s: float = 2.0
    #: The view must be unchanged, without suspects, this long to become the stable view.
    stable_after_s: float = 2.0
    #: More than this between two calls into the core means the process was frozen.
    freeze_fence_s: float = 1.5
    #: The driver is asked to call in at least this often (``get_timer``).
    tick_s: float = 0.25
    #: Unacknowledged notes and redirects are resent this often.
    resend_s: float = 0.5
    #: Bound on the relative clock *rate* difference between members (1e-3 = 1 ms/s; quartz
    #: oscillators are specified at 20-100 ppm).
    max_drift: float = 1e-3
    #: The membership's minimum suspicion timeout (``MembershipConfig.suspicion_min_s``): the
    #: earliest another member can convict this one after it is cut off.
    suspicion_min_s: float = 3.0

    def __post_init__(self) -> None:
        for name in ("handoff_timeout_s", "takeover_grace_s", "fence_drain_s", "isolation_s",
                     "stable_after_s", "freeze_fence_s", "tick_s", "resend_s", "suspicion_min_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if not 0 <= self.max_drift < 0.1:
            raise ValueError(f"max_drift must be in [0, 0.1), got {self.max_drift!r}")
        if self.tick_s >= self.freeze_fence_s:
            raise ValueError("tick_s must be shorter than freeze_fence_s (a tick would look like a freeze)")
        slack = check_inequality(self, self.isolation_s)
        if slack < 0:
            raise ValueError(
                f"unsafe timing: a member cut off alone finishes releasing {-slack:.3f} s after the "
                f"earliest takeover; need (isolation_s + fence_drain_s)(1+drift) <= "
                f"(suspicion_min_s + takeover_grace_s)(1-drift)")


def check_inequality(config: ExclusiveConfig, detect_s: float) -> float:
    """Seconds of margin between the latest end of a fenced member's ownership and the
    earliest takeover of its partitions, for a member that needs ``detect_s`` to notice it is
    cut off (negative: unsafe). Module docstring, "The safety inequality"."""
    latest_end = (detect_s + config.fence_drain_s) * (1 + config.max_drift)
    earliest_takeover = (config.suspicion_min_s + config.takeover_grace_s) * (1 - config.max_drift)
    return earliest_takeover - latest_end


# ----------------------------------------------------------------------------- outputs

@dataclass(frozen=True)
class Acquired:
    """Start processing ``partition``: fencing ``epoch``, the previous owner's ``payload``."""
    partition: int
    epoch: int
    payload: Any
    at: float


@dataclass(frozen=True)
class Release:
    """Stop processing ``partition``: drain, then call ``Ownership.release_done`` before
    ``deadline`` (after it, ownership ends anyway). ``reason``: moved, fenced, leaving."""
    partition: int
    deadline: float
    reason: str
    at: float


@dataclass(frozen=True)
class Ended:
    """Ownership of ``partition`` ended at ``at`` (may be earlier than now after a freeze)."""
    partition: int
    epoch: int
    at: float
    timed_out: bool = False


Action = Union[Acquired, Release, Ended]


@dataclass(frozen=True)
class Note:
    """The sender stopped owning ``partition`` at ``epoch``; the receiver may acquire it."""
    partition: int
    epoch: int
    payload: Any = None


@dataclass(frozen=True)
class NoteAck:
    partition: int
    epoch: int


@dataclass(frozen=True)
class Redirect:
    """The sender did not hold ``partition``: it was waiting for ``holder``."""
    partition: int
    holder: str
    epoch: int


Message = Union[Note, NoteAck, Redirect]


# ----------------------------------------------------------------------------- state

@dataclass
class _Owned:
    epoch: int
    releasing: bool = False
    deadline: float = 0.0
    reason: str = ""


@dataclass
class _Waiting:
    holder: str  # whom a note is expected from
    self_fenced_at: float | None = None  # holder is this member, which released without a note


@dataclass
class _Outgoing:
    dst: str
    msg: Message
    next_send: float


@dataclass
class Counters:
    acquired: int = 0
    acquired_by_note: int = 0
    acquired_by_takeover: int = 0
    released: int = 0
    handoffs_timed_out: int = 0
    fences: int = 0
    freezes: int = 0
    notes_sent: int = 0
    notes_stale: int = 0
    notes_forwarded: int = 0
    redirects: int = 0


class Ownership:
    """The ownership state of one member (module docstring). Drive it with the view, messages
    and ``now``; read ``actions()``, ``messages()`` and ``get_timer()`` after every call."""

    def __init__(self, me: str, config: ExclusiveConfig, tables: Callable[[Mapping[str, float]], PlacementTable],
                 now: float, *, founder: bool) -> None:
        self.me = me
        self.config = config
        self._tables = tables
        self.view: dict[str, float] = {me: 0.0}
        self.suspects: set[str] = set()
        self.gone: dict[str, float] = {}  # dead or left member -> when this member learned it
        self.table: PlacementTable | None = None
        self.owned: dict[int, _Owned] = {}
        self.waiting: dict[int, _Waiting] = {}
        self.free: dict[int, tuple[int, Any, str]] = {}  # notes held: (epoch, payload, sender)
        self.known_epoch: dict[int, int] = {}
        self._consumed: set[tuple[str, int, int]] = set()  # notes taken: (sender, partition, epoch)
        self.epoch_clock = 0
        self.stable: frozenset[str] = frozenset([me]) if founder else frozenset()
        self._view_changed_at = now
        self._last_run = now
        self._last_heard = now
        self.joined = founder  # heard from the cluster (or started it)
        self.leaving = False
        self.fenced_reason: str | None = None
        self._out: list[_Outgoing] = []
        self._actions: list[Action] = []
        self.counters = Counters()
        self._founder = founder

    # ------------------------------------------------------------------ inputs

    def set_view(self, view: Mapping[str, float], suspects: Iterable[str], gone: Mapping[str, str], now: float) -> None:
        """The live members (alive and suspect, id -> weight, this member included), which of
        them are suspect, and members seen dead or left since the last call (id -> kind)."""
        self._enter(now)
        view = dict(view)
        view.setdefault(self.me, self.view.get(self.me, 0.0))
        if view != self.view or set(suspects) != self.suspects:
            self._view_changed_at = now
        if any(m != self.me for m in view):
            self.joined = True
        for m in gone:
            self.gone.setdefault(m, now)
            if gone[m] == "left":
                self.stable = self.stable - {m}
        for m in view:
            self.gone.pop(m, None)
        self.view = view
        self.suspects = set(suspects) - {self.me}
        self._update()

    def heard(self, now: float) -> None:
        """A datagram from another member arrived (for the isolation rule)."""
        self._last_heard = now

    def receive(self, src: str, msg: Message, now: float) -> None:
        self._enter(now)
        if isinstance(msg, NoteAck):
            self._out = [o for o in self._out if not (o.dst == src and isinstance(o.msg, (Note, Redirect))
                                                       and o.msg.partition == msg.partition
                                                       and o.msg.epoch == msg.epoch)]
            return
        self._send(src, NoteAck(msg.partition, msg.epoch), now)  # sent once (see messages)
        if isinstance(msg, Note):
            self._on_note(src, msg)
        elif isinstance(msg, Redirect):
            w = self.waiting.get(msg.partition)
            if w is not None and w.holder == src and msg.epoch >= self.known_epoch.get(msg.partition, 0):
                w.holder = msg.holder
                if msg.holder == self.me:
                    # The member that would have taken it from us never did: nobody holds it.
                    w.self_fenced_at = now
        self._update()

    def release_done(self, partition: int, now: float, payload: Any = None) -> None:
        """The application finished releasing ``partition`` (drained, checkpointed)."""
        self._enter(now)
        o = self.owned.get(partition)
        if o is not None and o.releasing:
            self._end(partition, now, payload, timed_out=False)
        self._update()

    def declared_dead(self, now: float) -> None:
        """The cluster declared this member dead: others may already hold its partitions."""
        self._enter(now)
        self._drop_all(now, now)
        for w in self.waiting.values():
            w.self_fenced_at = None  # a taker may hold them: wait for its note or redirect
        self._update()

    def leave(self, now: float) -> None:
        """Graceful leave: release everything with notes; ``left_ready`` says when to announce."""
        self._enter(now)
        self.leaving = True
        self._update()

    def handle_timer(self, now: float) -> None:
        self._enter(now)
        self._update()

    # ------------------------------------------------------------------ outputs

    def actions(self) -> list[Action]:
        out, self._actions = self._actions, []
        return out

    def messages(self, now: float) -> list[tuple[str, Message]]:
        """Messages due now (resends included)."""
        due = []
        keep = []
        for o in self._out:
            if o.dst in self.gone:
                continue  # a dead receiver: its successor takes over after the grace (rule 2)
            if o.next_send <= now:
                due.append((o.dst, o.msg))
                if isinstance(o.msg, NoteAck):
                    continue
                o.next_send = now + self.config.resend_s
            keep.append(o)
        self._out = keep
        return due

    def get_timer(self) -> float:
        c = self.config
        t = self._last_run + c.tick_s
        for o in self.owned.values():
            if o.releasing:
                t = min(t, o.deadline)
        for o in self._out:
            t = min(t, o.next_send)
        return t

    @property
    def left_ready(self) -> bool:
        """Leaving, and every partition released and its note acknowledged."""
        return self.leaving and not self.owned and not any(isinstance(o.msg, Note) for o in self._out)

    def holds_quorum(self, now: float) -> bool:
        return self._quorum(now) is None

    def state_counts(self) -> dict[str, int]:
        releasing = sum(1 for o in self.owned.values() if o.releasing)
        return {"owned": len(self.owned) - releasing, "releasing": releasing, "acquiring": len(self.waiting),
                "paused": int(self.fenced_reason is not None)}

    # ------------------------------------------------------------------ rules

    def _enter(self, now: float) -> None:
        c = self.config
        if now - self._last_run > c.freeze_fence_s:
            self.counters.freezes += 1
            self._drop_all(now, self._last_run + c.freeze_fence_s)
            for w in self.waiting.values():
                if w.self_fenced_at is not None:
                    w.self_fenced_at = now  # a grace from waking: news of our death arrives first
            self._view_changed_at = now  # the view is stale: no stable view before it settles
            self._last_heard = min(self._last_heard, self._last_run)
        self._last_run = now

    def _quorum(self, now: float) -> str | None:
        """None when this member holds quorum, else why not."""
        if not self.joined:
            return "not joined yet"
        if len(self.view) > 1 and now - self._last_heard > self.config.isolation_s:
            return f"heard from no member for {now - self._last_heard:.1f} s"
        stable = self.stable
        if not stable:
            return "no stable view yet"
        seen = {m for m in stable if m in self.view and m not in self.suspects}
        if 2 * len(seen) > len(stable) or (2 * len(seen) == len(stable) and min(stable) in seen):
            return None
        return f"sees {len(seen)} of {len(stable)} members of the last stable view (tie-breaker {min(stable)})"

    def _maybe_adopt_stable(self, now: float) -> None:
        if self.suspects or now - self._view_changed_at < self.config.stable_after_s:
            return
        candidate = frozenset(self.view)
        if candidate == self.stable or not self.joined:
            return
        reference = self.stable or frozenset(self.view) | frozenset(m for m in self.gone)
        common = candidate & reference
        if 2 * len(common) > len(reference) or (2 * len(common) == len(reference) and min(reference) in common):
            self.stable = candidate

    def _update(self) -> None:
        now = self._last_run
        self._maybe_adopt_stable(now)
        reason = self._quorum(now)
        if reason is not None and self.joined and self.fenced_reason is None and self.owned:
            self.counters.fences += 1
        if reason is None and self.fenced_reason is not None:
            # Back in quorum: the news of what happened meanwhile (our death, a takeover)
            # arrives with the first exchanges, so the grace to take our own partitions back
            # starts now.
            for w in self.waiting.values():
                if w.self_fenced_at is not None:
                    w.self_fenced_at = now
        self.fenced_reason = reason
        self._retable(now)
        # Deadlines of releases.
        for p, o in list(self.owned.items()):
            if o.releasing and now >= o.deadline:
                self._end(p, o.deadline, None, timed_out=True)
        self._try_acquire(now)

    def _retable(self, now: float) -> None:
        c = self.config
        view = {m: w for m, w in self.view.items() if w > 0}
        if self.leaving:
            view.pop(self.me, None)
        old = self.table
        self.table = self._tables(view) if (view and self.joined) else None
        fenced = self.fenced_reason is not None
        for p, o in self.owned.items():
            if self.leaving:
                reason, deadline = "leaving", now + c.handoff_timeout_s
            elif fenced:
                reason, deadline = "fenced", now + c.fence_drain_s
            elif self._leader(p) != self.me:
                reason, deadline = "moved", now + c.handoff_timeout_s
            else:
                continue  # ours (a release already under way keeps draining: the app was told)
            if not o.releasing or deadline < o.deadline:
                o.releasing, o.reason, o.deadline = True, reason, min(deadline, o.deadline) if o.releasing else deadline
                self._actions.append(Release(p, o.deadline, reason, now))
        if self.table is None:
            return
        for p in list(self.free):
            lead = self._leader(p)
            # Pass a note on to the leader, never back to its sender: a sender that this view
            # still shows as leader is leaving or moving, and the view will catch up.
            if lead is not None and lead != self.me and lead != self.free[p][2]:
                epoch, payload, _ = self.free.pop(p)
                self.counters.notes_forwarded += 1
                self._send(lead, Note(p, epoch, payload), now)
        mine = self._led_by_me()
        for p in list(self.waiting):
            if p not in mine:
                self._pass_on(p, self.waiting.pop(p), now)
        if self.leaving:
            return
        # Whom to expect each newly led partition from: its leader before this change (for a
        # member's first table, the leader without it: the cluster it joined).
        prev = old if old is not None else self._tables_without_me()
        for p in mine:
            if p in self.owned or p in self.waiting:
                continue
            holder = prev.owner(p) if prev is not None else self.me
            # Only a founder (no table before, nobody else in view) expects a partition from
            # itself: it starts the cluster and owns everything at once.
            self.waiting[p] = _Waiting(holder, now - c.takeover_grace_s if holder == self.me else None)

    def _pass_on(self, p: int, w: _Waiting, now: float) -> None:
        """A partition this member waited for now belongs to another: tell the new leader."""
        lead = self._leader(p)
        if lead is None or lead == self.me:
            return
        epoch = self.known_epoch.get(p, 0)
        if w.holder != self.me:
            self.counters.redirects += 1
            self._send(lead, Redirect(p, w.holder, epoch), now)
        elif w.self_fenced_at is not None:
            # This member was the last holder and stopped without a note: write it now.
            self.counters.notes_sent += 1
            self._send(lead, Note(p, epoch, None), now)
        # else: declared dead, whoever took over will hand it on (known gap: see docs).

    def _tables_without_me(self) -> PlacementTable | None:
        others = {m: w for m, w in self.view.items() if m != self.me and w > 0}
        return self._tables(others) if others else None

    def _led_by_me(self) -> set[int]:
        if self.table is None:
            return set()
        return set(self.table.owned_by(self.me, leader_only=True)) if self.me in self.table.members else set()

    def _leader(self, p: int) -> str | None:
        return self.table.owner(p) if self.table is not None else None

    def _try_acquire(self, now: float) -> None:
        if self.fenced_reason is not None or self.leaving:
            return
        c = self.config
        for p, w in list(self.waiting.items()):
            if p in self.free:
                epoch, payload, _ = self.free.pop(p)
                self._acquire(p, epoch, payload, now, by_note=True)
                continue
            if w.holder == self.me:
                if w.self_fenced_at is not None and now >= w.self_fenced_at + c.takeover_grace_s:
                    self._acquire(p, self.known_epoch.get(p, 0), None, now, by_note=False)
                continue
            since = self.gone.get(w.holder)
            if since is None and w.holder not in self.view:
                since = self.gone.setdefault(w.holder, now)
            if since is not None and now >= since + c.takeover_grace_s:
                self._acquire(p, self.known_epoch.get(p, 0), None, now, by_note=False)

    def _acquire(self, p: int, epoch: int, payload: Any, now: float, *, by_note: bool) -> None:
        self.waiting.pop(p, None)
        new = max(epoch, self.known_epoch.get(p, 0), self.epoch_clock) + 1
        self.epoch_clock = new
        self.known_epoch[p] = new
        self.owned[p] = _Owned(new)
        self.counters.acquired += 1
        if by_note:
            self.counters.acquired_by_note += 1
        else:
            self.counters.acquired_by_takeover += 1
        self._actions.append(Acquired(p, new, payload, now))

    def _end(self, p: int, at: float, payload: Any, *, timed_out: bool) -> None:
        o = self.owned.pop(p)
        self.counters.released += 1
        if timed_out:
            self.counters.handoffs_timed_out += 1
        self._actions.append(Ended(p, o.epoch, at, timed_out))
        lead = self._leader(p)
        if lead is not None and lead != self.me:
            self._send(lead, Note(p, o.epoch, payload), self._last_run)
            self.counters.notes_sent += 1
        elif not self.leaving:
            # Still (or again) ours: nobody else can hold it, take it back at once unless fenced.
            self.waiting[p] = _Waiting(self.me, self_fenced_at=at - self.config.takeover_grace_s)
            if self.fenced_reason is not None:
                self.waiting[p].self_fenced_at = at

    def _drop_all(self, now: float, at: float) -> None:
        """End every ownership at ``at`` without notes (declared dead, or frozen)."""
        for p in list(self.owned):
            o = self.owned.pop(p)
            self.counters.released += 1
            self._actions.append(Ended(p, o.epoch, min(at, now)))
            self.waiting[p] = _Waiting(self.me, self_fenced_at=now)

    def _on_note(self, src: str, note: Note) -> None:
        p = note.partition
        key = (src, p, note.epoch)
        if key in self._consumed or p in self.owned:
            self.counters.notes_stale += 1  # a resend whose ack was lost, or a duplicate
            return
        self._consumed.add(key)
        self.known_epoch[p] = max(self.known_epoch.get(p, 0), note.epoch)
        self.epoch_clock = max(self.epoch_clock, note.epoch)
        self.free[p] = (note.epoch, note.payload, src)  # acquired or passed on by _update

    def _send(self, dst: str, msg: Message, now: float) -> None:
        self._out.append(_Outgoing(dst, msg, now))

