"""Member statuses, event kinds, and which membership update overrides which.

Why this module exists: the statuses (``"alive"``, ``"suspect"``, ...) and event kinds were bare
strings typed again in several modules, and the rules deciding whether a gossiped
``Alive``/``Suspect``/``Dead`` replaces the record a member holds lived in if-branches of the
core. Here they are named once, as types, and the rules are one table (``PRECEDENCE``).

Types: ``Literal`` string types, not ``enum.StrEnum``. The values stay plain ``str`` at run time,
so nothing changes for callers (comparisons, JSON, ``repr`` of ``MemberInfo``/``MemberEvent``,
pickles), while mypy checks every use. A ``StrEnum`` was tried and rejected: compiled by mypyc
(``make sim-fast``), a dataclass field typed with it rejects a plain ``"alive"`` with a
``TypeError`` (callers and tests build ``MemberInfo`` from strings), and its ``repr`` differs.

Precedence. SWIM (Das, Gupta, Motivala, DSN 2002, section 4.2) orders the updates about one
member by its incarnation number, which only that member raises (to refute a suspicion):

* ``Alive(i)`` overrides ``Suspect(j)`` and ``Alive(j)`` if ``i > j``;
* ``Suspect(i)`` overrides ``Suspect(j)`` if ``i > j`` and ``Alive(j)`` if ``i >= j``;
* ``Confirm(i)`` (our ``Dead``) overrides ``Alive``/``Suspect`` at any ``j``.

We follow hashicorp/memberlist (state.go ``aliveNode``, ``suspectNode``, ``deadNode``) where it
departs from the paper: a ``Dead`` older than the record (``i < j``) is ignored, since the
member has refuted it already; ``Dead`` and ``left`` are final except for a newer ``Alive``
(``i > j``: the member restarted or the accusation was false); and a ``Suspect`` at the held
suspicion's own incarnation is passed on as a Lifeguard confirmation (Dadgar et al., arXiv
1707.00788, section IV-B), so it "applies" at ``i == j`` too. A graceful leave is a ``Dead``
sent by the member itself; it obeys the ``Dead`` rules and leaves status ``left``.

The same table decides how a member treats gossip about *itself* (held status ``alive``): a
``Suspect``/``Dead`` that applies is refuted, a newer ``Alive`` is outbid.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

__all__ = [
    "Status", "EventKind", "ALIVE", "SUSPECT", "DEAD", "LEFT", "STATUSES", "LIVE_STATUSES",
    "JOINED", "UPDATED", "EVENT_KINDS", "PRECEDENCE", "ALIVE_MARGIN_MIN", "supersedes",
    "INCARNATION_MAX", "INCARNATION_SOFT_MAX", "INCARNATION_STEP_MAX", "INCARNATION_STEP_INTERVAL_S",
    "bounded_incarnation",
]

#: A member's status in a view. ``alive`` and ``suspect`` are live (a suspect keeps its
#: partitions: suspicion gives a slow member time, it is no verdict); ``dead`` was declared
#: failed; ``left`` left gracefully.
Status = Literal["alive", "suspect", "dead", "left"]

ALIVE: Final = "alive"
SUSPECT: Final = "suspect"
DEAD: Final = "dead"
LEFT: Final = "left"
STATUSES: Final[tuple[Status, ...]] = (ALIVE, SUSPECT, DEAD, LEFT)
#: Statuses under which a member still counts as present (placement owns partitions from these).
LIVE_STATUSES: Final = frozenset({ALIVE, SUSPECT})

#: What a ``MemberEvent`` reports: ``joined`` (entered the live set), ``updated`` (metadata or
#: address changed), ``suspect`` (alive -> suspect), ``alive`` (suspect -> alive: it refuted),
#: ``dead`` (declared failed), ``left`` (left gracefully).
EventKind = Literal["joined", "updated", "suspect", "alive", "dead", "left"]

JOINED: Final = "joined"
UPDATED: Final = "updated"
EVENT_KINDS: Final[tuple[EventKind, ...]] = (JOINED, UPDATED, SUSPECT, ALIVE, DEAD, LEFT)

#: ``PRECEDENCE[update][held]``: how much newer than the held record (``incarnation -
#: held_incarnation``) an update must be to apply to it; ``None``: it never applies. Rows are
#: the update (``Alive``, ``Suspect``, ``Dead``; a leave is a ``Dead`` and has its row), columns
#: the status we hold. See the module docstring for the sources.
PRECEDENCE: Final[Mapping[Status, Mapping[Status, int | None]]] = {
    # update: {held status: margin}
    ALIVE:   {ALIVE: 1, SUSPECT: 1, DEAD: 1,    LEFT: 1},
    SUSPECT: {ALIVE: 0, SUSPECT: 0, DEAD: None, LEFT: None},
    DEAD:    {ALIVE: 0, SUSPECT: 0, DEAD: None, LEFT: None},
    LEFT:    {ALIVE: 0, SUSPECT: 0, DEAD: None, LEFT: None},
}

#: The smallest margin of the ``Alive`` row: an ``Alive`` less newer than that applies to no
#: record, whatever its status. Most gossip is news the receiver has already (92% of the ~950k
#: ``Alive`` a 256-member 5%-loss simulation delivers per 100 s), so ``updates.py`` checks this
#: first and calls ``supersedes`` only for the rest (the call per message was the largest cost
#: the table added to such a run, in a profile).
ALIVE_MARGIN_MIN: Final = min(need for need in PRECEDENCE[ALIVE].values() if need is not None)


def supersedes(update: Status, incarnation: int, held: Status, held_incarnation: int) -> bool:
    """Whether an update (``update`` at ``incarnation``) applies to a record held as ``held`` at
    ``held_incarnation``, by ``PRECEDENCE``."""
    need = PRECEDENCE[update][held]
    return need is not None and incarnation - held_incarnation >= need


#: Incarnations travel as unsigned 64-bit integers: a member whose incarnation reached this
#: can refute nothing any more (it cannot go higher).
INCARNATION_MAX: Final = 2**64 - 1
#: Honest incarnations stay far below this: they start at 0 or at Unix seconds (about 2**31)
#: and rise by one per refutation or metadata change.
INCARNATION_SOFT_MAX: Final = 2**63 - 1
#: Above ``INCARNATION_SOFT_MAX`` an update raises a record by at most this much, and by more
#: than one at most once per ``INCARNATION_STEP_INTERVAL_S`` (``Updates`` keeps the time).
INCARNATION_STEP_MAX: Final = 2**32
INCARNATION_STEP_INTERVAL_S: Final = 1.0


def bounded_incarnation(incarnation: int, held: int, may_step: bool = True) -> int:
    """The incarnation an update naming ``incarnation`` is applied at, over a record held at
    ``held`` (ours, or another member's); ``may_step``: the record took no step above the soft
    maximum within the last ``INCARNATION_STEP_INTERVAL_S``.

    Without keys a stranger can gossip any incarnation (issue 31). One naming the maximum made
    its subject unable to refute ever again (refuting needs one more, and the wire holds no
    more), and its refutation raised ``OverflowError``. Up to ``INCARNATION_SOFT_MAX`` updates
    apply as named, so a member outbids any forged value there in one refutation. Above it a
    record rises by one per update, or by up to ``INCARNATION_STEP_MAX`` once a second: running
    a member out of incarnations takes 2**31 seconds (or 2**63 updates), however fast a
    stranger sends. A member's own ``Alive`` still beats what a receiver holds below it (at
    worst at a clamped incarnation, caught up by the next one). Honest traffic never gets
    there: this changes nothing for it."""
    if incarnation <= INCARNATION_SOFT_MAX:
        return incarnation
    return min(incarnation, max(INCARNATION_SOFT_MAX, held + (INCARNATION_STEP_MAX if may_step else 1)))
