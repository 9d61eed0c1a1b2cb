"""The two ways a ``Node`` owns partitions, behind one interface.

``NodeConfig.ownership`` picks one: ``"available"`` (``node_available``: the partitions the local
view's table gives this node, at once) or ``"exclusive"`` (``node_exclusive``: the partitions a
quorum lease grants it, moved by handoff). The node is the same around either: it runs the
gossip member, keeps the placement table, and tells the application what changed; the mode
answers what this node owns and decides when that changes. So the node asks its mode instead of
branching on it, and each mode's rules read in one place.

Everything here runs on the application's loop, except ``open``, which runs on the membership
thread (``node_thread``) while the node starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from membership.aio import Member
from ownership.survival import Survival
from ownership.views import View

from ..changes import OwnershipChange
from ..table import PlacementTable
from .node_ownership import ExclusiveRunner, Grant

if TYPE_CHECKING:
    from membership.seeds import DnsSeed

    from .node_thread import MembershipThread

Addr = tuple[str, int]


@dataclass(frozen=True)
class NodeSide:
    """What a mode may ask of its node: the node keeps the table and the application's
    callbacks, streams and ``leadership()`` waiters; the mode decides what to tell them."""

    table: Callable[[], PlacementTable]  # the current table (raises before the first view)
    #: Tell the application (callbacks, streams, the event log); returns what the ``released``
    #: handlers returned (exclusive mode awaits the awaitable ones before it hands a partition on).
    publish: Callable[[OwnershipChange], list[object]]
    leaderships_changed: Callable[[], None]  # wherever leadership may have changed
    may_own: Callable[[], bool]  # joined and not leaving (a node alone by design has joined)
    closed: Callable[[], bool]  # stopped as if its process died (``Node.close``)
    #: A new stable view (exclusive mode): placement follows its members and weights from now
    #: on, and load-aware weights plan from its figures. The available mode never calls it, and
    #: placement follows the live members.
    placement_view: Callable[[View], None]


class OwnershipMode(Protocol):
    """What a node owns and how that changes (module docstring); ``Node`` documents each read."""

    name: str  # "available" or "exclusive": ``ownership_status()["mode"]``

    # ----- reads (the node's public API delegates these) -------------------------------
    def owns(self, key: str | bytes) -> bool: ...
    def leads(self, name: str) -> bool: ...
    def owned_partitions(self) -> frozenset[int]: ...
    def may_work(self, partition: int, epoch: int) -> bool: ...
    def grant(self, partition: int) -> Grant | None: ...
    def release_deadline(self, partition: int) -> float | None: ...
    def releasing_partitions(self) -> frozenset[int]: ...
    def lease_valid_until(self) -> float | None: ...
    def paused(self) -> str | None: ...
    def survival(self) -> Survival | None: ...
    def status(self) -> dict[str, Any]: ...

    # ----- lifecycle -------------------------------------------------------------------
    def prepare(self, join: tuple[Addr | DnsSeed, ...]) -> tuple[Addr | DnsSeed, ...]:
        """Before anything starts: read what the mode keeps on disk; return the seeds to join."""
        ...

    def open(self, member: Member, thread: MembershipThread) -> ExclusiveRunner | None:
        """On the membership thread, once the member is bound: what runs beside it there."""
        ...

    def started(self) -> None:
        """The node runs (its gossip socket is bound)."""
        ...

    def view_changed(self) -> None:
        """A new table (the node has it already)."""
        ...

    def declared_dead(self) -> None:
        """The cluster declared this node dead (it has refuted)."""
        ...

    async def leave(self, timeout_s: float) -> None:
        """A graceful leave: give up every partition (before the member announces the leave)."""
        ...

    def close(self) -> None:
        """The node stopped (left or closed): cancel what the mode has pending on this loop."""
        ...
