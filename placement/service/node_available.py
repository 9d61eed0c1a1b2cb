"""Availability-first ownership (``NodeConfig.ownership = "available"``): a node owns the
partitions the table of its own view gives it, at once.

Nothing is agreed with anyone, so during a split or a freeze two nodes can own a partition (the
node module's docstring has the rules). What this mode adds to the table are the three moments
a node must own nothing although its view says otherwise: before it has heard from the cluster
(alone, its view gives it every partition), while it leaves, and for ``rejoin_holddown_s`` after
the cluster declared it dead (the others gave its partitions away; they should see it alive
again before it takes any back).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..changes import diff, led_by
from ..table import PlacementTable
from .node_mode import Addr, NodeSide

if TYPE_CHECKING:
    from membership.aio import Member
    from membership.seeds import DnsSeed
    from ownership.survival import Survival

    from .node_ownership import ExclusiveRunner, Grant
    from .node_thread import MembershipThread


class AvailableOwnership:
    """``OwnershipMode`` for ``"available"``: what was last published for the table it was
    published at (``_owned_table``), updated on every new table while the node may own."""

    name = "available"

    def __init__(self, node_id: str, rejoin_holddown_s: float, node: NodeSide) -> None:
        self._node_id = node_id
        self._holddown_s = rejoin_holddown_s
        self._node = node
        self._owned_table: PlacementTable | None = None  # what ownership was last published for; None: owns nothing
        self._holddown: asyncio.TimerHandle | None = None  # set while declared dead and waiting

    # ----- reads ------------------------------------------------------------------------
    def owns(self, key: str | bytes) -> bool:
        owners = self._node.table().lookup(key)
        return self._owning() and bool(owners) and owners[0] == self._node_id

    def leads(self, name: str) -> bool:
        if not self._owning():
            return False
        table = self._node.table()
        return table.owner(table.partition_of(name)) == self._node_id

    def owned_partitions(self) -> frozenset[int]:
        return led_by(self._owned_table, self._node_id)

    def may_work(self, partition: int, epoch: int) -> bool:
        return partition in self.owned_partitions()

    def grant(self, partition: int) -> Grant | None:
        return None  # no fencing epochs, no handoff payloads

    def release_deadline(self, partition: int) -> float | None:
        return None

    def releasing_partitions(self) -> frozenset[int]:
        return frozenset()

    def lease_valid_until(self) -> float | None:
        return None

    def paused(self) -> str | None:
        return None

    def survival(self) -> Survival | None:
        return None

    def status(self) -> dict[str, Any]:
        return {"mode": self.name, "owned": len(self.owned_partitions())}

    def _owning(self) -> bool:
        return self._node.may_own() and self._holddown is None

    # ----- lifecycle --------------------------------------------------------------------
    def prepare(self, join: tuple[Addr | DnsSeed, ...]) -> tuple[Addr | DnsSeed, ...]:
        return join

    def open(self, member: Member, thread: MembershipThread) -> ExclusiveRunner | None:
        return None  # nothing runs beside the member

    def started(self) -> None:
        pass

    def view_changed(self) -> None:
        """Publish what changed since ownership was last published (if this node may own)."""
        if self._owning():
            table = self._node.table()
            self._node.publish(diff(self._owned_table, table, self._node_id))
            self._owned_table = table

    def declared_dead(self) -> None:
        if self._holddown is not None:
            self._holddown.cancel()
        self._node.publish(diff(self._owned_table, None, self._node_id))  # a no-op if nothing is owned
        self._owned_table = None
        self._holddown = asyncio.get_running_loop().call_later(self._holddown_s, self._end_holddown)
        self._node.leaderships_changed()

    def _end_holddown(self) -> None:
        self._holddown = None
        self.view_changed()
        self._node.leaderships_changed()

    async def leave(self, timeout_s: float) -> None:
        self._node.publish(diff(self._owned_table, None, self._node_id))
        self._owned_table = None

    def close(self) -> None:
        if self._holddown is not None:
            self._holddown.cancel()
