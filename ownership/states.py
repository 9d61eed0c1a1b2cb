"""A partition's state at one member, as one type, and the table of the moves between states.

The rules (``ownership.core``) keep a partition's state in the dicts each rule reads fastest:
``owned`` (with its ``releasing`` flag), ``free`` (notes held), ``waiting``, ``_to_pass`` and
``_passed`` - an entry in more than one at once in a few cases (a note held for a partition also
waited for; the member it was last passed to, kept while it is waited for again). This module
names the one state those entries mean (``state_of``, by precedence: ownership first, then a
note held, then a wait) and lists every move from one state to another the rules make, each with
the rule that makes it (docs/ownership.md numbers them the same way). h11 keeps its connection
states the same way: one enum, one table of allowed transitions.

The table is a checked claim, not a comment: the simulator's ``PartitionMoves`` invariant
(``simulations.invariants``) compares every member's states after every step of every run -
the scenarios, the fuzzer's random fault schedules - and fails, with the seed, on any move
missing here. The moves were first gathered from fuzz runs, then each was given its rule; a
move that appeared without one would have been a bug to find (none did).

States::

    NONE       nothing known here about the partition
    WAITING    led by this member under its stable view; it waits for a note, a verdict, a
               takeover's proof, the creation wait or the census before acquiring (rules 3-10)
    OWNED      acquired: the application works on it under the quorum lease (rule 1)
    RELEASING  owned, and being drained before the handoff (rule 3) or the lease's end (rule 1)
    HELD       a note held (``free``): the right to the partition, not yet acquired or passed on
    TO_PASS    dropped by this member without a note and no longer led by it: a note goes to
               the new leader once a take-back would be allowed (rules 5, 9)
    PASSED     handed on: the member it went to is remembered, to answer a ``Query`` (rule 6)
               and to expect it back from there
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core import Ownership

__all__ = ["PartitionState", "TRANSITIONS", "state_of", "states_of"]


class PartitionState(enum.Enum):
    NONE = "none"
    WAITING = "waiting"
    OWNED = "owned"
    RELEASING = "releasing"
    HELD = "held"
    TO_PASS = "to_pass"
    PASSED = "passed"


_S = PartitionState

#: Every move the rules make, (from, to) -> why. Anything else is a bug (module docstring).
TRANSITIONS: Mapping[tuple[PartitionState, PartitionState], str] = {
    # Becoming this member's partition.
    (_S.NONE, _S.WAITING): "a new stable view makes this member its leader (rules 2, 3)",
    (_S.NONE, _S.OWNED):
        "a note acquired on arrival, or a wait that ends in the pass that starts it (the founder's first view) "
        "(rules 3, 9, 11)",
    (_S.NONE, _S.HELD): "a note arrives for a partition this member does not lead (yet) (rule 3)",
    (_S.NONE, _S.PASSED):
        "a note forwarded on arrival to the partition's leader, or the asker of a Query remembered (rules 3, 6)",
    (_S.WAITING, _S.OWNED):
        "acquired: a note, a proven takeover, a clean take-back, the creation wait or the census (rules 3-10)",
    (_S.WAITING, _S.HELD): "a note arrives while waiting for it, to be acquired on the next pass (rule 3)",
    (_S.HELD, _S.OWNED): "a note held is acquired under a lease of the view that makes this member leader (rule 3)",
    (_S.PASSED, _S.WAITING): "led by this member again after it handed it on: expected back from the receiver (rule 5)",
    (_S.PASSED, _S.OWNED):
        "led by this member again, and the note comes in the same datagram as the view that says so (its "
        "sender led it under the view before): expected back and acquired in one pass (rules 3, 5; fuzz --pins "
        "seed 145)",
    (_S.PASSED, _S.HELD):
        "a note for a partition this member passed on earlier, or its own note refused by a leaving member (rule "
        "3)",
    (_S.TO_PASS, _S.WAITING): "led by this member again before its note went out: its own to take back (rule 5)",
    (_S.TO_PASS, _S.HELD):
        "a note arrives for a partition this member dropped silently: the note's right replaces the silent one "
        "(rule 3; fuzz seed 42)",
    # Giving it up.
    (_S.OWNED, _S.RELEASING): "the stable view moved it, this member leaves, or its lease is in doubt (rules 1, 3)",
    (_S.OWNED, _S.WAITING):
        "ownership ended at once without a note (declared dead, the lease ran out, a jump between views): back "
        "only on a clean verdict (rules 1, 4, 5, 9)",
    (_S.OWNED, _S.TO_PASS):
        "ownership ended at once without a note (declared dead, the lease ran out) in the pass that finds "
        "another member leading it: passed on once a take-back would be allowed (rules 1, 5, 9)",
    (_S.OWNED, _S.PASSED):
        "ended at once without a note and, in the same pass, no longer led and given up where a taker may "
        "hold it (rules 1, 5, 9; in the code, not met in the fuzz runs)",
    (_S.RELEASING, _S.OWNED):
        "ended without a note and taken back in the same pass: still led by this member, under a lease that held "
        "(rule 5)",
    (_S.RELEASING, _S.PASSED): "drained and handed on with a note (rule 3)",
    (_S.RELEASING, _S.WAITING):
        "ended without a note (deadline, lease, jump) while this member still leads it (rules 1, 5, 9)",
    (_S.RELEASING, _S.TO_PASS): "ended without a note, and another member leads it now (rules 5, 9)",
    (_S.RELEASING, _S.HELD):
        "drained, but its leader refused notes (it is leaving): the right is kept as a note held (rule 3; in the "
        "code, not met in the fuzz runs)",
    (_S.RELEASING, _S.NONE):
        "the last release of a leaving member that has nobody to hand it to (the cluster's last member) "
        "(rule 3; in the code, not met in the fuzz runs)",
    (_S.WAITING, _S.NONE):
        "no longer led, and waited for from another member: the new leader is told whom to wait for (Redirect; "
        "rule 6)",
    (_S.WAITING, _S.PASSED): "no longer led: passed on, or dropped where a taker may hold it (rules 5, 6)",
    (_S.WAITING, _S.TO_PASS):
        "no longer led, and this member was the last holder: passed on once a take-back would be allowed (rules "
        "5, 9)",
    (_S.HELD, _S.WAITING):
        "a note held, dropped with the lease (declared dead, the lease ran out): back only on a clean verdict "
        "(rules 4, 5)",
    (_S.HELD, _S.PASSED): "a held note is forwarded to the partition's leader (rule 3)",
    (_S.HELD, _S.TO_PASS): "a note held, dropped with the lease, for a partition another member leads now (rules 5, 9)",
    (_S.TO_PASS, _S.PASSED):
        "passed on: a note once a take-back would be allowed, or dropped when the view moved on (rules 5, 9)",
}


def state_of(own: Ownership, p: int) -> PartitionState:
    """The state of partition ``p`` at the member ``own`` (precedence in the module docstring)."""
    o = own.owned.get(p)
    if o is not None:
        return _S.RELEASING if o.releasing else _S.OWNED
    if p in own.free:
        return _S.HELD
    if p in own.waiting:
        return _S.WAITING
    if p in own._to_pass:
        return _S.TO_PASS
    if p in own._passed:
        return _S.PASSED
    return _S.NONE


def states_of(own: Ownership) -> dict[int, PartitionState]:
    """Every partition not in ``NONE`` at the member ``own``, with its state: ``state_of`` for
    each, built by layers in reverse precedence (each a C-level ``dict.update``: the simulator's
    invariant runs this after every step)."""
    out = dict.fromkeys(own._passed, _S.PASSED)
    out.update(dict.fromkeys(own._to_pass, _S.TO_PASS))
    out.update(dict.fromkeys(own.waiting, _S.WAITING))
    out.update(dict.fromkeys(own.free, _S.HELD))
    out.update(dict.fromkeys(own.owned, _S.OWNED))
    for p, o in own.owned.items():
        if o.releasing:
            out[p] = _S.RELEASING
    return out
