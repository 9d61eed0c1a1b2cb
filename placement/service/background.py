"""Work started and not waited for, kept referenced until it ends.

The event loop holds only weak references to tasks, so a task nobody references can be
garbage-collected before it finishes (the ``asyncio.create_task`` documentation: "Save a
reference to the result of this function, to avoid a task disappearing mid-execution"). The
service starts such work where nothing may wait for it - the cleanup of a partition whose
ownership ended, a drain in available mode, closing the console's HTTP client - so ``detach``
holds each one here until it is done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

_running: set[asyncio.Future[Any]] = set()


def detach(work: Awaitable[Any]) -> asyncio.Future[Any]:
    """Run ``work`` on the running loop without waiting for it (``asyncio.ensure_future``)."""
    future = asyncio.ensure_future(work)
    _running.add(future)
    future.add_done_callback(_running.discard)
    return future
