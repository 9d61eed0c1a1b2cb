"""Numbered stable views with a linear history: view n+1 is chosen by a quorum of the witnesses
of view n, by single-decree Paxos, so no two members ever install different successors of one
view (sans-I/O: messages and ``now`` in, messages out).

Theory of operation
===================

Why. Ownership (``ownership.core``) is computed from the *stable view*, and leases
(``ownership.lease``) are granted by the witnesses of the stable view. When every member
adopted its own settled view as the next stable view, two members could, for a moment, hold
different successors of one view, with different witness sets whose majorities need not share
a member; each could then prove a dead holder stopped and take the same partition (the
"witness-set change gap" docs/ownership.md measured: 8 of 200 random fault schedules with two
owners). Vertical Paxos (Lamport, Malkhi, Zhou, PODC 2009) fixes the same problem for
configurations: configuration c+1 is decided by configuration c. Here:

1. A view is ``(num, members, weights)``; the founder's first view is number 1. Every view also
   carries the cluster's incarnation (``View.inc``, drawn by the founder), which only a
   restarted acceptor reads ("Restarts").
2. The successor of view n is chosen among the witnesses W(n) of view n by single-decree Paxos
   (Lamport, "Paxos Made Simple", 2001): phase 1 ``Prepare``/``Promise`` with ballots
   ``(round, proposer id)``, phase 2 ``Accept``/``Accepted``; a value is chosen once a quorum
   of W(n) (``lease.is_quorum``) accepted it in one ballot. Two quorums of W(n) share a
   witness, so at most one successor of n is ever chosen. (With witness groups, ``WitnessSet``:
   a quorum of every group of W(n); a lease then needs a quorum of its holder's group only.)
   The proposer then installs it and tells every member of both views (``Decided``); lease
   replies and later ``Prepare`` answers carry it too, so everyone learns it.
3. A witness that has *accepted* any successor of n grants no more leases under n
   (``QuorumLease.on_request``). Every lease under n was granted by a quorum of W(n), which
   shares a witness with the accepting quorum; that witness granted before it accepted, so
   every lease of view n was requested before n+1 was chosen, and so before anyone learned
   n+1. A member that learned n+1 at local time L therefore knows that every lease under n
   (and, by induction, under any older view) ends by L + lease_s (1+rho)/(1-rho).
4. Witnesses only move forward: they install any later view they learn (from ``Decided``, a
   reply, or a request: members only use views that were chosen) and then take part only in
   choosing its successor.

Proposers. Any member whose view settled may propose it; a member told by a witness that a
successor is pending (accepted, not known to be chosen) proposes too, so a proposer that died
mid-way cannot block the view forever (phase 1 finds the accepted value and finishes it).
Competing proposers retry with higher rounds after a back-off that grows with their rank, so
one of them wins. That back-off (2 s and more) outlasts a lease past its last renewal, so a
witness that accepted a successor and has not learned within ``resend_s``/2 times one plus its
rank among the witnesses that one was chosen proposes itself (``_finish``): otherwise a proposer
that died after sending its ``Accept``s left every healthy member without a lease (point 3) until
the back-off ended, and each dropped everything it owned (issue 29 item 6).

Restarts. What an acceptor promised is its *durable state* (``AcceptorState``: the installed
view, the ballot it promised, what it accepted for the successor); ``durable_changes`` rises
whenever it changes. A driver that keeps it (``placement --state-dir``; the simulator's
``SwimNode``) writes it to stable storage before it sends any message produced after a change,
and gives it back to the restarted process (``restored``). Such an acceptor keeps its promises
across the restart, so it votes at once: it installs no view older than the one it held (all
of them were chosen; a stale proposer is told the restored view), and its promise and
acceptance for the restored view's successor are those it made. For any later slot it never
promised anything: it would have installed the view before, and written it. It installs the
restored view again when a member of the same incarnation speaks to it (``heard``): that view was
chosen in the member's history. Not before: a record left from an earlier cluster of the same
name is of another incarnation, and would otherwise pull a new cluster onto the old one's view.
A process that
started without its predecessor's promises (none kept, or lost) is *forgetful* until it may vote
(below); its record says so, and a restart from such a record waits the quiet time as well.

Without stable storage an acceptor forgets its promises when its process restarts. A restarted
witness (one whose first view already names it) therefore takes no part in choosing views for
``quiet_s`` after it learns that view: a successor chosen before it crashed reaches the other
members within that time in any run where messages are delivered within it (an assumption,
stated in docs/ownership.md; not needed by anything else). A new member learns its first view
before it is in it, so it votes at once.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import zlib
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["View", "AcceptorState", "Prepare", "Promise", "Accept", "Accepted", "Decided", "DecidedStep",
           "ViewMessage", "StableViews",
           "view_checksum", "witnesses_of", "is_quorum", "WitnessSet", "witness_set"]


def view_checksum(num: int, members: tuple[str, ...], weights: tuple[float, ...], loads: bytes = b"",
                  loads_at: int = 0, pins: bytes = b"") -> int:
    """CRC-32 of the view's number, members and weights (weights decide placement, so two views
    that differ only in a weight are different views), of its load figures if it carries any
    (a rebalance plans from them, so two views that differ only in them are different views too)
    and of its pins if any (they decide placement too). Without figures and pins the checksum is
    the one views had before they carried either."""
    text = f"{num}\n" + "\n".join(f"{m}={w!r}" for m, w in sorted(zip(members, weights)))
    ck = zlib.crc32(text.encode())
    if loads:
        ck = zlib.crc32(loads, zlib.crc32(f"\nloads@{loads_at}\n".encode(), ck))
    return zlib.crc32(pins, zlib.crc32(b"\npins\n", ck)) if pins else ck


def witnesses_of(members, k: int) -> tuple[str, ...]:
    """The k members ranking highest by CRC-32 of ("witness", id); ties by id."""
    ranked = sorted(members, key=lambda m: (-zlib.crc32(b"witness/" + m.encode()), m))
    return tuple(ranked[:k])


def is_quorum(group, witnesses: tuple[str, ...]) -> bool:
    """More than half of ``witnesses``, or exactly half including the first: two quorums of one
    witness set always share a witness."""
    inside = set(group) & set(witnesses)
    n = len(witnesses)
    return n > 0 and (2 * len(inside) > n or (2 * len(inside) == n and witnesses[0] in inside))


@dataclass(frozen=True)
class WitnessSet:
    """The witnesses of a view, in groups (docs/ownership.md, "Witness groups"). A member's
    lease is held by a quorum of *its* group (``of``); a successor view is chosen by a quorum of
    *every* group (``quorum``). Every lease quorum then shares a witness with every view quorum
    (point 3 below), and two view quorums share one (both hold a majority of the first group),
    so the history of views stays linear; yet each witness answers only its group's members, so
    its load stays bounded as N grows (a grid quorum system: Cheung, Ammar, Ahamad, "The Grid
    Protocol", 1990; Naor and Wool, "The load, capacity and availability of quorum systems",
    1998). With one group this is the witness set of a view as it always was."""

    groups: tuple[tuple[str, ...], ...]
    all: tuple[str, ...]  # every witness, the groups one after another

    def of(self, member: str) -> tuple[str, ...]:
        """The group whose quorum holds ``member``'s lease: fixed by its id, so a view change
        that keeps the number of groups keeps every member's group (most of it: its witnesses
        change only as the ranking does)."""
        g = self.groups
        if len(g) == 1:
            return g[0]
        return g[zlib.crc32(b"witness-group/" + member.encode()) % len(g)]

    def quorum(self, acceptors: Container[str]) -> bool:
        """A quorum of every group: what choosing a successor view takes. ``acceptors``: any
        container (a member's whole view too: only the witnesses are looked up in it)."""
        return all(is_quorum([w for w in g if w in acceptors], g) for g in self.groups)


def witness_set(members, k: int, per_group: int = 0) -> WitnessSet:
    """The witnesses of a view of ``members``: ``witnesses_of`` them, in one group of ``k``, or,
    with ``per_group`` (members per group, 0: one group), in ceil(N / per_group) groups of
    ``k``, as many as the members fill, taken in ranking order."""
    n = len(members)
    count = 1 if per_group <= 0 else max(1, min(-(-n // per_group), n // max(1, k)))
    ranked = witnesses_of(members, count * k)
    groups = tuple(ranked[i * k:(i + 1) * k] for i in range(count))
    return WitnessSet(groups, ranked)


@dataclass(frozen=True)
class View:
    num: int
    members: tuple[str, ...]  # sorted
    weights: tuple[float, ...]  # in the order of ``members``
    ck: int
    #: The cluster incarnation: drawn by the founder for view 1, inherited by every successor
    #: (0: unknown, a record written before views carried it). Not part of ``ck``: views are
    #: still ordered and told apart by number and content alone; it only tells a restarted
    #: witness whether a member it hears from descends from the view it restored ("Restarts").
    inc: int = 0
    #: The load figures this view commits for a rebalance (``placement.rebalance.LoadReport``'s
    #: codes: one byte per partition; empty: none), and the logical time they were measured at
    #: (whole seconds, the reporter's; the move budget refills by it). Part of ``ck`` when
    #: present (``Ownership.set_loads``; docs/ownership.md, "Load figures").
    loads: bytes = b""
    loads_at: int = 0
    #: Partitions pinned to chosen members by a rebalance (``placement.pins``' encoding of
    #: partition -> member; empty: none). They decide placement with the weights
    #: (``PlacementTable``'s pins), so they are part of ``ck`` when present and a view that
    #: changes them moves partitions by handoff, as a weight change does (rule 13).
    pins: bytes = b""

    @staticmethod
    def of(num: int, weighted: Mapping[str, float], inc: int = 0, loads: bytes = b"", loads_at: int = 0,
           pins: bytes = b"") -> View:
        members = tuple(sorted(weighted))
        weights = tuple(float(weighted[m]) for m in members)
        loads_at = loads_at if loads else 0
        return View(num, members, weights, view_checksum(num, members, weights, loads, loads_at, pins), inc, loads,
                    loads_at, pins)

    @staticmethod
    def checked(num: int, members: tuple[str, ...], weights: tuple[float, ...], inc: int = 0,
                loads: bytes = b"", loads_at: int = 0, pins: bytes = b"") -> View | None:
        """A view from a message, or None if its parts do not form one."""
        if (num < 1 or not members or len(members) != len(weights) or list(members) != sorted(set(members))
                or not all(isinstance(w, float) and math.isfinite(w) and w >= 0 for w in weights)
                or not isinstance(loads, bytes) or type(loads_at) is not int or loads_at < 0
                or not isinstance(pins, bytes)):
            return None
        loads_at = loads_at if loads else 0
        return View(num, members, weights, view_checksum(num, members, weights, loads, loads_at, pins), inc, loads,
                    loads_at, pins)

    def weighted(self) -> dict[str, float]:
        return dict(zip(self.members, self.weights))

    @functools.cached_property
    def by_member(self) -> Mapping[str, float]:
        """``weighted()`` built once per view, read-only: the rules read the stable view's
        weights on every datagram, and rebuilding the dict was 47 % of an N=1,024 simulation's
        time (issue 34, profile of ``bench_scale.py``)."""
        return MappingProxyType(self.weighted())


NO_VIEW = View(0, (), (), view_checksum(0, (), ()))


@dataclass(frozen=True)
class AcceptorState:
    """What a witness promised in choosing views (``StableViews.durable_state``): its installed
    view (NO_VIEW: none yet), the ballot it promised for the successor, and the ballot and value
    it accepted for it, if any. Plain values, so a driver can write it down."""

    view: View = NO_VIEW
    promised: tuple[int, str] = (0, "")
    accepted: tuple[tuple[int, str], View] | None = None
    #: The process that holds it started without its predecessor's promises (no state kept,
    #: or lost) and has not voted since: a restart with it waits the quiet time as well.
    forgetful: bool = False


@dataclass(frozen=True)
class Prepare:
    slot: int  # the view number being chosen
    rnd: int
    base: int  # checksum of view slot - 1, as the proposer holds it
    inc: int = 0  # the incarnation of that view


@dataclass(frozen=True)
class Promise:
    """``ok``: the acceptor promised ballot (rnd, receiver); with what it accepted before
    (``acc_rnd`` 0: nothing). Not ok: ``rnd`` is the round it promised instead."""
    slot: int
    rnd: int
    ok: bool
    acc_rnd: int = 0
    acc_by: str = ""
    members: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()
    inc: int = 0
    loads: bytes = b""  # (``View.loads``; the wire leaves both out when empty)
    loads_at: int = 0
    pins: bytes = b""  # (``View.pins``; the wire leaves it out when empty)


@dataclass(frozen=True)
class Accept:
    slot: int
    rnd: int
    base: int
    members: tuple[str, ...]
    weights: tuple[float, ...]
    inc: int = 0
    loads: bytes = b""
    loads_at: int = 0
    pins: bytes = b""


@dataclass(frozen=True)
class Accepted:
    slot: int
    rnd: int
    ok: bool


@dataclass(frozen=True)
class Decided:
    """View ``num`` was chosen (members use only chosen views, so anyone may pass it on)."""
    num: int
    members: tuple[str, ...]
    weights: tuple[float, ...]
    inc: int = 0
    loads: bytes = b""
    loads_at: int = 0
    pins: bytes = b""

    @staticmethod
    def of(v: View) -> Decided:
        return Decided(v.num, v.members, v.weights, v.inc, v.loads, v.loads_at, v.pins)


@dataclass(frozen=True)
class DecidedStep:
    """``Decided`` as the change from the view before (``base``, its checksum): the members
    removed, the members added or reweighted (``ids``, ``weights``), and the load figures if
    they changed (``same_loads``: those of the base). ``ck``: the new view's checksum, so a
    receiver that rebuilt anything else drops it. Sent by a proposer to the members of the
    view before, who hold it: a crash at N=256 made every member receive the whole view, about
    four datagrams, where this is one small message (issue 34, crash-many). A member that
    holds another view ignores it and learns the view from its next lease reply, as it would
    after a lost ``Decided``."""
    num: int
    base: int
    ck: int
    removed: tuple[str, ...]
    ids: tuple[str, ...]
    weights: tuple[float, ...]
    same_loads: bool
    inc: int = 0
    loads: bytes = b""
    loads_at: int = 0
    same_pins: bool = True  # the pins of the base (else ``pins``; the wire leaves both out then)
    pins: bytes = b""

    @staticmethod
    def between(base: View, v: View) -> DecidedStep | None:
        """The step from ``base`` to ``v`` (its successor), or None when it would not be much
        smaller than the whole view (more than half of the members changed)."""
        old = base.by_member
        new = v.by_member
        changed = [m for m in v.members if old.get(m) != new[m]]
        if v.num != base.num + 1 or 2 * len(changed) > len(v.members):
            return None
        same = v.loads == base.loads and v.loads_at == base.loads_at
        same_pins = v.pins == base.pins
        return DecidedStep(v.num, base.ck, v.ck, tuple(m for m in base.members if m not in new), tuple(changed),
                           tuple(new[m] for m in changed), same, v.inc,
                           b"" if same else v.loads, 0 if same else v.loads_at, same_pins,
                           b"" if same_pins else v.pins)

    def apply(self, base: View) -> View | None:
        """The view this step leads to from ``base``, or None if ``base`` is not the view it
        was made from or the result is not the view it names."""
        if base.num != self.num - 1 or base.ck != self.base or len(self.ids) != len(self.weights):
            return None
        weighted = dict(base.by_member)
        for m in self.removed:
            if weighted.pop(m, None) is None:
                return None
        weighted.update(zip(self.ids, self.weights))
        members = tuple(sorted(weighted))
        loads, loads_at = (base.loads, base.loads_at) if self.same_loads else (self.loads, self.loads_at)
        pins = base.pins if self.same_pins else self.pins
        v = View.checked(self.num, members, tuple(weighted[m] for m in members), self.inc, loads, loads_at, pins)
        return v if v is not None and v.ck == self.ck else None


ViewMessage = Prepare | Promise | Accept | Accepted | Decided | DecidedStep


@dataclass
class _Proposal:
    slot: int
    base: View
    witnesses: WitnessSet  # the base view's
    rnd: int
    own: View  # the proposer's own value (used unless phase 1 finds an accepted one)
    phase: int = 1
    value: View | None = None
    promises: dict[str, tuple[tuple[int, str], View | None]] = field(default_factory=dict)
    accepted: set[str] = field(default_factory=set)
    rank: int = 0
    next_send: float = 0.0
    give_up_at: float = 0.0


class StableViews:
    """The installed stable view of member ``me``, its acceptor for the successor, and its
    proposer (module docstring). ``send(dst, msg)`` queues a message; ``on_install(old, new,
    now)`` is called for every view installed, in order of number. ``restored``: the durable
    state of this member's previous process (module docstring, "Restarts")."""

    def __init__(self, me: str, *, witnesses: int, resend_s: float, quiet_until: float,
                 send: Callable[[str, ViewMessage], None],
                 on_install: Callable[[View, View, float], None],
                 restored: AcceptorState | None = None, genesis: View | None = None,
                 on_yield: Callable[[], None] | None = None, per_group: int = 0) -> None:
        self.me = me
        #: Members per witness group (``witness_set``; 0: one group, the witness set of old).
        self.per_group = per_group
        #: ``restored`` yields to another incarnation (``_yield_restored``): given, it is called
        #: when it does. None: the record binds (``--state-dir``), another incarnation is refused.
        self._on_yield = on_yield
        #: Bootstrap without a founder: the members allowed to choose the first view, as a view
        #: numbered 0 that every such member is configured with (``Ownership``'s ``bootstrap``).
        #: View 1 is then chosen like any successor, by a quorum of its witnesses: one first view,
        #: whatever the order the members start in or the splits between them.
        self.genesis = genesis
        self.k = witnesses
        self.resend_s = resend_s
        self.quiet_until = quiet_until
        self._send = send
        self._on_install = on_install
        self.view: View = NO_VIEW
        self.witness_set = WitnessSet(((),), ())
        self.witnesses: tuple[str, ...] = ()  # (``witness_set.all``)
        self.own_witnesses: tuple[str, ...] = ()  # (``witness_set.of(me)``: this member's lease's)
        # acceptor of the successor of ``view``
        self._promised: tuple[int, str] = (0, "")
        self._accepted: tuple[tuple[int, str], View] | None = None
        self._proposal: _Proposal | None = None
        self._round_seen = 0
        #: When this witness, having accepted a successor of its view without learning that it
        #: was chosen, starts choosing it itself (``_finish``; inf: not due).
        self._finish_at = math.inf
        #: This member's own proposal for the installed view's slot, when Paxos chose an older
        #: accepted value instead (``_on_accepted``): the chosen view is not news to this member,
        #: so its view, if still that proposal, may be proposed again (``Ownership._maybe_propose``).
        self.superseded: View | None = None
        #: Rises whenever ``durable_state()`` changes: the driver writes that state down before
        #: it sends anything produced after the rise.
        self.durable_changes = 0
        #: The previous process's promises, until a view at least as late is installed.
        self._restored = restored if restored is not None and restored.view.num > 0 else None
        #: Started without the promises of every predecessor, and not voted since (a vote needs
        #: the quiet time to have passed, after which forgotten promises no longer matter).
        self._forgetful = restored is None or restored.forgetful
        #: The latest view refused for being older than the restored one (0: none): the others
        #: are behind, or the restored state is from an earlier cluster of the same name.
        self.older_refused = 0
        #: An incarnation other than the restored view's, heard while that view is not installed
        #: again (0: none): the record is from an earlier cluster of the same name (``heard``).
        self.foreign_inc = 0
        #: The restored record yielded to another incarnation (``_yield_restored``).
        self.yielded = False
        #: ``DecidedStep``s this member could not apply (it held another view, or a stale or
        #: mangled step): it learns the view otherwise (a lease reply, a later ``Decided``).
        self.steps_missed = 0

    def durable_state(self) -> AcceptorState:
        """What this acceptor promised (module docstring, "Restarts"). Before it installs a view
        again, a restarted acceptor's state is the one it was given."""
        if self._restored is not None:
            return dataclasses.replace(self._restored, forgetful=self._forgetful)
        return AcceptorState(self.view, self._promised, self._accepted, self._forgetful)

    @property
    def restored_inc(self) -> int:
        """The incarnation of the view this acceptor restored and has not installed again (0:
        none)."""
        return 0 if self._restored is None else self._restored.view.inc

    @property
    def forgetful(self) -> bool:
        """Started without its predecessor's promises and not voted since."""
        return self._forgetful

    @property
    def pending(self) -> bool:
        """This witness accepted a successor of its view (chosen or not): it grants no more
        leases under the view (module docstring, point 3)."""
        return self._accepted is not None

    def install(self, view: View, now: float) -> bool:
        """Install ``view`` if it is later than the installed one (it must have been chosen)."""
        if view.num <= self.view.num:
            return False
        restored = self._restored
        if restored is not None and view.inc and restored.view.inc and view.inc != restored.view.inc:
            # Of another cluster of the same name (``heard``). Checked here too, not by numbers
            # alone: a cluster founded anew numbers its first view by the clock, above the old
            # cluster's views (``ownership.core``, rule 11).
            self.foreign_inc = view.inc
            if self._on_yield is None or view.num <= restored.view.num:
                return False  # (a yielding record too: a cluster founded anew numbers above, heard)
            self._yield_restored()
            restored = None
        if restored is not None and view.num < restored.view.num:
            self.older_refused = max(self.older_refused, view.num)
            return False  # older than a view this acceptor held before it restarted (chosen since)
        old, self.view = self.view, view
        self.superseded = None
        self.witness_set = witness_set(view.members, self.k, self.per_group)
        self.witnesses = self.witness_set.all
        self.own_witnesses = self.witness_set.of(self.me)
        self._promised, self._accepted, self._proposal = (0, ""), None, None
        self._finish_at = math.inf
        if restored is not None:
            self._restored = None
            if view.ck == restored.view.ck:  # the view it held: its promises for the successor stand
                self._promised, self._accepted = restored.promised, restored.accepted
                if self._accepted is not None:
                    self._finish_at = now + self._finish_delay()
        self.durable_changes += 1
        self._on_install(old, view, now)
        if old.num == 0 and now >= self.quiet_until:
            self._voting()  # no quiet time (a new member, a founder): it may vote at once
        return True

    # ------------------------------------------------------------------ proposer

    def _base(self) -> View:
        """The view whose successor this member helps choose: the installed one, or before any,
        the genesis (bootstrap)."""
        return self.view if self.view.num or self.genesis is None else self.genesis

    def propose(self, weighted: Mapping[str, float], now: float, rank: int, *, inc: int = 0,
                loads: bytes = b"", loads_at: int = 0, pins: bytes = b"") -> None:
        """Propose ``weighted`` as the successor of the installed view (idempotent while an
        attempt for that slot is under way). ``rank`` orders competing proposers' back-off.
        ``inc``: the incarnation a first view chosen from the genesis would carry; ``loads``,
        ``loads_at``: the load figures the view commits (``View.loads``); ``pins``: its pins."""
        base = self._base()
        if not base.members:
            return
        p = self._proposal
        own = View.of(base.num + 1, weighted, base.inc if base.num else inc, loads, loads_at, pins)
        if p is not None and p.slot == base.num + 1 and p.own.ck == own.ck:
            return
        # A new value for a slot under way (this member's view changed since it proposed) starts
        # a higher ballot: an attempt kept alive with the old value got it chosen after every
        # view had moved on, and nobody proposed again (fuzz seed 514). Phase 1 still adopts any
        # value a quorum may have accepted, so this changes no safety argument.
        self._round_seen += 1
        if p is not None and p.slot == base.num + 1:
            self._round_seen = max(self._round_seen, p.rnd + 1)
        witnesses = self.witness_set if base.num else witness_set(base.members, self.k, self.per_group)
        self._proposal = _Proposal(base.num + 1, base, witnesses, self._round_seen, own, rank=rank)
        self._start(now)

    def withdraw(self, weighted: Mapping[str, float]) -> None:
        """The proposer's view is now ``weighted``: stop pushing an attempt whose own value is
        not that view. Such an attempt, retried through a split, got its stale value chosen just
        after every view had moved on, and then nobody had news to propose (fuzz seeds 405 and
        514: partitions orphaned for good). A proposer may stop at any time in Paxos: acceptors
        keep what they accepted, and a later proposer adopts it in phase 1 (``superseded``)."""
        p = self._proposal
        own = p.own if p is not None else None
        if own is not None and own.ck != View.of(own.num, weighted, own.inc, own.loads, own.loads_at, own.pins).ck:
            self._proposal = None

    def _start(self, now: float) -> None:
        p = self._proposal
        assert p is not None
        p.phase, p.value, p.promises, p.accepted = 1, None, {}, set()
        p.next_send = now
        p.give_up_at = now + self.resend_s * (4 + 2 * p.rank)
        self.tick(now)

    def tick(self, now: float) -> None:
        if now >= self._finish_at:
            self._finish(now)
        p = self._proposal
        if p is None:
            return
        if now >= p.give_up_at:  # no quorum in time (duelling proposers, loss): a higher round
            self._round_seen = max(self._round_seen, p.rnd) + 1
            p.rnd = self._round_seen
            self._start(now)
            return
        if now < p.next_send:
            return
        p.next_send = now + self.resend_s
        for w in p.witnesses.all:
            if p.phase == 1 and w not in p.promises:
                self._send(w, Prepare(p.slot, p.rnd, p.base.ck, p.base.inc))
            elif p.phase == 2 and w not in p.accepted:
                v = p.value
                assert v is not None
                self._send(w, Accept(p.slot, p.rnd, p.base.ck, v.members, v.weights, v.inc, v.loads, v.loads_at,
                                     v.pins))

    def next_time(self) -> float:
        p = self._proposal
        return min(self._finish_at, math.inf if p is None else min(p.next_send, p.give_up_at))

    def _finish_delay(self) -> float:
        """How long a witness that accepted a successor waits to learn it was chosen before it
        finishes choosing it itself: ``resend_s``/2 times one plus its place among the
        witnesses, so the first of them acts first and the others only if it could not."""
        rank = self.witnesses.index(self.me) if self.me in self.witnesses else len(self.witnesses)
        return self.resend_s * (1 + rank) / 2

    def _finish(self, now: float) -> None:
        """This witness accepted a successor of its view and has not learned within
        ``_finish_delay`` that one was chosen: its proposer may have died after sending its
        ``Accept``s, or the ``Decided`` was lost. Meanwhile this witness grants no lease under
        its view (point 3), and if it is in every quorum that can still be formed, nobody holds
        one after ``lease_s``: every healthy member would drop everything (issue 29 item 6; the
        proposers it refused wait out their back-off, ``resend_s`` (4 + 2 rank), longer than a
        lease lasts past its last renewal). So it proposes at once, in a ballot above any it
        promised: phase 1 finds what a quorum may have accepted and finishes that, or a witness
        that already installed the successor answers ``Decided``. Any member may propose at any
        time in Paxos, so this changes no safety argument; it only bounds the time a pending
        successor blocks leases."""
        self._finish_at = math.inf
        accepted = self._accepted
        if accepted is None or self._restored is not None or now < self.quiet_until:
            return
        self._round_seen = max(self._round_seen, self._promised[0], accepted[0][0])
        rank = self.witnesses.index(self.me) if self.me in self.witnesses else len(self.witnesses)
        # Again if it is still pending by the time an attempt would have given up (this one may
        # be withdrawn when the member's view changes: ``withdraw``).
        self._finish_at = now + self.resend_s * (4 + 2 * rank)
        p = self._proposal
        if p is not None and p.slot == self.view.num + 1:
            self._round_seen = max(self._round_seen, p.rnd) + 1
            p.rnd = self._round_seen
            self._start(now)
        else:
            a = accepted[1]  # (a first view: its incarnation)
            self.propose(a.weighted(), now, rank, inc=a.inc, loads=a.loads, loads_at=a.loads_at, pins=a.pins)

    def _on_promise(self, src: str, m: Promise, now: float) -> None:
        p = self._proposal
        if p is None or m.slot != p.slot or src not in p.witnesses.all:
            return
        if not m.ok:
            self._round_seen = max(self._round_seen, m.rnd)
            return
        if m.rnd != p.rnd or p.phase != 1:
            return
        prior = View.checked(m.slot, m.members, m.weights, m.inc, m.loads, m.loads_at, m.pins) if m.acc_rnd else None
        p.promises[src] = ((m.acc_rnd, m.acc_by), prior)
        if p.witnesses.quorum(p.promises):
            # Paxos: the value accepted in the highest ballot, if any, else our own.
            best = max(p.promises.values(), key=lambda bv: bv[0])
            p.value = best[1] if best[1] is not None else p.own
            p.phase, p.next_send = 2, now
            self.tick(now)

    def _on_accepted(self, src: str, m: Accepted, now: float) -> None:
        p = self._proposal
        if p is None or m.slot != p.slot or m.rnd != p.rnd or p.phase != 2 or src not in p.witnesses.all:
            return
        if not m.ok:
            return
        p.accepted.add(src)
        if p.witnesses.quorum(p.accepted):
            chosen = p.value
            assert chosen is not None
            tell = (set(p.base.members) | set(chosen.members)) - {self.me}
            self.install(chosen, now)
            if chosen.ck != p.own.ck:
                self.superseded = p.own
            whole = Decided.of(chosen)
            step = DecidedStep.between(p.base, chosen) or whole
            for m_id in sorted(tell):
                # (The members of the view before hold it; a new member gets the whole view.)
                self._send(m_id, step if m_id in p.base.by_member else whole)

    # ------------------------------------------------------------------ acceptor

    def _decided(self) -> Decided:
        return Decided.of(self.view)

    def _on_prepare(self, src: str, m: Prepare, now: float) -> ViewMessage | None:
        if m.slot <= self.view.num:
            return self._decided()  # chosen already: the proposer is behind
        if self._restored is not None:
            return self._restored_answer(m.slot, m.inc)
        base = self._base()
        if m.slot != base.num + 1 or m.base != base.ck or now < self.quiet_until:
            return None  # behind (a request will teach us the view), or just restarted
        self._voting()
        ballot = (m.rnd, src)
        if ballot <= self._promised:
            return Promise(m.slot, self._promised[0], False)
        self._promised = ballot
        self.durable_changes += 1
        if self._accepted is None:
            return Promise(m.slot, m.rnd, True)
        (acc_rnd, acc_by), v = self._accepted
        return Promise(m.slot, m.rnd, True, acc_rnd, acc_by, v.members, v.weights, v.inc, v.loads, v.loads_at, v.pins)

    def _on_accept(self, src: str, m: Accept, now: float) -> ViewMessage | None:
        if m.slot <= self.view.num:
            return self._decided()
        if self._restored is not None:
            return self._restored_answer(m.slot, m.inc)
        base = self._base()
        if m.slot != base.num + 1 or m.base != base.ck or now < self.quiet_until:
            return None
        self._voting()
        ballot = (m.rnd, src)
        value = View.checked(m.slot, m.members, m.weights, m.inc, m.loads, m.loads_at, m.pins)
        if value is None:
            return None
        if ballot < self._promised:
            return Accepted(m.slot, m.rnd, False)
        self._promised = ballot
        if self._accepted is None or self._accepted[0] != ballot:
            self._finish_at = now + self._finish_delay()
        self._accepted = (ballot, value)
        self.durable_changes += 1
        return Accepted(m.slot, m.rnd, True)

    def _voting(self) -> None:
        if self._forgetful:  # past any quiet time: what a predecessor forgot no longer matters
            self._forgetful = False
            self.durable_changes += 1

    def _restored_answer(self, slot: int, inc: int) -> ViewMessage | None:
        """A restarted acceptor that has not installed a view since: the view it held was
        chosen, and so was every view before it, so a proposer of the same incarnation for one
        of those slots is told that view (``heard`` has installed it by then, unless the
        record predates incarnations). For later slots it waits until it learns the view they
        follow. A proposer of another incarnation (a cluster founded anew under the same name)
        is told nothing: the restored view is not of its history."""
        r = self._restored
        assert r is not None
        if slot > r.view.num or (inc and r.view.inc and inc != r.view.inc):
            return None
        return Decided.of(r.view)

    def heard(self, src: str, inc: int, now: float, num: int = 0) -> None:
        """A member whose stable view is of incarnation ``inc`` spoke to this acceptor. If that
        is the incarnation of the view this acceptor restored and has not installed again, the
        restored view is installed now: it was chosen (its previous process installed it), in
        this cluster's history, so installing it is what learning it from a ``Decided`` would
        do. Waiting instead to be taught a view that new stalled whole clusters whose other
        members were behind it (fuzz --wide --durable-state seeds 229, 275, 277, 701, 728,
        755: a witness that was alone a quorum chose a view of itself alone, then restarted).
        Not at start: a record left from an earlier cluster of the same name would then pull a
        new cluster onto a view of the old one; the incarnation tells them apart
        (``foreign_inc``: the latest other incarnation heard, for the driver's log). ``num``: the
        number of the speaker's view; a record that yields does so only to a view numbered above
        its own, as a cluster founded anew is (rule 11), not to a late ``Accept`` of a first view
        that lost to the one it restored (its value carries its proposer's incarnation)."""
        r = self._restored
        if r is None or not inc or not r.view.inc or src == self.me:
            return  # (itself: its own requests carry what it restored, which proves nothing)
        if inc != r.view.inc:
            self.foreign_inc = inc
            if self._on_yield is not None and num > r.view.num:
                self._yield_restored()
            return
        self.install(r.view, now)

    def _yield_restored(self) -> None:
        """Another incarnation spoke while the restored view is not installed again, and the
        record yields (``on_yield``: a node's default state, kept without the operator asking
        for it): drop the record and go on as a process that kept none, *forgetful*, so it
        waits the quiet time before it votes in a view that names it. That is what the same
        process started without the record would do, so the record never leaves a node worse
        off than keeping none; and it never votes in the restored view's history again, since
        any view it installs from now on is of the other incarnation, numbered above (rule 11).
        A record that binds (``--state-dir``) refuses the other incarnation instead."""
        assert self._on_yield is not None
        self._restored = None
        self._forgetful = True
        self.yielded = True
        self.durable_changes += 1
        self._on_yield()

    def receive(self, src: str, msg: ViewMessage, now: float) -> ViewMessage | None:
        """Handle one message; the reply to send back to ``src``, if any."""
        if isinstance(msg, (Prepare, Accept)):
            self.heard(src, msg.inc, now, msg.slot - 1)
        elif isinstance(msg, (Decided, DecidedStep)):
            self.heard(src, msg.inc, now, msg.num)
        if isinstance(msg, Prepare):
            return self._on_prepare(src, msg, now)
        if isinstance(msg, Accept):
            return self._on_accept(src, msg, now)
        if isinstance(msg, Promise):
            self._on_promise(src, msg, now)
        elif isinstance(msg, Accepted):
            self._on_accepted(src, msg, now)
        elif isinstance(msg, DecidedStep):
            view = msg.apply(self.view)
            if view is not None:
                self.install(view, now)
            else:
                self.steps_missed += 1
        else:
            view = View.checked(msg.num, msg.members, msg.weights, msg.inc, msg.loads, msg.loads_at, msg.pins)
            if view is not None:
                self.install(view, now)
        return None
