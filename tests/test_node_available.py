"""Availability-first ownership as a unit (``placement.service.node_available``): its rules driven
through the node's side of the seam (``NodeSide``) with a table built by hand, no sockets and no
membership thread. ``test_node`` checks the same rules on running nodes."""

from __future__ import annotations

import asyncio

from placement import PlacementTable
from placement.changes import OwnershipChange, led_by
from placement.service.node_available import AvailableOwnership
from placement.service.node_mode import NodeSide


class FakeNode:
    """The node around the mode: a table, whether it may own, and what the mode published."""

    def __init__(self, table: PlacementTable) -> None:
        self.table = table
        self.may_own = False
        self.published: list[OwnershipChange] = []
        self.leaderships = asyncio.Event()  # set whenever the mode says leadership may have changed

    def side(self) -> NodeSide:
        def publish(change: OwnershipChange) -> list[object]:
            if change:
                self.published.append(change)
            return []

        return NodeSide(table=lambda: self.table, publish=publish, leaderships_changed=self.leaderships.set,
                        may_own=lambda: self.may_own, closed=lambda: False,
                        placement_view=lambda view: None)  # (the available mode never calls it)


def two_member_table() -> PlacementTable:
    return PlacementTable.build({"n1": 1.0, "n2": 1.0}, partitions=64)


def test_it_owns_what_the_table_gives_it_once_it_may_own_and_releases_all_on_leave():
    async def main() -> None:
        node = FakeNode(two_member_table())
        mode = AvailableOwnership("n1", 3.0, node.side())
        mine = led_by(node.table, "n1")
        key = next(k for k in (f"k{i}" for i in range(1000)) if node.table.partition_of(k) in mine)
        mode.view_changed()  # not joined yet: alone, its view would give it everything
        assert not node.published and mode.owned_partitions() == frozenset() and not mode.owns(key)

        node.may_own = True
        mode.view_changed()
        assert node.published == [OwnershipChange(mine, frozenset(), node.table.checksum)]
        assert mode.owned_partitions() == mine and mode.owns(key) and mode.leads(key) and mode.may_work(min(mine), 0)
        assert mode.status() == {"mode": "available", "owned": len(mine)}

        node.table = PlacementTable.build({"n1": 1.0}, partitions=64)  # n2 is gone: n1 leads everything
        mode.view_changed()
        assert node.published[-1].acquired == frozenset(range(64)) - mine and not node.published[-1].released

        await mode.leave(1.0)
        assert node.published[-1].released == frozenset(range(64)) and mode.owned_partitions() == frozenset()

    asyncio.run(main())


def test_declared_dead_releases_everything_and_takes_nothing_back_until_the_hold_down_ends():
    async def main() -> None:
        node = FakeNode(two_member_table())
        node.may_own = True
        mode = AvailableOwnership("n1", 0.05, node.side())
        mine = led_by(node.table, "n1")
        mode.view_changed()

        node.leaderships.clear()
        mode.declared_dead()
        assert node.published[-1] == OwnershipChange(frozenset(), mine, "")
        assert node.leaderships.is_set()
        node.leaderships.clear()
        mode.view_changed()  # a new view during the hold-down: still nothing
        assert len(node.published) == 2 and not mode.owns("anything") and mode.owned_partitions() == frozenset()

        await asyncio.wait_for(node.leaderships.wait(), 5.0)  # the hold-down ended
        assert node.published[-1] == OwnershipChange(mine, frozenset(), node.table.checksum)
        assert mode.owned_partitions() == mine

    asyncio.run(main())
