"""The crossing from the exclusive-ownership runner to the application: one class, one method
per thing the runner may tell the application.

The runner (``node_ownership.ExclusiveRunner``) runs on the membership thread
(``node_thread``); the application's handlers run on the application's loop. ``AppBridge``'s
methods are what the runner calls (its ``_Hooks``), on the membership thread; each posts its
namesake on the application side (``AppSide``, the node's exclusive mode) to the application's
loop through the thread's mailbox, so they arrive in the order the runner made them.

Only ``release`` waits for an answer: the payload the ``released`` handlers return travels back
to the runner, which hands it to the next owner. The runner awaits a future on its own loop;
the application side resolves it through the other mailbox, and the runner cancelling it (the
release deadline passed) cancels the drain on the application's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ownership.views import View

from .node_ownership import Grant, _Hooks
from .node_thread import MembershipThread


@dataclass
class PendingRelease:
    """One partition being handed on, as the application loop sees it."""

    partition: int
    reason: str
    resolve: Callable[[Any], None]  # sends the payload to the runner (its thread)
    cancelled: bool = False
    drain: asyncio.Future | None = None

    def cancel(self) -> None:
        """The runner gave up (release deadline): stop the drain; ownership is over."""
        self.cancelled = True
        if self.drain is not None:
            self.drain.cancel()


class AppSide(Protocol):
    """What the runner's news reaches, on the application loop (``node_exclusive``)."""

    def acquired(self, grant: Grant) -> None: ...
    def release(self, release: PendingRelease) -> None: ...
    def ended(self, partition: int) -> None: ...
    def view(self, view: View) -> None: ...


class AppBridge:
    """Called on the membership thread; each method runs ``app``'s namesake on the application loop."""

    def __init__(self, thread: MembershipThread, app: AppSide) -> None:
        self._thread = thread
        self._app = app

    def hooks(self) -> _Hooks:
        """These methods, in the shape the runner takes them."""
        return _Hooks(self.acquired, self.release, self.ended, self.view)

    def acquired(self, grant: Grant) -> None:
        self._thread.to_app(self._app.acquired, grant)

    def release(self, partition: int, reason: str) -> Awaitable[Any]:
        """The runner awaits the payload on its loop; cancelling that wait (the release deadline
        passed) cancels the drain on the application loop."""
        thread = self._thread
        payload: asyncio.Future = thread.loop.create_future()
        release = PendingRelease(partition, reason, lambda value: thread.to_member(_resolve, payload, value))
        payload.add_done_callback(lambda f: f.cancelled() and thread.to_app(release.cancel))
        thread.to_app(self._app.release, release)
        return payload

    def ended(self, partition: int) -> None:
        """Ownership ended without a drain (lease lost, declared dead)."""
        self._thread.to_app(self._app.ended, partition)

    def view(self, view: View) -> None:
        """A new stable view was installed."""
        self._thread.to_app(self._app.view, view)


def _resolve(payload: asyncio.Future, value: Any) -> None:
    """On the membership thread: hand the payload to the runner unless it gave up waiting."""
    if not payload.done():
        payload.set_result(value)
