"""What one reader of ``Node.ownership_changes()`` has not read yet, kept as one net change."""

from __future__ import annotations

import asyncio

from ..changes import OwnershipChange

__all__ = ["ChangeStream"]


class ChangeStream:
    """One ``ownership_changes`` reader's unread changes, merged into one (``OwnershipChange.then``):
    a reader that is slow, or never reads, holds at most one partition set, not a queue."""

    def __init__(self, first: OwnershipChange) -> None:
        self._pending: OwnershipChange | None = first  # the first is yielded even when empty
        self._first = True
        self._closed = False
        self._error: BaseException | None = None  # raised to the reader once it has read the rest
        self._ready = asyncio.Event()

    def put(self, change: OwnershipChange) -> None:
        merged = change if self._pending is None else self._pending.then(change)
        self._pending = merged if (merged or self._first) else None  # back where the reader is
        self._ready.set()

    def close(self, error: BaseException | None = None) -> None:
        self._closed = True
        self._error = self._error or error
        self._ready.set()

    async def get(self) -> OwnershipChange | None:
        while self._pending is None:
            if self._closed:
                if self._error is not None:
                    raise self._error
                return None
            self._ready.clear()
            await self._ready.wait()
        change, self._pending, self._first = self._pending, None, False
        return change
