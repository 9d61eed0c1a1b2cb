"""What the ownership core (``ownership.core``) says: the actions it asks its driver to carry
out (``Acquired``, ``Release``, ``Ended``) and the messages members exchange for handoffs,
queries and the census (rules 3, 5, 6 and 10 of docs/ownership.md). The lease and view messages
are ``ownership.lease``'s and ``ownership.views``'s; ``Message`` is the union the wire carries
(``ownership.wire``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .lease import LeaseMessage

__all__ = [
    "Acquired", "Release", "Ended", "Action", "Note", "NoteAck", "NoteRefused", "Redirect", "Query", "Census", "Disown",
    "ViewAsk", "NoView", "WAITS", "MAY_FOUND", "FORMS", "Message", "CENSUS_BATCH",
]


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
    """Ownership of ``partition`` ended at ``at`` (earlier than now when the lease ran out
    while the process was frozen)."""
    partition: int
    epoch: int
    at: float
    timed_out: bool = False


Action = Acquired | Release | Ended


@dataclass(frozen=True)
class Note:
    """The sender stopped owning ``partition`` at ``epoch``; the receiver may acquire it, but only
    under stable view ``view``, the sender's when it sent the note (rule 9)."""
    partition: int
    epoch: int
    payload: Any = None
    view: int = 0


@dataclass(frozen=True)
class NoteAck:
    partition: int
    epoch: int


@dataclass(frozen=True)
class NoteRefused:
    """Answer to a ``Note`` from a member that is leaving: it did not take the note, so its
    sender still holds the right and hands it to the next member instead (rule 3)."""
    partition: int
    epoch: int


@dataclass(frozen=True)
class Redirect:
    """The sender does not hold ``partition``: it waits for ``holder`` (the receiver itself:
    nobody holds it)."""
    partition: int
    holder: str
    epoch: int


@dataclass(frozen=True)
class Query:
    """Do you hold ``partition``, or whom do you wait for?"""
    partition: int
    epoch: int


@dataclass(frozen=True)
class Census:
    """Rule 10: the sender leads ``partitions`` in stable view ``view`` and has waited for them
    in vain: does the receiver own or hold any of them?"""
    view: int
    partitions: tuple[int, ...]


@dataclass(frozen=True)
class Disown:
    """Answer to a ``Census`` in stable view ``view``: the sender neither owns nor holds these
    ``partitions`` (and gave up any right it kept to them); ``epochs``: for each, an epoch at
    least as high as any it used or saw for it."""
    view: int
    partitions: tuple[int, ...]
    epochs: tuple[int, ...]


@dataclass(frozen=True)
class ViewAsk:
    """Rule 11: the sender holds no stable view and may found a cluster (it was restarted
    without seeds of its own): does the receiver hold a stable view? Answered with a
    ``views.Decided`` of that view, or ``NoView``. ``round``: the asker's round, echoed."""
    round: int


#: ``NoView.role``: what a member without a stable view does about it.
WAITS, MAY_FOUND, FORMS = 0, 1, 2


@dataclass(frozen=True)
class NoView:
    """Answer to a ``ViewAsk``: the sender holds no stable view. ``role``: it ``WAITS`` to be
    told one, it ``MAY_FOUND`` one too (rule 11), or it ``FORMS`` one without a founder: the
    first view with the members of its genesis (``ExclusiveConfig.bootstrap``), or the view it
    restored from ``--state-dir`` and resumes once a member of that cluster speaks to it."""
    round: int
    role: int


Message = Note | NoteAck | NoteRefused | Redirect | Query | Census | Disown | ViewAsk | NoView | LeaseMessage

#: Partitions per ``Census`` message (about 4 bytes each: a few datagrams in fragments).
CENSUS_BATCH = 2048
