"""A quorum lease from witness members: how a member *shows* it is on the side that keeps
ownership, and how a taker proves a dead holder has stopped - with no lease store (sans-I/O).

Theory of operation
===================

The *stable view* S is a set of members every member of a settled cluster agrees on
(``placement.exclusive`` decides when to adopt one). Its *witnesses* W(S) are the ``k`` members
of S that rank highest by a fixed hash of their id (rendezvous: adding or removing one member
changes at most one witness). A set Q of witnesses is a *quorum* when it holds more than half
of W(S), or exactly half including the first witness: two quorums always share a witness.

Lease. Every ``renew_s`` a member sends ``LeaseReq(seq, generation, S)`` to the witnesses of
its S. A witness grants it when its own stable view is S and the member was not *condemned* at
that generation, and remembers when it last granted. When a quorum granted round ``seq``, the
member's lease runs to ``send_time(seq) + lease_s`` on its own clock - counted from when it
*sent* the request, so time in flight only shortens it. A member without a valid lease owns
nothing (``placement.exclusive``): a member cut off from a witness quorum, frozen, or on the
losing side of a split stops by itself within ``lease_s``.

Condemnation. Before a member takes over the partitions of a holder H it believes dead, it asks
the witnesses of its S to condemn H. A witness then refuses H every generation it has seen so
far, and answers how long ago (``age``, its clock) it last granted H. Received at local time R,
that answer proves H's lease ended by R + lease_s (1 + rho) / (1 - rho) - age, with clock
*rates* within 1 +- rho (module ``placement.exclusive``: ``max_drift``), because H's last granted
request was sent before the grant and H stops ``lease_s`` after sending it. H's lease needed a
quorum and so did the condemnation: they share a witness. Taking the worst answer of the quorum
that gives the earliest bound, the taker waits until then. This needs no bound on message delay
and no synchronised clocks; it assumes bounded rate drift, and that H checks its lease before
each unit of work (a write started before the deadline and finished after it is what fencing
epochs are for).

A condemned member is refused by that witness until it shows it has acted on the
condemnation: its reply carries a nonce, the member drops everything it owns, and only its
later requests echo the nonce (``cleared``), which lifts the condemnation at that witness. So a
condemnation can never be outlived by a lease granted before the member stopped.

A member that dropped its ownership (lease lost, declared dead, condemned) takes its own
partitions back at once only if every witness of the quorum of the latest renewal of its
dropped lease *generation* reports no condemnation: a taker's condemnation quorum shares a witness with
that quorum, so "none of them" means nobody took anything. Otherwise it waits for the takers'
notes.

A witness answers for what it may have granted before it (re)started: with no grant to the
subject since its process started, it reports one at its start, so a witness that crashed and
came back with an empty memory never shortens a taker's wait.

Fencing epochs. A member's lease requests carry a *reserve*: the highest fencing epoch it may
use. It uses an epoch only once a quorum granted a request carrying a reserve at least that
high (``want``; reserves grow in blocks of ``RESERVE_BLOCK``, so this rarely costs a round). A
witness remembers the highest reserve it granted each member and a condemnation reply carries
it: the condemnation quorum shares a witness with the quorum that confirmed the reserve, so the
taker learns a bound on every epoch the dead holder used (``epoch_floor``) and acquires above
it. Epochs of a partition therefore rise across crash takeovers too, under the same
one-witness-set assumption as the lease itself; a witness that restarted forgets reserves (its
"no grant since my start" makes waiting safe, not epochs monotonic).

Known limit: the witness set follows the stable view. Members adopt a new stable view only
while they hold a lease, and a witness grants only requests made under its own stable view, so
in a connected cluster the two sides of any grant and any condemnation use one witness set.
Two stable views can coexist only when connectivity is not transitive (A sees B and C, which
do not see each other) for longer than ``stable_after_s``; see docs/ownership.md.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Union

__all__ = ["QuorumLease", "LeaseReq", "LeaseReply", "Condemn", "CondemnReply", "LeaseMessage",
           "witnesses_of", "is_quorum", "view_checksum"]

#: Fencing epochs a member reserves at a time (``QuorumLease.want``): large, so that asking
#: for more (one extra lease round) is rare; epochs only need to rise, not to be dense.
RESERVE_BLOCK = 1 << 16


@dataclass(frozen=True)
class LeaseReq:
    seq: int
    generation: int
    stable: int
    cleared: int = 0  # a condemnation (its nonce) the requester has acted on: it dropped everything
    members: tuple[str, ...] = ()  # the requester's stable view, for a witness that has none yet
    reserve: int = 0  # fencing epochs the requester may use up to (``QuorumLease.reserve``)


@dataclass(frozen=True)
class LeaseReply:
    seq: int
    stable: int
    granted: bool
    condemned: int  # nonce of a standing condemnation of the requester (0: none)
    members: tuple[str, ...] = ()  # the witness's stable view, when it is not the requester's


@dataclass(frozen=True)
class Condemn:
    subject: str
    stable: int
    nonce: int


@dataclass(frozen=True)
class CondemnReply:
    subject: str
    nonce: int
    stable: int
    ok: bool
    age_s: float  # since the witness last granted the subject
    reserve: int = 0  # highest epoch reserve the witness granted the subject


LeaseMessage = Union[LeaseReq, LeaseReply, Condemn, CondemnReply]


def view_checksum(members: Iterable[str]) -> int:
    return zlib.crc32("\n".join(sorted(members)).encode())


def witnesses_of(members: Iterable[str], k: int) -> tuple[str, ...]:
    """The k members ranking highest by CRC-32 of ("witness", id); ties by id."""
    ranked = sorted(members, key=lambda m: (-zlib.crc32(b"witness/" + m.encode()), m))
    return tuple(ranked[:k])


def is_quorum(group: Iterable[str], witnesses: tuple[str, ...]) -> bool:
    inside = set(group) & set(witnesses)
    n = len(witnesses)
    return n > 0 and (2 * len(inside) > n or (2 * len(inside) == n and witnesses[0] in inside))


@dataclass
class _Condemning:
    nonce: int
    next_send: float
    stable_ck: int  # the stable view the holder's lease was granted under (ours when we began)
    witnesses: tuple[str, ...]
    bounds: dict[str, float] = field(default_factory=dict)  # witness -> H's lease over by
    reserves: dict[str, int] = field(default_factory=dict)  # witness -> H's epoch reserve it granted


class QuorumLease:
    """The lease of member ``me`` and its witness duties (module docstring)."""

    def __init__(self, me: str, *, witnesses: int, lease_s: float, renew_s: float, resend_s: float,
                 max_drift: float, now: float) -> None:
        self.me = me
        self.k = witnesses
        self.lease_s = lease_s
        self.renew_s = renew_s
        self.resend_s = resend_s
        self.stretch = (1 + max_drift) / (1 - max_drift)
        self.stable: tuple[str, ...] = ()
        self.stable_ck = view_checksum(())
        self.witnesses: tuple[str, ...] = ()
        self.generation = 0
        self.valid_until = float("-inf")
        #: A witness condemned this member: the owner of this lease must drop everything.
        self.condemned = False
        self._last_quorum: dict[int, frozenset[str]] = {}  # generation -> quorum of its latest renewal
        #: Generations dropped while owning, not yet judged: witnesses that reported no
        #: condemnation since. ``clean``: the judged ones (True: nobody took anything).
        self._pending: dict[int, set[str]] = {}
        self.clean: dict[int, bool] = {}
        self._heard_condemned: dict[str, int] = {}  # witness -> nonce it refused us with
        self._echo: dict[str, int] = {}  # witness -> nonce to echo (we dropped after hearing it)
        self._teach: set[str] = set()  # witnesses without a stable view: send them ours
        #: Fencing epochs: requests carry ``reserve``; ``confirmed_reserve`` is the highest
        #: reserve a witness quorum granted. The owner uses no epoch above it, so a taker that
        #: condemns this member learns a bound on every epoch it used (``epoch_floor``).
        self.reserve = RESERVE_BLOCK
        self.confirmed_reserve = 0
        self._seq = 0
        self._next_round = now
        self._rounds: dict[int, tuple[float, int, set[str], int]] = {}  # seq -> (sent, generation, granted by, reserve)
        self._view: frozenset[str] = frozenset()
        self._settled = False
        self._healthy: frozenset[str] = frozenset()
        # witness side
        self._condemnations: dict[str, int] = {}  # member -> nonce of its standing condemnation
        self._reserves: dict[str, int] = {}  # member -> highest epoch reserve granted to it
        #: This process's start: a grant made by a previous process of this witness id (a
        #: restart) was made before it, so "no grant since then" is reported as a grant then.
        self._born = now
        self._nonce_seq = 0
        self._last_grant: dict[str, float] = {}
        self._past: list[int] = []  # stable views this witness held before the current one
        # taker side
        self._condemning: dict[str, _Condemning] = {}
        self._out: list[tuple[str, LeaseMessage]] = []
        self.requests_refused = 0

    # ------------------------------------------------------------------ holder side

    def valid(self, now: float) -> bool:
        return now < self.valid_until

    def set_stable(self, members: Iterable[str]) -> None:
        members = tuple(sorted(members))
        if members == self.stable:
            return
        self._past = (self._past + [self.stable_ck])[-16:]
        self.stable = members
        self.stable_ck = view_checksum(members)
        self.witnesses = witnesses_of(members, self.k)
        self._rounds.clear()  # grants under the old view no longer count
        # Condemnations under way keep the witness set they began with: the dead holder's
        # lease came from it, and witnesses still answer for views they held (_past).

    def hint(self, view: Iterable[str], settled: bool, healthy: Iterable[str] = ()) -> None:
        """The current view, whether it is settled (nobody suspect, this member joined), and the
        members seen alive and not suspect (a witness does not condemn those)."""
        self._view = frozenset(view)
        self._settled = settled
        self._healthy = frozenset(healthy)

    def drop(self, owned: bool) -> None:
        """Ownership was dropped: a new generation, and echo the condemnations heard. A
        generation that owned something waits for its verdict (``clean``)."""
        if owned:
            if self._heard_condemned or self.generation not in self._last_quorum:
                self.clean[self.generation] = False if self._heard_condemned else True
            else:
                self._pending[self.generation] = set()
        self._echo.update(self._heard_condemned)
        self._heard_condemned.clear()
        self.condemned = False
        self.generation += 1
        self.valid_until = float("-inf")
        self._rounds.clear()

    def tick(self, now: float) -> None:
        if now >= self._next_round:
            self._next_round = now + self.renew_s
            targets = self.witnesses or witnesses_of(self._view, self.k)
            ask = set()
            for g, seen in self._pending.items():  # after a drop, also ask the witnesses of the dropped lease
                ask |= self._last_quorum[g] - seen
            if ask:
                targets = tuple(dict.fromkeys((*targets, *sorted(ask))))
            if targets:
                self._seq += 1
                self._rounds[self._seq] = (now, self.generation, set(), self.reserve)
                for old in [q for q in self._rounds if q < self._seq - 8]:
                    del self._rounds[old]
                for w in targets:
                    members = self.stable if w in self._teach else ()
                    self._send(w, LeaseReq(self._seq, self.generation, self.stable_ck, self._echo.get(w, 0), members,
                                           self.reserve), now)
        for subject, c in self._condemning.items():
            if now >= c.next_send and not self._condemn_done(c):
                c.next_send = now + self.resend_s
                for w in c.witnesses:
                    if w not in c.bounds:
                        self._send(w, Condemn(subject, c.stable_ck, c.nonce), now)

    def on_reply(self, src: str, r: LeaseReply, now: float) -> None:
        if r.condemned:
            if self._echo.get(src) != r.condemned:
                self._heard_condemned[src] = r.condemned
                self.condemned = True
                # Someone is taking our partitions: nothing dropped and not yet taken back may be.
                for g in self._pending:
                    self.clean[g] = False
                self._pending.clear()
                for g in self.clean:
                    self.clean[g] = False
        else:
            self._echo.pop(src, None)  # lifted
            self._note_clean(src)
        if r.stable != self.stable_ck:
            # Another stable view. A member without a lease (a joiner, a member back after a
            # split the others moved on from) adopts the witnesses' view, even before it is in
            # it: safety needs grants and condemnations to use one witness set, not membership.
            # A member whose settled view is exactly that view adopts it at once instead of
            # waiting out stable_after_s, so witnesses and members switch together.
            members = frozenset(r.members)
            if members and src in members and (not self.valid(now) or (self._settled and members == self._view)):
                self.set_stable(r.members)
            elif not members and self.stable:
                self._teach.add(src)  # a witness that has no stable view yet: tell it ours
            return
        self._teach.discard(src)
        rnd = self._rounds.get(r.seq)
        if rnd is None or src not in self.witnesses or not r.granted:
            return
        sent, gen, granted, reserve = rnd
        granted.add(src)
        if is_quorum(granted, self.witnesses):
            self.confirmed_reserve = max(self.confirmed_reserve, reserve)
        if gen == self.generation and is_quorum(granted, self.witnesses):
            if sent + self.lease_s >= self.valid_until:
                # The latest renewal's quorum: a taker condemns under the witness set that
                # granted it (the stable view in force), so the two quorums share a witness.
                self.valid_until = sent + self.lease_s
                self._last_quorum[gen] = frozenset(granted)

    def want(self, epoch: int, now: float) -> bool:
        """May the owner use fencing epoch ``epoch``? If the confirmed reserve is below it, a
        larger reserve is requested at once (the answer turns True after a quorum grants it)."""
        if epoch <= self.confirmed_reserve:
            return True
        if epoch > self.reserve:
            self.reserve = epoch + RESERVE_BLOCK
            self._next_round = min(self._next_round, now)
        return False

    def echoing(self) -> bool:
        """Condemnations heard and not yet lifted by the witness that made them."""
        return bool(self._echo or self._heard_condemned)

    def _note_clean(self, src: str) -> None:
        """``src`` holds no condemnation of us: count it toward "nobody took our partitions"."""
        for g, seen in list(self._pending.items()):
            quorum = self._last_quorum[g]
            if src in quorum:
                seen.add(src)
                if seen >= quorum:
                    self.clean[g] = True
                    del self._pending[g]

    # ------------------------------------------------------------------ witness side

    def on_request(self, src: str, req: LeaseReq, now: float) -> LeaseReply:
        if not self.stable and req.members and view_checksum(req.members) == req.stable:
            self.set_stable(req.members)  # borrowed, as a joiner borrows from a reply
        nonce = self._condemnations.get(src, 0)
        if nonce and req.cleared == nonce:
            del self._condemnations[src]  # it dropped everything after hearing of it
            nonce = 0
        if req.stable != self.stable_ck or not self.stable:
            self.requests_refused += 1
            return LeaseReply(req.seq, self.stable_ck, False, nonce, self.stable)
        if nonce:
            self.requests_refused += 1
            return LeaseReply(req.seq, self.stable_ck, False, nonce)
        self._last_grant[src] = now
        self._reserves[src] = max(self._reserves.get(src, 0), req.reserve)
        return LeaseReply(req.seq, self.stable_ck, True, 0)

    def on_condemn(self, src: str, c: Condemn, now: float) -> CondemnReply:
        # Also for a stable view this witness has left: it grants nothing under it any more, so
        # its last grant to the subject bounds the subject's lease as well.
        if (not self.stable or (c.stable != self.stable_ck and c.stable not in self._past)
                or (c.subject in self._healthy and src != c.subject)):  # (a restart condemns its old self)
            # Refusing only delays a takeover (the taker asks again): a witness that sees the
            # subject alive and unsuspected keeps a taker with a stale view (a split that just
            # healed) from condemning a healthy side.
            return CondemnReply(c.subject, c.nonce, self.stable_ck, False, 0.0)
        s = c.subject
        if s not in self._condemnations:
            self._nonce_seq += 1
            self._condemnations[s] = self._nonce_seq
        last = self._last_grant.get(s, self._born)
        return CondemnReply(s, c.nonce, self.stable_ck, True, now - last, self._reserves.get(s, 0))

    # ------------------------------------------------------------------ taker side

    def condemn(self, subject: str, now: float) -> None:
        """Start proving that ``subject`` has stopped (idempotent)."""
        if subject in self._condemning or not self.witnesses:
            return
        self._nonce_seq += 1
        self._condemning[subject] = _Condemning(self._nonce_seq, now, self.stable_ck, self.witnesses)
        self.tick(now)

    def free_at(self, subject: str) -> float | None:
        """When ``subject``'s lease is over for sure (None: not proven yet)."""
        c = self._condemning.get(subject)
        if c is None:
            return None
        order = sorted(c.bounds.items(), key=lambda kv: kv[1])
        for i in range(len(order)):
            if is_quorum((w for w, _ in order[: i + 1]), c.witnesses):
                return order[i][1]
        return None

    def epoch_floor(self, subject: str) -> int:
        """The highest epoch reserve the answering witnesses granted ``subject``: once
        ``free_at`` is proven, their quorum shares a witness with every quorum that confirmed a
        reserve of the subject, so the subject used no epoch above this (module docstring)."""
        c = self._condemning.get(subject)
        return max(c.reserves.values(), default=0) if c is not None else 0

    def forget(self, subject: str) -> None:
        self._condemning.pop(subject, None)

    def on_condemn_reply(self, src: str, r: CondemnReply, now: float) -> None:
        c = self._condemning.get(r.subject)
        if c is None or r.nonce != c.nonce or not r.ok or src not in c.witnesses:
            return
        c.bounds[src] = now + max(0.0, self.lease_s * self.stretch - r.age_s)
        c.reserves[src] = r.reserve

    def _condemn_done(self, c: _Condemning) -> bool:
        return is_quorum(c.bounds, c.witnesses)

    # ------------------------------------------------------------------ plumbing

    def receive(self, src: str, msg: LeaseMessage, now: float) -> None:
        if isinstance(msg, LeaseReq):
            self._send(src, self.on_request(src, msg, now), now)
        elif isinstance(msg, LeaseReply):
            self.on_reply(src, msg, now)
        elif isinstance(msg, Condemn):
            self._send(src, self.on_condemn(src, msg, now), now)
        else:
            self.on_condemn_reply(src, msg, now)

    def _send(self, dst: str, msg: LeaseMessage, now: float) -> None:
        if dst == self.me:  # this member is one of the witnesses: no network
            self.receive(self.me, msg, now)
        else:
            self._out.append((dst, msg))

    def messages(self) -> list[tuple[str, LeaseMessage]]:
        out, self._out = self._out, []
        return out

    def next_time(self) -> float:
        t = self._next_round
        for c in self._condemning.values():
            if not self._condemn_done(c):
                t = min(t, c.next_send)
        return t
