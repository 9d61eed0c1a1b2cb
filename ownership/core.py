"""Exclusive ownership: one sans-I/O state machine that decides when this member may process a
partition, so that no two members process it at once - with no lease store.

Theory of operation
===================

Placement (``placement.table``) says who *should* lead each partition given a view. Views
differ between members for a while after every change, and in a network split for as long as
the split lasts, so "lead it when my table says so" gives two owners. This core turns the table
into *ownership*. It takes the view, messages and ``now`` as inputs and returns actions
(``Acquired``, ``Release``, ``Ended``) and messages to send; it never reads a clock, so the node
and the simulator run it unchanged. Rules (docs/ownership.md numbers them the same way):

1. **A member owns only while it holds a quorum lease** (``ownership.lease``): a majority
   of the witnesses of the last stable view confirmed it within ``lease_s``, counted from when
   it sent the request. A member that cannot show that - cut off, on the losing side of a split,
   frozen, condemned - starts releasing ``fence_drain_s`` before its lease runs out, and its
   ownership ends when the lease does (``Ended.at`` is then the lease's end even if it noticed
   later: the worker API checks ``valid_until`` before each unit of work). The next stable view
   is *chosen* by the witnesses of the current one (``ownership.views``); a member
   proposes its view once it settled, while holding a lease, if it keeps a majority of the
   current witnesses.

2. **Placement from the stable view**, not the local view: every member holding a lease under
   one stable view computes the same leader, so a taker and the receiver of a note agree on
   where a partition went.

3. **Handoff, not hand-over** (Kafka KIP-429: revoke, then assign). A member that stops leading
   a partition it owns releases it: the application drains (``Release``, deadline
   ``handoff_timeout_s``); then ownership ends (``Ended``) and ``Note(partition, epoch, payload)``
   goes to the new leader, resent until acknowledged. A member acquires from a live holder only
   on such a note, and takes notes on only under a lease (a note held is ownership of that
   lease generation). Notes are consumed once and never passed back to their sender.

4. **Takeover from a holder that left the stable view, proven**: a witness majority condemns
   it, and the taker waits until its lease is over for certain (``QuorumLease.free_at``) and
   ``takeover_grace_s`` after noticing. From the leader of the view just before, a taker that
   held that view skips rule 9's wait (``_fast_takeover``).

5. **Coming back**: a member that dropped partitions (or held notes) takes them back only on a
   clean verdict from the witnesses of its last renewal, or when the member that waited to take
   one says it never did (``Redirect`` naming it).

6. **Nobody gives a right away twice**: a ``Query`` is answered with the member one waits for or
   passed the partition to, never with "not me, so nobody" (that says nothing while views
   differ).

7. **Restarts**: a process that finds its id already in its first stable view and gets no note
   condemns its own id (stopping a previous process, if alive) and, ``handoff_timeout_s`` after
   that view, takes what it waits for once the witnesses prove the old lease over.

9. **Steps, jumps and the creation wait**: ownership carries over a view change only on a
   step from the view the lease was granted under (releases under way then end with that
   lease, and everything does if this member is not in the new view); any other change drops
   everything first. Any acquisition but a note waits, under a lease of the current view,
   ``lease_s`` (1+rho)/(1-rho) after learning it (``+ handoff_timeout_s`` after a jump): by then
   every ownership of an older view has ended (``_installed``; the argument is in
   docs/ownership.md, rule 9). This, not rules 4-7, is what makes creation safe across changes
   of the witness set; those rules decide when a creation is useful.

10. **The census**: a leader that waited ``query_after_s`` in vain creates the partition once
    every other member of its stable view, answering in that view, disowns it (``Census``,
    ``Disown``; ``_run_census``). It is what a partition nobody holds (a right dropped with an
    unclean verdict, a note refused or expired across views) needed to be owned again.

11. **Founding again**: a member restarted without seeds of its own (``may_found``: the node's
    members file gave it the members it knew) asks every member it sees whether it holds a
    stable view (``ViewAsk``). One that does answers with it (``Decided``), and this member
    joins that cluster; it founds only when every member it sees, its view settled and
    ``2 lease_s`` after its start, answered ``NoView``, none of them forms a view otherwise
    (a genesis, a restored view) and none that may found has a smaller id. Its first view is
    numbered by the driver's clock (``first_view``), so epochs rise across the refounding.
    Alone it waits. What it cannot rule out is a running cluster it cannot reach.

12. **Load figures**: with ``loads_every_s``, a member holding a lease proposes its stable view
    again, unchanged but for its newer load figures (``set_loads``), so that a rebalance plans
    from figures a view committed (``View.loads``); a step, so nothing moves (docs/ownership.md).

13. **Pins**: a member given the pins a rebalance planned from its stable view (``set_pins``)
    proposes that view again with them (``View.pins``), first-ranked first, while the stable
    view still holds the pins and figures the plan started from. Pins decide placement with
    the weights, so such a view moves the partitions whose leader it changes by handoff, as a
    weight change does; every view proposed for anything else keeps the stable view's pins.

Fencing tokens (Kleppmann, "How to do distributed locking", 2016): every acquisition carries an
epoch one above the highest epoch this member knows for the partition (from notes) and above
every epoch it has used or seen on any note, so a store that remembers the highest epoch per
partition rejects a stale writer. An epoch is used only within a reserve a witness quorum
confirmed, and a taker learns the dead holder's reserve from the condemnation quorum
(``QuorumLease.epoch_floor``). Every acquisition but a note under stable view n takes an epoch
above ``view_epoch(n)`` (``_creation_floor``): rule 9 puts it after every ownership under an
older view, and none of those reached that floor. So epochs rise along handoffs, crash
takeovers, take-backs, restarts and the census alike (rule 8 in docs/ownership.md, with what
can still make them fall: a restarted witness).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Any

from placement.errors import InvalidConfigError
from placement.pins import decode_pins
from placement.table import PlacementTable

from .config import ExclusiveConfig
from .lease import (
    MAX_FIRST_VIEW,
    Install,
    LeaseMessage,
    LeaseReq,
    QuorumLease,
    WitnessState,
    view_epoch,
    witness_set,
    witnesses_of,
)
from .messages import (
    CENSUS_BATCH,
    FORMS,
    MAY_FOUND,
    WAITS,
    Acquired,
    Action,
    Census,
    Disown,
    Ended,
    Message,
    Note,
    NoteAck,
    NoteRefused,
    NoView,
    Query,
    Redirect,
    Release,
    ViewAsk,
)
from .views import Decided, View

__all__ = ["Ownership", "Counters"]

#: A member whose settled view has differed from the stable view for this many
#: ``stable_after_s`` since it learned that stable view proposes its own, news or not
#: (``_maybe_propose``).
STALE_STABLE_VIEWS = 4


# ----------------------------------------------------------------------------- state

@dataclass
class _Owned:
    epoch: int
    releasing: bool = False
    deadline: float = 0.0
    reason: str = ""


@dataclass
class _Waiting:
    holder: str  # whom a note is expected from (this member: it dropped the partition itself)
    since: float
    generation: int  # lease generation when the entry was made
    cleared: bool = False  # nobody holds it (founder; or the would-be taker said it never took it)
    #: The stable view whose table named ``holder`` as the leader (-1: unknown). Rule 4's fast
    #: takeover needs the view just before the current one.
    basis: int = -1
    #: The highest epoch reserve the witnesses granted ``holder`` (rule 8), while condemning it:
    #: passed on with the entry, so whoever takes the partition starts above it.
    floor: int = 0
    asked: float = -math.inf
    asked_who: str = ""


@dataclass
class _Outgoing:
    dst: str
    msg: Message
    next_send: float
    once: bool  # sent once (acks, queries), else resent until acknowledged
    generation: int  # the lease generation when it was queued (a note refused later: ``_refused``)


@dataclass(frozen=True, eq=False)  # compared by the identity of its objects, never by value
class _Against:
    """A local view against a stable view (``Ownership._against_stable``): the same weights;
    the stable view's members missing from the local one; every local member's weight the
    stable view's (the local view adds no member and changes no weight)."""
    view: Mapping[str, float]
    stable: View
    same: bool
    removed: Set[str]
    weights_kept: bool


@dataclass
class Counters:
    acquired: int = 0
    acquired_by_note: int = 0
    acquired_by_takeover: int = 0
    acquired_back: int = 0
    acquired_by_census: int = 0
    released: int = 0
    handoffs_timed_out: int = 0
    lease_losses: int = 0
    notes_sent: int = 0
    notes_duplicate: int = 0
    notes_stale: int = 0
    notes_forwarded: int = 0
    notes_refused: int = 0  # notes this member refused while leaving (``NoteRefused``)
    notes_expired: int = 0  # unacknowledged when their view passed: dropped (rule 9)
    redirects: int = 0
    queries: int = 0
    censuses: int = 0  # Census messages sent (rule 10)
    disowned: int = 0  # partitions this member answered a census for
    refounded: int = 0  # rule 11: clusters this member founded after asking every member it saw


