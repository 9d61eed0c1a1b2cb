"""Ownership changes of one member between two placement tables (pure).

A worker starts processing a partition when it *acquires* it and stops when it *releases*
it. ``diff`` says which partitions one member gains and loses when the table changes; the
node emits releases before acquisitions, so a worker never holds more than it should.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .table import PlacementTable


@dataclass(frozen=True)
class OwnershipChange:
    """Partitions this member started (``acquired``) and stopped (``released``) leading."""

    acquired: frozenset[int]
    released: frozenset[int]
    checksum: str  # the placement this change leads to

    def __bool__(self) -> bool:
        return bool(self.acquired or self.released)

    def then(self, later: OwnershipChange) -> OwnershipChange:
        """The net change of ``self`` followed by ``later``: from S0 via S1 to S2, where
        S1 = S0 - R1 + A1 and S2 = S1 - R2 + A2, S2 - S0 = (A1 - R2) | (A2 - R1) and
        S0 - S2 = (R1 - A2) | (R2 - A1). A reader that falls behind gets one merged change,
        so what is queued for it never exceeds the partition count."""
        return OwnershipChange((self.acquired - later.released) | (later.acquired - self.released),
                               (self.released - later.acquired) | (later.released - self.acquired),
                               later.checksum)


def led_by(table: PlacementTable | None, member: str) -> frozenset[int]:
    """Partitions whose leader is ``member`` (empty for no table)."""
    if table is None:
        return frozenset()
    ids, idx = table.owner_indices()
    if member not in ids or idx.shape[1] == 0:
        return frozenset()
    return frozenset(np.flatnonzero(idx[:, 0] == ids.index(member)).tolist())


def diff(old: PlacementTable | None, new: PlacementTable | None, member: str) -> OwnershipChange:
    before, after = led_by(old, member), led_by(new, member)
    return OwnershipChange(after - before, before - after, new.checksum if new is not None else "")