class Ownership:
    """The ownership state of one member (module docstring). Drive it with the view, messages
    and ``now``; read ``actions()``, ``messages(now)`` and ``get_timer()`` after every call."""

    def __init__(self, me: str, config: ExclusiveConfig, tables: Callable[..., PlacementTable],
                 now: float, *, founder: bool, weight: float = 1.0, restored: WitnessState | None = None,
                 incarnation: int | None = None, may_found: bool = False, first_view: int = 1,
                 restored_yields: bool = False) -> None:
        self.me = me
        self.config = config
        #: ``tables(weights)`` or, when the stable view pins partitions, ``tables(weights, pins)``
        #: (partition -> member; ``PlacementTable``'s pins): a table function of a cluster that
        #: never pins takes one argument.
        self._tables = tables
        self._pins_of: tuple[bytes, dict[int, str]] = (b"", {})  # the stable view's pins, decoded
        #: Rule 13: the pins the driver gave (``set_pins``), the pins and figure time of the view
        #: they were planned from, and when they were given.
        self._pins_plan: tuple[bytes, bytes, int] | None = None
        self._pins_set_at = now
        self.bad_pins = 0  # stable views whose pins did not decode (placed as if unpinned)
        # A process that did not found the cluster may be a restart that forgot what it
        # promised as a witness: it takes no part in choosing views for a while.
        genesis = View.of(0, dict.fromkeys(config.bootstrap, 1.0)) if config.bootstrap and not founder else None
        self.lease = QuorumLease(me, witnesses=config.witnesses, lease_s=config.lease_s, renew_s=config.renew_s,
                                 resend_s=config.resend_s, max_drift=config.max_drift, now=now,
                                 fence_s=config.fence_drain_s, quiet_s=0.0 if founder else 2 * config.lease_s,
                                 restored=restored, genesis=genesis, restored_yields=restored_yields,
                                 per_group=config.witness_group_members)
        #: The incarnation a view this member founds or bootstraps carries (``View.inc``): the
        #: driver draws it at random; without one (the simulator, tests) it is a function of the
        #: member's id and start.
        self._incarnation = incarnation if incarnation else 1 + zlib.crc32(f"{me}@{now!r}".encode())
        self.view: dict[str, float] = {me: 0.0}
        #: The local view against the stable view (``_against_stable``) and this member's rank in
        #: the local view (``_rank``), each with the objects it was computed from: ``self.view``
        #: is only ever replaced, never changed in place, and a ``View`` is immutable, so they
        #: are computed again only when one of those objects changed.
        self._against: _Against | None = None
        self._ranked: tuple[object, int] | None = None
        #: No acquisition other than by note before then (rule 9): every ownership that could
        #: still exist under an older view has ended by then.
        self._create_after = math.inf
        self.suspects: set[str] = set()
        self.gone: dict[str, float] = {}  # dead or left member -> when this member learned it
        #: A holder this member waits for that is live here but not in the stable view -> since
        #: when (rule 4's grace). Not ``gone``: messages to a gone member are dropped, and this
        #: one is alive (once, every ack and note to a woken member was dropped for good).
        self._outside: dict[str, float] = {}
        self.table: PlacementTable | None = None
        self._table_num = -1  # the stable view ``table`` was computed from
        #: (stable view object, leaving, joined) that ``table`` was computed for: the table is a
        #: function of these alone, and the rule pass runs on every message and tick.
        self._table_basis: tuple[object, bool, bool] | None = None
        self._indexed: PlacementTable | None = None
        self._leaders: tuple[str, ...] = ()
        self._mine: frozenset[int] = frozenset()
        self.owned: dict[int, _Owned] = {}
        #: Bumped whenever a key of ``owned`` is added or removed (``_acquire``, ``_end``,
        #: ``_drop_all``): ``_retable`` tests "owns only what it leads" again only after a change.
        self._owned_changes = 0
        self._all_mine: tuple[frozenset[int], int, bool] | None = None  # (led set, changes, result)
        #: No releasing partition's deadline is before this (a lower bound: it is lowered when a
        #: release starts and made exact by the pass that ends the due ones), so the rule pass,
        #: run on every message and tick, need not walk every owned partition to find none due.
        self._release_due = math.inf
        #: Before then, in the steady state, a rule pass without an input the rules read would do
        #: nothing (``_steady``): set by ``get_timer`` after a pass, cleared by the next pass.
        self._quiet_until = -math.inf
        self.waiting: dict[int, _Waiting] = {}
        self.free: dict[int, tuple[int, Any, str]] = {}  # notes held: (epoch, payload, sender)
        self.known_epoch: dict[int, int] = {}
        self.epoch_clock = 0
        self._consumed: set[tuple[str, int, int]] = set()  # notes taken: (sender, partition, epoch)
        #: Partitions this member passed on: to whom (None: dropped without a clean verdict).
        self._passed: dict[int, str | None] = {}
        #: Members that refused a note under stable view ``_refusers_num`` (``NoteRefused``: they
        #: are leaving) and the table without them (``_handoff_target``); notes whose view passed
        #: before their receiver answered, in that view only, if it refuses them late:
        #: (receiver, partition, epoch) -> (note, lease generation when it was sent).
        self._refusers: set[str] = set()
        self._refusers_num = -1
        self._unanswered: dict[tuple[str, int, int], tuple[Note, int]] = {}
        self._detour: tuple[object, frozenset[str], PlacementTable | None] | None = None
        #: Partitions this member dropped itself and no longer leads: passed on by a note once a
        #: take-back would be allowed (``_retry_pass_on``).
        self._to_pass: dict[int, tuple[_Waiting, int]] = {}  # (entry, view number it left us in)
        #: Rule 10: answers to this member's census, in stable view ``_census_num`` only:
        #: partition -> {member: highest epoch it knows}; and when each member was last asked.
        self._census_num = 0
        self._census: dict[int, dict[str, int]] = {}
        self._census_asked: dict[str, float] = {}
        self._view_changed_at = now
        self._now = now
        self.joined = founder  # heard from the cluster (or started it)
        self._founder = founder
        self._restarted = False  # rule 7: set when the first stable view already names us
        self._first_stable_seen = False
        self._restart_seen_at = 0.0
        self.leaving = False
        self._leave_started = math.inf
        self.fenced_reason: str | None = None
        self._owned_this_generation = False
        self._out: list[_Outgoing] = []
        self._actions: list[Action] = []
        self.counters = Counters()
        self._weight = weight
        #: Rule 11: a member restarted without seeds of its own (the node's members file gave
        #: them) founds a cluster once every member it sees answers that it holds no view.
        self._may_found = may_found and not founder and not config.bootstrap
        self._started = now
        #: The number of the first view this member founds, if it does so now (later: plus the
        #: whole seconds since): the driver's clock in seconds, so that the epochs of a cluster
        #: founded anew (``view_epoch``) are above those of the cluster before it (rule 11).
        self._first_view = first_view
        self._ask_round = 0
        self._asks = 0
        self._ask_basis: frozenset[str] | None = None  # the local view the round asks about
        self._ask_sent: dict[str, float] = {}
        self._ask_answers: dict[str, int] = {}  # member -> its ``NoView.role`` in this round
        #: The latest load figures the driver gave (``set_loads``) and their logical time, and
        #: when this member learned a stable view whose figures differ from the view's before
        #: (``_loads_due_at``).
        self._loads: tuple[bytes, int] = (b"", 0)
        self._loads_set_at = now  # when ``_loads`` last changed
        self._loads_learned_at = now
        self._committed_loads = b""
        if founder:
            self._found(now)

    def _found(self, now: float) -> None:
        """Found a cluster: a first view of this member alone, of a new incarnation, numbered by
        the driver's clock (``first_view``) so that its epochs are above an earlier cluster's."""
        self._founder = self.joined = True
        # With the founder's own weight: a weight-0 founder (a witness) owns nothing even in
        # its first view.
        num = min(MAX_FIRST_VIEW, max(1, self._first_view + int(now - self._started)))
        self.lease.found({self.me: self._weight}, now, self._incarnation, num)
        self.lease.installs.clear()
        self._create_after = now  # nobody existed before the founder's first view
        # Its first round (to itself) confirms a reserve for its first creations (rule 8).
        self.lease.want(view_epoch(self.lease.num) + 1, now)

    # ------------------------------------------------------------------ inputs

    def set_view(self, view: Mapping[str, float], suspects: Iterable[str], now: float) -> None:
        """The live members (alive and suspect, id -> weight, this member included) and which of
        them are suspect. Members that drop out of the view (dead or left) are noted as gone."""
        self._now = now
        view = dict(view)
        view.setdefault(self.me, self.view.get(self.me, 0.0))
        suspects = set(suspects) - {self.me}
        if view != self.view or suspects != self.suspects:
            self._view_changed_at = now
        if view != self.view:
            self.lease.views.withdraw(view)  # a proposal of the old view is stale now
        if any(m != self.me for m in view):
            self.joined = True
        for m in self.view.keys() - view.keys():
            self.gone.setdefault(m, now)
        for m in view:
            if self.gone.pop(m, None) is not None:
                self.lease.forget(m)  # back: a later death needs a fresh proof
        self.view = view
        self.suspects = suspects
        self.lease.hint(view, healthy=view.keys() - suspects)
        self._update()

    def set_loads(self, codes: bytes, at_s: int, now: float) -> None:
        """The latest load figures this member knows: one byte per partition
        (``placement.rebalance.LoadReport.codes``), measured at logical time ``at_s`` (whole
        seconds). Views this member proposes commit them (``View.loads``), and with
        ``loads_every_s`` it proposes its stable view again to commit newer ones (rule 12)."""
        if type(at_s) is not int or at_s < 0:
            raise ValueError(f"at_s must be a non-negative whole number of seconds, got {at_s!r}")
        self._now = now
        loads = (bytes(codes), at_s if codes else 0)
        if loads != self._loads:
            self._loads, self._loads_set_at = loads, now
        self._update()

    def set_pins(self, pins: bytes, base: bytes, loads_at: int, now: float) -> None:
        """The pins a rebalance planned (``placement.pins.encode_pins``) from a stable view
        whose pins were ``base`` and whose figures were measured at ``loads_at``: this member
        proposes its stable view again with them while that view still holds both (rule 13), so
        pins planned from an older view never undo a newer plan."""
        self._now = now
        plan = (bytes(pins), bytes(base), loads_at)
        if plan != self._pins_plan:
            self._pins_plan, self._pins_set_at = plan, now
        self._update()

    def _table_for(self, weights: Mapping[str, float]) -> PlacementTable:
        """The table of ``weights`` with the stable view's pins (rule 13). Pins the table
        refuses (a partition out of range: a peer's bug, or a forged view) place as if there were
        none, as undecodable ones do: the same at every member, since all read the same bytes."""
        pins = self._stable_pins()
        if pins:
            try:
                return self._tables(weights, pins)
            except InvalidConfigError:
                self.bad_pins += 1
                self._pins_of = (self._pins_of[0], {})
        return self._tables(weights)

    def _stable_pins(self) -> dict[int, str]:
        raw = self.lease.views.view.pins
        known = self._pins_of
        if known[0] is not raw and known[0] != raw:
            try:
                decoded = decode_pins(raw)
            except InvalidConfigError:
                decoded = {}
                self.bad_pins += 1
            known = self._pins_of = (raw, decoded)
        return known[1]

    def receive(self, src: str, msg: Message, now: float) -> None:
        self.receive_many(src, (msg,), now)

    def receive_many(self, src: str, msgs: Iterable[Message], now: float) -> None:
        """Several messages from ``src`` (one datagram), then the rules run once."""
        self._now = now
        if now < self._quiet_until:
            msgs = list(msgs)
            requests = [m for m in msgs if isinstance(m, LeaseReq)]
            if len(requests) == len(msgs):
                # A witness answering renewals (every member's, each second) in the steady state:
                # what it does for them is not read by the rules, so unless a request taught it
                # a later view, the pass would do nothing (``_quiet_until``).
                for req in requests:
                    self.lease.receive(src, req, now)
                if self.lease.installs:
                    self._update()
                return
        acked: set[tuple[int, int]] = set()
        for msg in msgs:
            if isinstance(msg, NoteAck):
                acked.add((msg.partition, msg.epoch))
            else:
                self._receive(src, msg, now)
        if acked:  # one pass over what is being resent, however many acks came
            self._out = [o for o in self._out if not (o.dst == src and isinstance(o.msg, (Note, Redirect))
                                                       and (o.msg.partition, o.msg.epoch) in acked)]
            for p, epoch in acked:
                self._unanswered.pop((src, p, epoch), None)
        self._update()

    def _receive(self, src: str, msg: Note | NoteRefused | Redirect | Query | Census | Disown | ViewAsk | NoView
                 | LeaseMessage, now: float) -> None:
        """One message other than a ``NoteAck`` (``receive_many`` takes those in one pass)."""
        if isinstance(msg, Note):
            if msg.view < self.lease.num:
                # Sent under an older stable view: it may have been in flight while the right to
                # the partition was re-created (rule 9's creation covers owners, not notes on the
                # way). Acknowledged, so its sender stops, and never taken.
                self.counters.notes_stale += 1
                self._send(src, NoteAck(msg.partition, msg.epoch), once=True)
            elif self.leaving and (src, msg.partition, msg.epoch) not in self._consumed:
                # A leaving member would only hold the note, and its sender is most often leaving
                # too (two members restarted at once: each is the other's successor). Taken, it
                # left with it and the partition waited seconds for a takeover (issue 30); refused,
                # its sender hands it to the next member at once (``_refused``). (A resend of a
                # note taken before the leave is acknowledged below: refusing it would make two.)
                self.counters.notes_refused += 1
                self._send(src, NoteRefused(msg.partition, msg.epoch), once=True)
            elif msg.view == self.lease.num and self.lease.valid(now):
                # (A note from a later view, or without a lease: not taken yet, the sender resends.)
                self._send(src, NoteAck(msg.partition, msg.epoch), once=True)
                self._on_note(src, msg)
        elif isinstance(msg, Redirect):
            self._send(src, NoteAck(msg.partition, msg.epoch), once=True)
            w = self.waiting.get(msg.partition)
            if w is not None and (w.holder == src or w.asked_who == src):
                # Epochs the sender knew of (its own, or the reserve of the holder it condemned)
                self.known_epoch[msg.partition] = max(self.known_epoch.get(msg.partition, 0), msg.epoch)
                self.epoch_clock = max(self.epoch_clock, msg.epoch)
                if msg.holder == self.me:
                    # It never took it from us (or never had it): nobody holds it.
                    w.holder, w.cleared = self.me, True
                else:
                    w.holder, w.since, w.basis = msg.holder, now, -1
        elif isinstance(msg, NoteRefused):
            self._refused(src, msg)
        elif isinstance(msg, Query):
            self._answer_query(src, msg.partition)
        elif isinstance(msg, Census):
            self._answer_census(src, msg)
        elif isinstance(msg, ViewAsk):
            self._answer_ask(src, msg)
        elif isinstance(msg, NoView):
            if self._ask_round and msg.round == self._ask_round:
                self._ask_answers[src] = msg.role
        elif isinstance(msg, Disown):
            if msg.view == self.lease.num == self._census_num:
                for p, epoch in zip(msg.partitions, msg.epochs):
                    if p in self._census:
                        self._census[p][src] = epoch
        else:
            self.lease.receive(src, msg, now)

    def release_done(self, partition: int, now: float, payload: Any = None) -> None:
        """The application finished releasing ``partition`` (drained, checkpointed)."""
        self.releases_done([(partition, payload)], now)

    def releases_done(self, done: Iterable[tuple[int, Any]], now: float) -> None:
        """``release_done`` for several partitions, then the rules run once."""
        self._now = now
        for partition, payload in done:
            o = self.owned.get(partition)
            if o is not None and o.releasing:
                # Never past the lease: a process frozen mid-drain that reports the drain done on
                # waking stopped owning when its lease ran out (rule 1; fuzz seed 458).
                self._end(partition, min(now, self.lease.valid_until), payload, timed_out=False)
        self._update()

    def declared_dead(self, now: float) -> None:
        """The cluster declared this member dead: others may be taking its partitions."""
        self._now = now
        self._drop_all(now)
        self._update()

    def leave(self, now: float) -> None:
        """Graceful leave: release everything with notes, then have a stable view without this
        member chosen; ``left_ready`` says when to announce the leave."""
        self._now = now
        self.leaving = True
        self._leave_started = now
        self._update()

    def handle_timer(self, now: float) -> None:
        self._now = now
        self._update()

    # ------------------------------------------------------------------ outputs

    def actions(self) -> list[Action]:
        out, self._actions = self._actions, []
        return out

    def messages(self, now: float) -> list[tuple[str, Message]]:
        """Messages due now (resends included)."""
        due: list[tuple[str, Message]] = list(self.lease.messages())
        keep = []
        for o in self._out:
            if o.dst in self.gone:
                continue  # a dead receiver: its successor takes over (rule 4)
            if isinstance(o.msg, Note) and o.msg.view < self.lease.num:
                self.counters.notes_expired += 1
                # Its view has passed: no member would take it (``_receive``). Kept aside for a
                # refusal on its way (``_refused``), in this view only.
                self._current_refusers()
                self._unanswered[(o.dst, o.msg.partition, o.msg.epoch)] = (o.msg, o.generation)
                continue
            if o.next_send <= now:
                due.append((o.dst, o.msg))
                if o.once:
                    continue
                o.next_send = now + self.config.resend_s
            keep.append(o)
        self._out = keep
        return due

    def get_timer(self) -> float:
        """When to call ``handle_timer`` next: every ``tick_s`` while some rule depends on the
        time, else (``_steady``) when the lease's own timers are due or its fence margin begins
        (an idle node woke four times a second to find nothing to do; issue 14)."""
        if self._steady():
            # Until then a rule pass without an input would do nothing (``_quiet_until``).
            t = self._quiet_until = min(self.lease.next_time(idle=True),
                                        self.lease.valid_until - self.config.fence_drain_s, self._loads_due_at(),
                                        self._pins_due_at())
        else:
            t = min(self.lease.next_time(), self._now + self.config.tick_s)
        for o in self._out:
            t = min(t, o.next_send)
        return t

    def _steady(self) -> bool:
        """Can only the lease's timers and its fence margin change what the rules do, until the
        next input? Every other rule that reads the clock is about something that does not exist
        here: partitions waited for, notes held, rights to pass on, releases and their deadlines,
        a restart, a leave, a view to propose (the local view differs from the stable one, or a
        witness asked for help), a view or condemnation not yet acted on. A rule pass between
        those times, without input, would do nothing (docs/ownership.md, "The timer")."""
        lease = self.lease
        return (self.fenced_reason is None and not self.leaving and not self._restarted
                and not (self.waiting or self.free or self._to_pass) and self._release_due == math.inf
                and not (lease.help_choose or lease.installs or lease.condemned) and self._view_is_stable()
                and self._loads_due_at() > self._now and self._pins_due_at() > self._now)

    def _against_stable(self) -> _Against:
        """The local view against the stable view, computed once per pair of objects: the rules
        ask on every datagram and tick, and comparing N weights each time was 69 % of an N=1,024
        simulation's steady state, and 15 % while a dead member was still in the stable view
        (issue 34, py-spy of ``bench_scale.py``)."""
        stable = self.lease.views.view
        known = self._against
        if known is None or known.view is not self.view or known.stable is not stable:
            weights = stable.by_member
            known = self._against = _Against(
                self.view, stable, self.view == weights, weights.keys() - self.view.keys(),
                all(weights.get(m) == w for m, w in self.view.items()))
        return known

    def _view_is_stable(self) -> bool:
        """``self.view == self.lease.weights`` (``_against_stable``)."""
        return self._against_stable().same

    @property
    def valid_until(self) -> float:
        """Ownership is valid until then (check before each unit of work)."""
        return self.lease.valid_until

    @property
    def left_ready(self) -> bool:
        """Leaving, every partition released and its note acknowledged, and a stable view
        without this member chosen - so the others need not wait for gossip and a stable view,
        and a witness that leaves does not take its vote away from a tie (two members) - or,
        if no view can be chosen, ``stable_after_s`` past the release deadline."""
        if not self._released_all():
            return False
        stable = self.lease.stable
        return (self.me not in stable or stable == (self.me,)  # the last member: no view to choose
                or self._now >= self._leave_started + self.config.handoff_timeout_s + self.config.stable_after_s)

    def _released_all(self) -> bool:
        return self.leaving and not self.owned and not any(isinstance(o.msg, Note) for o in self._out)

    # ------------------------------------------------------------------ rules

    def _update(self) -> None:
        now = self._now
        lease = self.lease
        self._quiet_until = -math.inf  # until ``get_timer`` says otherwise, after this pass
        lease.tick(now)
        self._maybe_propose(now)
        self._maybe_bootstrap(now)
        self._maybe_found(now)
        for ins in lease.installs:
            self._installed(ins, now)
        lease.installs.clear()
        self._note_first_stable()
        if lease.condemned:  # a witness refuses us: someone is taking our partitions over
            self._drop_all(now)
        if not lease.valid(now):
            self.fenced_reason = "no quorum lease: a majority of the witnesses has not confirmed this member" \
                if lease.stable else "no stable view yet"
            if self.owned or self.free or self._owned_this_generation:
                self._drop_all(now, at=lease.valid_until)  # ownership ended with the lease (rule 1)
        elif now >= lease.valid_until - self.config.fence_drain_s:
            self.fenced_reason = f"quorum lease ends in {lease.valid_until - now:.2f} s, not renewed"
        else:
            self.fenced_reason = None
        self._retable(now)
        if now >= self._release_due:
            # (``_end`` changes no other ownership, so listing the due ones first changes nothing.)
            for p, o in [(p, o) for p, o in self.owned.items() if o.releasing and now >= o.deadline]:
                self._end(p, o.deadline, None, timed_out=True)
            self._release_due = min((o.deadline for o in self.owned.values() if o.releasing), default=math.inf)
        self._try_acquire(now)

    def _installed(self, ins: Install, now: float) -> None:
        """A new stable view (rule 9). A step from the view this member's lease was granted
        under carries its ownership over, but releases already under way end by the end of that
        lease, and so does everything if this member is not in the new view; any other change
        (a jump over views it never held) drops everything first. Creating ownership (anything
        but a note) then waits until every ownership of an older view has ended."""
        c = self.config
        lease = self.lease
        stretch = lease.stretch
        for m in ins.view.members:
            if self._outside.pop(m, None) is not None:
                lease.forget(m)  # back in the stable view: a later takeover needs a fresh proof
        if ins.carried:
            out = self.me not in ins.view.members
            for p, o in self.owned.items():
                if not (o.releasing or out):
                    continue
                deadline = min(o.deadline if o.releasing else now + c.handoff_timeout_s, ins.cap)
                if not o.releasing or deadline < o.deadline:
                    o.releasing, o.deadline, o.reason = True, deadline, o.reason or "moved"
                    self._release_due = min(self._release_due, deadline)
                    self._actions.append(Release(p, deadline, o.reason, now))
        elif lease.valid(now) and (self.owned or self.free or self._owned_this_generation):
            self._drop_all(now)
        wait = c.lease_s if ins.stepped else c.lease_s + c.handoff_timeout_s
        self._create_after = ins.at + wait * stretch
        if ins.view.loads != self._committed_loads:
            self._committed_loads = ins.view.loads
            self._loads_learned_at = ins.at

    def _may_create(self, now: float) -> bool:
        """Rule 9: ownership other than by note only under a lease of the current stable view,
        once every ownership of an older view has ended."""
        lease = self.lease
        return now >= self._create_after and lease.lease_num == lease.num and lease.valid(now)

    def _note_first_stable(self) -> None:
        if self.lease.stable and not self._founder and not self._first_stable_seen:
            self._first_stable_seen = True
            self._restarted = self.me in self.lease.stable
            self._restart_seen_at = self._now

    def _maybe_propose(self, now: float) -> None:
        """Propose the view as the next stable view (``ownership.views``): unchanged
        ``stable_after_s``, nobody suspect, while holding a lease, and only if it keeps a quorum
        of the current witnesses (Akka's "a new decision needs a majority of the last stable
        view", at the witness level). A member a witness told that a successor is pending
        helps choose it whatever its own view (a proposer may have died half-way)."""
        lease = self.lease
        if not self.joined or not lease.stable:
            return
        if self._released_all() and self.me in lease.stable and len(lease.stable) > 1:
            # Not before the members had time to renew under the current view (they ask at
            # once on learning it; a round without a quorum is retried within ``resend_s``): a
            # second view hard on the heels of the first (two members leaving at once) reached
            # members still under a lease of the one before, a second step on one lease, so
            # they dropped everything they owned (rule 9; issue 30: measured 23-32 ms apart).
            if now >= lease.learned_at + self.config.resend_s and (lease.lease_num == lease.num
                                                                   or not lease.valid(now)):
                lease.propose({m: w for m, w in lease.weights.items() if m != self.me}, now, 0,
                              **self._proposed_loads())
            return
        # A member that has not yet heard what the stable view's proposer heard would propose the
        # past back: so a view with a member it never saw, or a changed weight, only once changed
        # since the stable view was learned.
        against = self._against_stable()
        same = against.same
        if not lease.help_choose and same:
            if now >= self._loads_due_at() and self._may_refresh_loads(now):
                lease.propose(self.view, now, self._rank(), loads=self._loads[0], loads_at=self._loads[1],
                              pins=lease.views.view.pins)
            elif now >= self._pins_due_at() and self._may_refresh_loads(now):
                v = lease.views.view
                assert self._pins_plan is not None
                lease.propose(self.view, now, self._rank(), loads=v.loads, loads_at=v.loads_at,
                              pins=self._pins_plan[0])
            return  # nothing else to propose (the steady state; the test at the end says the same)
        removed = against.removed
        # Members seen to die or leave need no settling: waiting would only delay takeovers. Only
        # the members ranked first (as many as there are witnesses: the live witnesses and the
        # next in line) propose such a view at once; the others only once it has settled, as any
        # view, by which time one of those has had it chosen. Every member proposing at once cost
        # each member a Prepare to every witness and their Promises, at every death: at N=256,
        # about 10 of a member's datagrams per view change (issue 34).
        removals = (bool(removed) and removed <= self.gone.keys() and against.weights_kept
                    and self._rank() < self.config.witnesses)
        # Otherwise only a view that settled and changed since the stable view was learned. (A
        # removal seen here is news whenever it was seen; without this, a view learned just after
        # the death was never followed by one without the dead member: fuzz seed 327.)
        # And a member whose own proposal lost to an older accepted value that Paxos made it
        # finish still has news, once: otherwise nobody proposes again, the hole of fuzz seeds
        # 405 and 514 (there a stale attempt of the proposer itself; ``StableViews.withdraw``).
        superseded = lease.views.superseded
        # And a view that has differed from a stable view learned long ago: the stable view was
        # chosen with an outdated value (its proposer's, since crashed or cut off) after every
        # member's view had settled, so nobody has news, and nothing would ever be proposed
        # again (fuzz --wide seed 673: a dead member kept in the stable view for good, its
        # partitions unowned). Proposing is always safe; this only bounds how long that lasts.
        news = self._view_changed_at >= lease.learned_at or (
            superseded is not None and superseded.weighted() == self.view) or (
            now - lease.learned_at >= STALE_STABLE_VIEWS * self.config.stable_after_s)
        settled = not self.suspects and (removals or (now - self._view_changed_at >= self.config.stable_after_s
                                                      and news))
        if lease.help_choose or (settled and not same and lease.valid(now)
                                 and lease.views.witness_set.quorum(self.view.keys())):
            lease.propose(self.view, now, self._rank(), **self._proposed_loads())

    def _proposed_loads(self) -> dict[str, Any]:
        """The load figures a view this member proposes commits: its own if newer than the
        stable view's, else the stable view's (a view proposed for a change of members or
        weights must not drop the figures a rebalance plans from); and the stable view's pins."""
        v = self.lease.views.view
        loads, at_s = self._loads if self._loads[0] and self._loads[1] >= v.loads_at else (v.loads, v.loads_at)
        return {"loads": loads, "loads_at": at_s, "pins": v.pins}

    def _pins_due_at(self) -> float:
        """Rule 13: when this member proposes its stable view again with the pins it was given:
        at once, plus ``stable_after_s`` for each member ranked before it (as rule 12), while the
        stable view holds the pins and figures they were planned from and other pins. inf:
        none to propose (a plan committed or overtaken is dropped here)."""
        plan = self._pins_plan
        v = self.lease.views.view
        if plan is None or not v.num:
            return math.inf
        if plan[0] == v.pins or plan[1] != v.pins or plan[2] != v.loads_at:
            # Committed, or the view moved on: dropped for good. Kept, a plan whose base came
            # back (its pins committed, then another plan's undoing them) was proposed again,
            # and two such plans took turns for ever (fuzz --wide --pins seed 460: a view every
            # 2 s, partitions orphaned by the handoffs that never settled).
            self._pins_plan = None
            return math.inf
        return self._pins_set_at + self.config.stable_after_s * self._rank()

    def _loads_due_at(self) -> float:
        """Rule 12: when this member proposes its stable view again with its newer load figures:
        ``loads_every_s`` after it learned a view with the current ones (at once if the view has
        none), and not before it was given its figures; plus ``stable_after_s`` for each member
        ranked before it, so that one proposes and the others see its view chosen. inf: the
        rule is off, or it has no newer figures that differ."""
        c = self.config
        v = self.lease.views.view
        loads, at_s = self._loads
        if not c.loads_every_s or not loads or loads == v.loads or at_s < v.loads_at or not v.num:
            return math.inf
        since = self._loads_learned_at + c.loads_every_s if v.loads else self.lease.learned_at
        return max(since, self._loads_set_at) + c.stable_after_s * self._rank()

    def _may_refresh_loads(self, now: float) -> bool:
        """Rule 12's conditions besides its time: a member of the stable view holding a lease
        under it, renewed since (so every member had time to renew under it, and the new view is
        a step for them: ``_installed``), nobody suspect, not leaving."""
        lease = self.lease
        return (self.me in lease.views.view.members and not self.leaving and not self.suspects
                and lease.lease_num == lease.num and lease.valid(now)
                and now >= lease.learned_at + self.config.stable_after_s)

    def _maybe_bootstrap(self, now: float) -> None:
        """Without a founder (``ExclusiveConfig.bootstrap``): before any stable view, propose the
        view as the first one, chosen by the witnesses of the genesis like any successor, once it
        settled (``stable_after_s``, nobody suspect) and holds a quorum of those witnesses. A
        member of a running cluster (a restart, a new member) is told that cluster's view instead
        by any of them (``StableViews._on_prepare``: the slot was chosen)."""
        genesis = self.lease.views.genesis
        if genesis is None or self.lease.num or self.leaving or self.suspects:
            return
        if now - self._view_changed_at < self.config.stable_after_s:
            return
        witnesses = witness_set(genesis.members, self.config.witnesses, self.config.witness_group_members)
        if witnesses.quorum(self.view.keys()):
            self.lease.propose(self.view, now, self._rank(), inc=self._incarnation)

    def _maybe_found(self, now: float) -> None:
        """Rule 11: a member that may found (``may_found``) and holds no stable view asks every
        member it sees (``ViewAsk``, resent until answered, again whenever its view changes). A
        member that holds a view answers with it (``Decided``): this one installs it, a member
        of that cluster like any other. It founds only when every member it sees answered
        ``NoView`` in the current round, its view settled (``stable_after_s``, nobody suspect)
        and ``2 lease_s`` after its start, none of them forms a view otherwise (a genesis, a view
        restored from ``--state-dir``: nor does it found with one), and none that may found too
        has a smaller id (that one founds, and its next view takes the others in). Alone it
        waits: with nobody to ask, a cluster it was in may run out of its reach."""
        c = self.config
        if not self._may_found or self.lease.num or self.leaving or self.lease.views.restored_inc:
            return  # (a view restored from ``--state-dir``: it resumes that cluster instead)
        others = self.view.keys() - {self.me}
        if (not others or self.suspects or now - self._view_changed_at < c.stable_after_s
                or now < self._started + 2 * c.lease_s):
            return
        basis = frozenset(self.view)
        if basis != self._ask_basis:
            # A round a stranger cannot guess without seeing the ask (the incarnation is drawn
            # at random by the node): a blind forger's ``NoView``s do not count.
            self._asks += 1
            self._ask_basis = basis
            self._ask_round = (self._incarnation ^ (self._asks * 0x9E3779B97F4A7C15)) & ((1 << 62) - 1) or 1
            self._ask_sent, self._ask_answers = {}, {}
        for m in others - self._ask_answers.keys():
            if now - self._ask_sent.get(m, -math.inf) >= c.resend_s:
                self._ask_sent[m] = now
                self._send(m, ViewAsk(self._ask_round), once=True)
        if not self._ask_answers.keys() >= others:
            return
        roles = self._ask_answers
        if any(r == FORMS for r in roles.values()) or any(
                r == MAY_FOUND and m < self.me for m, r in roles.items() if m in others):
            return
        self.counters.refounded += 1
        self._found(now)

    def _answer_ask(self, src: str, msg: ViewAsk) -> None:
        """Rule 11, the other side: this member's stable view, or what it does without one."""
        v = self.lease.views.view
        if self.lease.num:
            self._send(src, Decided.of(v), once=True)
        else:
            views = self.lease.views
            forms = views.genesis is not None or views.restored_inc
            role = FORMS if forms else MAY_FOUND if self._may_found else WAITS
            self._send(src, NoView(msg.round, role), once=True)

    def _rank(self) -> int:
        """Back-off order of competing proposers: this member's place in the witness ranking of
        its view (ranked once per view: it is read on every datagram while a dead member is
        still in the stable view, and ranking N members was 23 % of such a run at N=1,024)."""
        known = self._ranked
        if known is None or known[0] is not self.view:
            known = self._ranked = (self.view, witnesses_of(self.view, len(self.view)).index(self.me))
        return known[1]

    def _placement_view(self, without_me: bool = False) -> dict[str, float]:
        """Who may lead partitions: the *stable* view (the same at every member holding a lease
        under it), weighted as last seen. Not the local view: local views differ while changes
        spread, and a member that takes over from a holder it believes gone must agree with
        everyone else on where that holder's notes went (module docstring, rule 2)."""
        gone = self.me if without_me else None
        return {m: w for m, w in self.lease.weights.items() if w > 0 and m != gone}

    def _retable(self, now: float) -> None:
        c = self.config
        old, old_num = self.table, self._table_num
        stable, built = self.lease.views.view, self._table_basis
        if built is None or built[0] is not stable or built[1] != self.leaving or built[2] != self.joined:
            view = self._placement_view(without_me=self.leaving)
            self.table = self._table_for(view) if (view and self.joined) else None
            self._table_num = self.lease.num if self.table is not None else -1
            self._table_basis = (stable, self.leaving, self.joined)
        fenced = self.fenced_reason is not None
        mine = self._led_by_me()
        # The rules run on every message and tick. In the steady state this member owns exactly
        # the partitions it leads, and both loops over them below would do nothing: one subset
        # test in C says so instead, and only when what it owns or leads changed (issue 14:
        # idle CPU; the test alone took 3-12 us with a few hundred partitions).
        known = self._all_mine
        if known is not None and known[0] is mine and known[1] == self._owned_changes:
            all_mine = known[2]
        else:
            all_mine = self.owned.keys() <= mine
            self._all_mine = (mine, self._owned_changes, all_mine)
        for p, o in (self.owned.items() if self.leaving or fenced or not all_mine else ()):
            if self.leaving:
                reason, deadline = "leaving", now + c.handoff_timeout_s
            elif fenced:
                reason, deadline = "fenced", self.lease.valid_until
            elif p not in mine:
                reason, deadline = "moved", now + c.handoff_timeout_s
            else:
                continue  # ours (a release already under way keeps draining: the app was told)
            deadline = min(deadline, self.lease.valid_until)
            if not o.releasing or deadline < o.deadline:
                o.releasing, o.reason, o.deadline = True, reason, deadline
                self._release_due = min(self._release_due, deadline)
                self._actions.append(Release(p, deadline, reason, now))
        if self.table is None:
            return
        for p in list(self.free):
            sender = self.free[p][2]
            # Pass a note on to the leader, never back to its sender: a sender that this view
            # still shows as leader is leaving or moving, and the view will catch up - unless
            # this member is leaving too: then it will not, and the note goes past them both.
            lead = self._handoff_target(p, also=sender if self.leaving else None)
            if lead is not None and lead != self.me and lead != sender:
                epoch, payload, _ = self.free.pop(p)
                self.counters.notes_forwarded += 1
                self._passed[p] = lead
                self._send(lead, Note(p, epoch, payload, self.lease.num))
        for p in list(self.waiting):
            if p not in mine:
                w = self.waiting.pop(p)
                if p in self.free:
                    # The note came before the view moved p on: this member holds the right, so
                    # it tells nobody that another does. Its note goes to the new leader (above),
                    # or, if that is its sender, when the sender asks (``_answer_query``). A
                    # Redirect naming the sender here made the sender take p back beside the
                    # note held, and a later leader took the note too: two owners (fuzz --wide
                    # --pins seed 82, views 1 ms apart moving p away and back).
                    continue
                self._pass_on(p, w)
        if self.leaving or (all_mine and len(mine) == len(self.owned)):  # (owned == mine; keys unchanged above)
            return
        # Whom to expect each newly led partition from: its leader before this change (for a
        # member's first table, the leader without it: the cluster it joined). Only a founder
        # expects partitions from itself, and takes them at once (nobody else exists).
        prev = old if old is not None else self._table_without_me()
        for p in mine:
            if p in self._to_pass and p not in self.owned and p not in self.waiting:
                self.waiting[p] = self._to_pass.pop(p)[0]  # led by us again: ours to take back
            if p not in self.owned and p not in self.waiting:
                holder = prev.owner(p) if prev is not None else self.me
                basis = old_num if old is not None else -1  # the view whose table named ``holder``
                cleared = False
                if holder == self.me:
                    passed = self._passed.get(p)
                    if passed is not None:
                        holder, basis = passed, -1  # we handed it on: expect it back from the receiver
                    # Only the founder's first table may take what nobody held before it.
                    cleared = old is None and self._founder and not self._passed
                self.waiting[p] = _Waiting(holder, now, self.lease.generation, cleared=cleared, basis=basis)

    def _pass_on(self, p: int, w: _Waiting) -> None:
        """A partition this member waited for now belongs to another: tell the new leader."""
        lead = self._leader(p)
        if lead is None or lead == self.me:
            return
        if w.holder != self.me:
            self.counters.redirects += 1
            self._send(lead, Redirect(p, w.holder, max(self.known_epoch.get(p, 0), w.floor)))
        else:
            # This member was the last holder and stopped without a note: a note re-creates the
            # right to p, so it goes out only when a take-back would be allowed (rules 5, 9).
            self._to_pass[p] = (w, self.lease.num)
            self._retry_pass_on(self._now, self._may_create(self._now))

    def _retry_pass_on(self, now: float, create: bool) -> None:
        """Pass on the partitions this member dropped and no longer leads, once allowed."""
        for p, (w, num) in list(self._to_pass.items()):
            lead = self._leader(p)
            if lead is None or lead == self.me:
                continue
            if num != self.lease.num:
                # Rule 9 covers a note that re-creates p only in the view where p left this
                # member (it led p in the view before, so nobody else was releasing it then).
                del self._to_pass[p]
                self._passed[p] = None
            elif create and self._may_take_back(w):
                del self._to_pass[p]
                self.counters.notes_sent += 1
                self._passed[p] = lead
                # A note that re-creates the right is a creation under this view (rule 8): this
                # member may never have known the last holder's epoch (a Redirect cleared it).
                epoch = max(self.known_epoch.get(p, 0), view_epoch(self.lease.num))
                self._send(lead, Note(p, epoch, None, self.lease.num))
            elif w.generation != self.lease.generation and self.lease.clean.get(w.generation) is False:
                del self._to_pass[p]
                self._passed[p] = None  # a taker may hold it: it will hand it on

    def _answer_query(self, src: str, p: int) -> None:
        """Whom to ask next: the member this one waits for, or the one it passed ``p`` to. A
        member that holds the right to ``p`` (owns it, or dropped it itself) stays silent: it
        passes it on with a note when its view moves on."""
        if p in self.owned:
            return
        if p in self.free and p not in self.waiting:
            # A note held for a partition the asker leads now. ``_retable`` never passes a note
            # back to its sender (a sender the view still shows as leader may be leaving), but a
            # leader that asks is waiting for it, not leaving: without this, a note whose sender
            # led again stayed here for good, and the census waited for it (fuzz --wide seed 498).
            if self._leader(p) == src != self.me:
                epoch, payload, _ = self.free.pop(p)
                self.counters.notes_forwarded += 1
                self._passed[p] = src
                self._send(src, Note(p, epoch, payload, self.lease.num))
            return
        w = self.waiting.get(p)
        if w is not None:
            if w.holder != self.me:
                self._send(src, Redirect(p, w.holder, self.known_epoch.get(p, 0)))
            return
        to = self._passed.get(p)
        if to is not None and to != src:
            self._send(src, Redirect(p, to, self.known_epoch.get(p, 0)))
        # Never "not me, so nobody": that this member does not hold it says nothing about the
        # others while views differ (measured: a take-back beside the real holder). A partition
        # nobody holds then stays orphaned (liveness), rather than owned twice (safety).

    def _table_without_me(self) -> PlacementTable | None:
        others = self._placement_view(without_me=True)
        return self._table_for(others) if others else None

    def _led_by_me(self) -> frozenset[int]:
        self._index_table()
        return self._mine

    def _leader(self, p: int) -> str | None:
        if self.table is None:
            return None
        self._index_table()
        return self._leaders[p]

    def _index_table(self) -> None:
        """Leaders per partition and the set this member leads, once per table: the rules run
        on every message, and asking the table per partition made a handoff of P partitions
        cost O(P^2) table lookups (minutes at P=4096)."""
        table = self.table
        if table is self._indexed:
            return
        self._indexed = table
        if table is None or not table.members:
            self._leaders, self._mine = (), frozenset()
            return
        ids, idx = table.owner_indices()
        self._leaders = tuple(ids[i] for i in idx[:, 0].tolist())
        self._mine = frozenset(p for p, lead in enumerate(self._leaders) if lead == self.me)

    def _try_acquire(self, now: float) -> None:
        if self.fenced_reason is not None or self.leaving:
            return
        c = self.config
        lease = self.lease
        create = self._may_create(now)  # rule 9: anything but a note waits for this
        # Rule 8: above every reserve a previous process of this id confirmed (0 unless one did),
        # for notes too: a note resent to a process that restarted after taking it is taken again
        # (fuzz --wide seed 265).
        self.epoch_clock = max(self.epoch_clock, lease.id_reserve)
        if create:
            self._creation_floor()
        self._retry_pass_on(now, create)
        restart = self._restart_free(now) and create  # once: for what the restarted process waits for now
        if restart:
            self.epoch_clock = max(self.epoch_clock, lease.epoch_floor(self.me))
            if not lease.want(self.epoch_clock + len(self.waiting), now):
                return  # all at once or none: _restart_free ends the restart after the first acquisition
        for p, w in list(self.waiting.items()):
            if p in self.free:
                if not self._epoch_ready(now):
                    return
                epoch, payload, _ = self.free.pop(p)
                self._acquire(p, epoch, payload, now, how="note")
            elif w.holder == self.me:
                # Not "ask whoever would take it over now": after the view changed, that need not
                # be the member that took it (measured: 3,067 dual partition-s after a split). Only
                # the verdict, or a Redirect from the member that waited on us, says nobody did.
                if create and self._may_take_back(w):
                    if not self._epoch_ready(now):
                        return
                    self._acquire(p, self.known_epoch.get(p, 0), None, now, how="back")
            elif restart:
                # A restart that nobody saw leave: its own previous process was the only holder
                # (rule 7), and the witnesses have proven it stopped.
                self._acquire(p, self.known_epoch.get(p, 0), None, now, how="takeover")
            elif w.holder in self.lease.stable:
                self._ask(p, w, w.holder, now)
            else:  # the holder left the stable view: the cluster agrees it is gone
                since = self.gone.get(w.holder)
                if since is None:
                    since = self._outside.setdefault(w.holder, now)
                lease.condemn(w.holder, now)
                w.floor = max(w.floor, lease.epoch_floor(w.holder))
                free = lease.free_at(w.holder) if create else None
                if free is None and self._fast_takeover(w, now):
                    # Proven by the witnesses of the view the holder led it in: theirs granted
                    # its leases there (this view's need not share a witness with them; fuzz
                    # seed 555, when the fast path used them).
                    lease.condemn(w.holder, now, previous=True)
                    free = lease.free_at(w.holder, previous=True)
                    self._creation_floor()  # a creation too, without rule 9's wait
                if free is not None and now >= max(free, since + c.takeover_grace_s):
                    # Above every epoch the holder used (rule 8).
                    self.epoch_clock = max(self.epoch_clock, lease.epoch_floor(w.holder))
                    if not self._epoch_ready(now):
                        return
                    self._acquire(p, self.known_epoch.get(p, 0), None, now, how="takeover")
        if restart:
            self._restarted = False
            self.lease.forget(self.me)
        if create:
            self._run_census(now)

    def _run_census(self, now: float) -> None:
        """Rule 10: a partition this member leads in stable view x and has waited for
        ``query_after_s`` in vain (its holder dropped it, a note expired, a verdict is unclean,
        answers go round) is created once every other member of x, answering in x, disowns it.

        Why that is safe (docs/ownership.md, rule 10): the creation wait of rule 9 has ended
        every ownership under a lease of an older view. A member of x that disowns p in x does
        not own it then and cannot come to own it in x: it does not lead p, and every note for
        p sent in x goes to this member, the leader (older notes are refused). A member not in
        x ended all it carried with its older lease. So no one else owns p when it is created.
        A member that disowns gives up any right it kept silently (``_to_pass``), so it cannot
        take p back later on a verdict that no longer says who holds it."""
        lease = self.lease
        if self._census_num != lease.num:
            self._census_num, self._census, self._census_asked = lease.num, {}, {}
        if not self.waiting:  # (the steady state: nothing to ask about, nothing to create)
            self._census.clear()
            return
        for p in [p for p in self._census if p not in self.waiting]:
            del self._census[p]  # came by note, or no longer ours to wait for
        others = [m for m in lease.stable if m != self.me]
        ask: dict[str, list[int]] = {}
        for p, w in list(self.waiting.items()):
            if p in self.free or now - w.since < self.config.query_after_s:
                continue
            answers = self._census.setdefault(p, {})
            missing = [m for m in others if m not in answers]
            if missing:
                for m in missing:
                    ask.setdefault(m, []).append(p)
            else:
                # Above every epoch a member of x used or saw (rule 8), within a confirmed reserve.
                self.epoch_clock = max(self.epoch_clock, max(answers.values(), default=0))
                if not self._epoch_ready(now):
                    return
                del self._census[p]
                self._acquire(p, 0, None, now, how="census")
        for m, parts in ask.items():
            if now - self._census_asked.get(m, -math.inf) < 4 * self.config.resend_s:
                continue
            self._census_asked[m] = now
            self.counters.censuses += 1
            for i in range(0, len(parts), CENSUS_BATCH):
                self._send(m, Census(lease.num, tuple(parts[i:i + CENSUS_BATCH])), once=True)

    def _answer_census(self, src: str, msg: Census) -> None:
        """Rule 10, the answering side: disown what this member neither owns nor holds (no
        note held or on its way from here) and gives up. Only in the census's view, with that
        view installed, under a lease of it, and not as a restarted process whose predecessor
        may still run (rule 7): otherwise the asker asks again."""
        lease = self.lease
        if (msg.view != lease.num or lease.installs or self.table is None or lease.lease_num != lease.num
                or not lease.valid(self._now) or self._restarted):
            return
        noted = {o.msg.partition for o in self._out if isinstance(o.msg, Note)}
        parts: list[int] = []
        epochs: list[int] = []
        for p in msg.partitions:
            if p in self.owned or p in self.free or p in self.waiting or p in noted or self._leader(p) != src:
                continue
            self._to_pass.pop(p, None)
            self._passed[p] = src  # asked about p again later: the asker may hold it now
            for key in [k for k in self._unanswered if k[1] == p]:
                del self._unanswered[key]  # given up: a late refusal must not bring it back
            parts.append(p)
            epochs.append(self.epoch_clock)  # >= every epoch this member used or saw on a note
        self.counters.disowned += len(parts)
        self._send(src, Disown(msg.view, tuple(parts), tuple(epochs)), once=True)

    def _fast_takeover(self, w: _Waiting, now: float) -> bool:
        """Rule 4's fast path, without rule 9's creation wait: this member stepped from view n
        into n+1, learned n at least ``lease_s`` (1+rho)/(1-rho) ago, and the holder it takes
        over from led the partition in n (``w.basis``). In n only that holder could own the
        partition (only the leader creates it or gets notes for it), ownership carried into n
        ended with the leases of n-1, and older views' leases ended before that; the holder's
        own lease is proven over by the condemnation. So the wait, which is for owners under
        views this member does not know, has nothing left to cover (docs/ownership.md, rule 4)."""
        lease = self.lease
        before = lease.previous  # None after a jump
        return (before is not None and w.basis == lease.num - 1
                and now >= before.learned_at + self.config.lease_s * lease.stretch
                and lease.lease_num == lease.num and lease.valid(now))

    def _creation_floor(self) -> None:
        """Rule 8: an acquisition other than by note under stable view n (``create``, or rule
        4's fast path, under a lease of n) takes an epoch above ``view_epoch(n)``. It comes after
        every acquisition under an older view (rule 9: their ownership has ended; the fast path:
        only the holder it condemns could own the partition, and its floor covers it), and none
        of those reached ``view_epoch(n)``: such epochs are used only under leases of n or
        later. A process also starts above the reserve a previous process of its id had
        confirmed (``QuorumLease.id_reserve``, 0 unless there was one: a restart nobody removed
        acquires under the view its previous process held, and the lease quorum of n shares a
        witness with the quorum that confirmed that reserve under n)."""
        lease = self.lease
        self.epoch_clock = max(self.epoch_clock, view_epoch(lease.num), lease.id_reserve)

    def _epoch_ready(self, now: float) -> bool:
        """May the next acquisition use epoch ``epoch_clock + 1``? Only within the reserve a
        witness quorum confirmed (rule 8); otherwise a larger one is requested at once."""
        return self.lease.want(self.epoch_clock + 1, now)

    def _restart_free(self, now: float) -> bool:
        """Rule 7: this process restarted a member that was never removed from the stable view
        (it found its id in the first stable view it took). Everyone computes the partitions it
        leads as its own, so nobody but its previous process can hold them; it condemns that
        process (its own id) and owns them once the witnesses prove its lease is over. A
        previous process that is in fact still alive is stopped by the same condemnation."""
        if self._restarted and (self.owned or self.counters.acquired):
            self._restarted = False  # notes came: an ordinary join, not a process nobody hands to
        quiet_until = self._restart_seen_at + self.config.handoff_timeout_s + 2 * self.config.resend_s
        if not self._restarted or now < quiet_until:
            return False  # a member draining a partition to us (we may have been re-added) ends first
        lease = self.lease
        lease.condemn(self.me, now)
        free = lease.free_at(self.me)
        # ...and only once every witness has lifted that condemnation for this process (it
        # echoed the nonces): a refusal still standing would make it drop what it takes.
        lifted = lease.valid(now) and not lease.condemned and not lease.echoing()
        return free is not None and now >= free and lifted

    def _ask(self, p: int, w: _Waiting, who: str | None, now: float) -> None:
        """After ``query_after_s`` without progress, ask ``who`` (every 2 s): a ``Redirect``
        answers whom it waits for or passed the partition to."""
        c = self.config
        if who is None or now - w.since < c.query_after_s or now - w.asked < c.resend_s * 4:
            return
        w.asked, w.asked_who = now, who
        self.counters.queries += 1
        self._send(who, Query(p, self.known_epoch.get(p, 0)), once=True)

    def _acquire(self, p: int, epoch: int, payload: Any, now: float, *, how: str) -> None:
        self.waiting.pop(p, None)
        self._to_pass.pop(p, None)
        self._passed.pop(p, None)
        # A note of ours for p still being resent is obsolete now (we hold p again).
        self._out = [o for o in self._out if not (isinstance(o.msg, Note) and o.msg.partition == p)]
        for key in [k for k in self._unanswered if k[1] == p]:
            del self._unanswered[key]
        new = max(epoch, self.known_epoch.get(p, 0), self.epoch_clock) + 1
        self.epoch_clock = new
        self.known_epoch[p] = new
        self.owned[p] = _Owned(new)
        self._owned_changes += 1
        self._owned_this_generation = True
        self.counters.acquired += 1
        if how == "note":
            self.counters.acquired_by_note += 1
        elif how == "takeover":
            self.counters.acquired_by_takeover += 1
        elif how == "census":
            self.counters.acquired_by_census += 1
        else:
            self.counters.acquired_back += 1
        self._actions.append(Acquired(p, new, payload, now))

    def _end(self, p: int, at: float, payload: Any, *, timed_out: bool) -> None:
        o = self.owned.pop(p)
        self._owned_changes += 1
        self.counters.released += 1
        if timed_out:
            self.counters.handoffs_timed_out += 1
        self._actions.append(Ended(p, o.epoch, at, timed_out))
        lead = self._leader(p)
        to = self._handoff_target(p)
        if to is not None and to != self.me:
            self._passed[p] = to
            self._send(to, Note(p, o.epoch, payload, self.lease.num))
            self.counters.notes_sent += 1
        elif lead is not None and lead != self.me:
            # Led by a member that refused notes: this member keeps the right as a note, taken or
            # passed on when the view changes.
            self.free[p] = (o.epoch, payload, self.me)
        elif not self.leaving:
            # Still (or again) ours and nobody else can have it: take it back when allowed.
            self.waiting[p] = _Waiting(self.me, self._now, self.lease.generation)

    def _handoff_target(self, p: int, also: str | None = None) -> str | None:
        """Whom to hand ``p`` to: its leader, unless the leader refused notes in this stable
        view (it is leaving) or is ``also``; then the leader without those members (None:
        nobody else is left)."""
        lead = self._leader(p)
        refusers = self._current_refusers()
        if lead is None or (lead not in refusers and lead != also):
            return lead
        skip = frozenset(refusers if also is None else refusers | {also})
        detour = self._detour
        if detour is None or detour[0] is not self.table or detour[1] != skip:
            view = {m: w for m, w in self._placement_view(without_me=self.leaving).items() if m not in skip}
            detour = self._detour = (self.table, skip, self._table_for(view) if view else None)
        return None if detour[2] is None else detour[2].owner(p)

    def _current_refusers(self) -> set[str]:
        """Members that refused a note under the current stable view. Forgotten with the view
        (with the expired notes kept for late refusals): a refusal says the refuser's process
        is leaving, and it leaves the next view."""
        if self._refusers_num != self.lease.num:
            self._refusers, self._refusers_num = set(), self.lease.num
            self._unanswered.clear()
        return self._refusers

    def _refused(self, src: str, msg: NoteRefused) -> None:
        """``src`` is leaving and did not take our note for ``msg.partition``: this member
        holds the right again, as a note held (``free``), and ``_retable`` passes it to the next
        member, past the refusers, at once (so a member leaving with ``src`` never waits for a
        takeover from it) or takes it when it leads the partition itself. Only in the lease
        generation the note was sent in: a right dropped since then (``_drop_all``) comes back
        on a clean verdict only, not on a refusal."""
        p = msg.partition
        held = self._unanswered.pop((src, p, msg.epoch), None)  # refused after its view passed
        for o in self._out:
            if o.dst == src and isinstance(o.msg, Note) and o.msg.partition == p and o.msg.epoch == msg.epoch:
                self._out.remove(o)
                held = (o.msg, o.generation)
                break
        if held is None or held[1] != self.lease.generation or p in self.owned:
            return  # a repeated refusal, or a right dropped since
        note = held[0]
        self._current_refusers().add(src)
        self._passed.pop(p, None)
        self.free[p] = (note.epoch, note.payload, self.me)

    def _drop_all(self, now: float, at: float | None = None) -> None:
        """End every ownership now (declared dead) or when the lease ended (``at``), without
        notes: whoever takes the partitions over proves this member stopped (rule 4). Never
        later than the lease's end: a member frozen past it that wakes to hear it was declared
        dead stopped owning when its lease ran out (its workers check the lease)."""
        end = min(now, self.lease.valid_until if at is None else at)
        for p in list(self.owned):
            o = self.owned.pop(p)
            self._owned_changes += 1
            self.counters.released += 1
            self._actions.append(Ended(p, o.epoch, end))
            self.waiting[p] = _Waiting(self.me, now, self.lease.generation)
        # Notes held are ownership of this lease generation too: a taker that expected the
        # partition from us may be condemning us for it. Back only on a clean verdict.
        for p in list(self.free):
            del self.free[p]
            self.waiting[p] = _Waiting(self.me, now, self.lease.generation)
        owned = self._owned_this_generation
        if owned:
            self.counters.lease_losses += 1
        self._owned_this_generation = False
        self.lease.drop(owned=owned)

    def _on_note(self, src: str, note: Note) -> None:
        p = note.partition
        key = (src, p, note.epoch)
        if key in self._consumed or p in self.owned:
            self.counters.notes_duplicate += 1  # a resend whose ack was lost, or a duplicate
            return
        if note.epoch < self.known_epoch.get(p, 0):
            # Older than an ownership this member knows of (a replay, or a note overtaken by
            # later handoffs): acknowledged, never taken.
            self.counters.notes_stale += 1
            return
        self._consumed.add(key)
        # A right this member kept silently (it dropped p without a note: ``_to_pass``) is
        # superseded: this note is at least as recent as anything it knew of p. Kept, it would
        # be passed on as a second note beside this one once forwarded (fuzz seed 42, default
        # schedules, with rolling lease rounds: to_pass -> held).
        self._to_pass.pop(p, None)
        self._owned_this_generation = True  # a note held is ownership under this lease
        self.known_epoch[p] = max(self.known_epoch.get(p, 0), note.epoch)
        self.epoch_clock = max(self.epoch_clock, note.epoch)
        self.free[p] = (note.epoch, note.payload, src)  # acquired or passed on by _update

    def _send(self, dst: str, msg: Message, *, once: bool = False) -> None:
        """Queue ``msg``; unless ``once``, it is resent until acknowledged."""
        self._out.append(_Outgoing(dst, msg, self._now, once, self.lease.generation))

    def _may_take_back(self, w: _Waiting) -> bool:
        """Rule 5: may this member take back a partition it dropped itself?"""
        lease = self.lease
        if w.cleared:
            return True
        if w.generation == lease.generation:
            return lease.valid(self._now)  # released while fencing, and the lease held: nobody took it
        return lease.clean.get(w.generation) is True
