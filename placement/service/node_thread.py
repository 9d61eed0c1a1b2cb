"""The membership thread: gossip and quorum leases on a thread and event loop of their own.

Why (issue 15): a node embedded in an application used to share the application's event loop.
Ten seconds of CPU-bound work, a synchronous client call or a big ``json.dumps`` on that loop
froze probes, acks and refutations; the others declared the busy node dead and took its
partitions, and it took them back when it woke - partitions jumped twice, the failure that sank
the lease designs ("nodes under heavy load tend to be too slow to answer to hold on to their
leases"). Lifeguard cannot help once the loop is blocked for longer than the suspicion timeout.

So the node runs ``membership.aio.Member`` and, in exclusive mode, the ownership runner
(``placement.service.node_ownership``: lease renewals, witness answers, handoff notes) on a daemon thread
with its own asyncio loop, as ``kinship`` runs its protocol "so a blocked event loop or a long
GIL hold never makes a healthy node look dead". Both must move: with membership alone on the
thread, a blocked application loop would still stop lease renewals, and the node would fence
itself and count its partitions lost. The cores are unchanged; only where their driver runs moved.

What crosses between the threads, and how:

* membership events and ownership actions (and the member list, as an immutable tuple) go to
  the application loop through a ``Mailbox``, in order - the runner's actions by the named
  methods of ``placement.service.node_bridge.AppBridge``; replies (a drained partition's payload)
  come back through another. A mailbox wakes its loop once per batch, not once per call: a
  handoff of 1,000 partitions is 2,000 calls, and one ``call_soon_threadsafe`` each (a socket
  write that releases the GIL, then waits to get it back) starved this thread into losing
  its lease;
* the application calls into this thread with ``run`` (a coroutine) or ``call`` (a function):
  ``asyncio.run_coroutine_threadsafe`` wrapped for ``await``;
* nothing mutable is shared: the application reads published immutable snapshots (the member
  list here, ``Holding`` in ``placement.service.node_ownership``), each replaced by one reference store.

A Python thread still needs the GIL: C code that holds it for seconds (a huge ``re`` match, a
C extension that does not release it) starves this thread too. BENCHMARKS.md ("Busy
application") measures how long a hold a member survives; docs/ownership.md says what to do.

The application loop's lag gauge (``AppLoopLag``) is ``placement.service.loop_lag``'s.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from membership import DeclaredDead, MemberEvent, MemberInfo
from membership.aio import Member

from .loop_lag import AppLoopLag
from .node_ownership import ExclusiveRunner

__all__ = ["Mailbox", "MembershipThread"]

T = TypeVar("T")
_log = logging.getLogger("placement.node")


class Mailbox:
    """Calls posted from any thread, run in order on ``loop``, with one wake-up per batch.

    Held (``held=True``) until ``open()``: then what was posted runs first, in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, held: bool = False) -> None:
        self.loop = loop
        self._items: collections.deque[tuple[Callable[..., object], tuple[Any, ...]]] = collections.deque()
        self._lock = threading.Lock()
        self._scheduled = held  # a held box schedules nothing until it is opened
        self._closed = False  # the loop was found closed: posts are dropped

    def post(self, fn: Callable[..., object], *args: Any) -> bool:
        """False if the loop is closed (the call is dropped)."""
        with self._lock:
            if self._closed:
                return False
            self._items.append((fn, args))
            if self._scheduled:
                return True
            self._scheduled = True
        return self._wake()

    def open(self) -> None:
        with self._lock:
            self._scheduled = bool(self._items)
        if self._scheduled:
            self._wake()

    def _wake(self) -> bool:
        try:
            self.loop.call_soon_threadsafe(self._run)
            return True
        except RuntimeError:
            with self._lock:
                self._closed = True
                self._items.clear()
            return False

    def _run(self) -> None:
        with self._lock:
            items, self._items = self._items, collections.deque()
            self._scheduled = False
        for fn, args in items:
            try:
                fn(*args)
            except Exception:
                _log.exception("%s raised (the node carries on)", getattr(fn, "__qualname__", fn))


class MembershipThread:
    """A daemon thread with its own event loop that runs one node's member and ownership runner.

    ``on_event(event, members)`` is called on the application loop for every membership event,
    with the member list as it was right after it. ``members`` is that list as last published:
    after every event, and - for what changes without an event: incarnations, ``heard_at`` -
    whenever the view's checksum changed or the list is a second old.

    The thread arms no timer of its own (each wake-up of an idle thread is dear, see
    ``AppLoopLag``): what it does now and then (that republishing, the warning about a blocked
    application loop, noticing that loop closed) rides on the member's wake-ups, through
    ``Member.on_flush``: after every datagram and timer it handled, at least once a probe
    period (~1 s) while it is in a cluster.
    """

    def __init__(self, node_id: str, on_event: Callable[[object, tuple[MemberInfo, ...]], None]) -> None:
        self.app_loop = asyncio.get_running_loop()
        self.loop = asyncio.new_event_loop()
        self._on_event = on_event
        self.member: Member | None = None
        self.runner: ExclusiveRunner | None = None
        self.members: tuple[MemberInfo, ...] = ()
        # Nothing reaches the application before ``await node.start()`` has returned to it.
        self._to_app = Mailbox(self.app_loop, held=True)
        self._to_member = Mailbox(self.loop)
        self.app_lag = AppLoopLag(self.app_loop)
        self._pump: asyncio.Task | None = None
        self._refreshed = 0.0  # when ``members`` was published (this loop's time)
        self._checksum: int | None = None  # the view checksum it was published at
        self._thread = threading.Thread(target=self._run, name=f"placement-membership-{node_id}", daemon=True)
        self._thread.start()

    # ----- from the application -------------------------------------------------------------
    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the membership loop and await its result from the application loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Call ``fn(*args)`` on the membership loop (where the member's state may be touched)."""
        async def once() -> T:
            return fn(*args)
        return await self.run(once())

    async def start(self, open_: Callable[[], Awaitable[tuple[Member, ExclusiveRunner | None]]]
                    ) -> tuple[MemberInfo, ...]:
        """Start the member and runner (built on this thread's loop by ``open_``) and return the
        first member list; on failure (a busy gossip port) the thread is stopped and the error
        raised here."""
        try:
            members = await self.run(self._start(open_))
        except BaseException:
            self.stop()
            raise
        self._to_app.open()
        self.app_lag.start()
        return members

    def close(self) -> None:
        """Abrupt stop, as if the process died: no leave, nothing handed on."""
        if self.loop.is_closed():
            return
        try:
            self.loop.call_soon_threadsafe(self._close)
        except RuntimeError:
            return  # the loop has just closed
        self.stop()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the loop (its remaining tasks are cancelled) and wait for the thread."""
        self.app_lag.stop()
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:
            pass  # already closed
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    # ----- to the application ---------------------------------------------------------------
    def to_app(self, fn: Callable[..., object], *args: Any) -> bool:
        """Post ``fn(*args)`` to the application loop; False (and the node stops, as if its
        process had died) when that loop is closed: the application ended without leave()."""
        if self._to_app.post(fn, *args):
            return True
        if threading.current_thread() is self._thread:
            self._app_closed()
        return False

    def to_member(self, fn: Callable[..., object], *args: Any) -> None:
        """Post ``fn(*args)`` to the membership loop (dropped once it is closed)."""
        self._to_member.post(fn, *args)

    # ----- on the membership thread ------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            tasks = asyncio.all_tasks(self.loop)
            for task in tasks:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    async def _start(self, open_: Callable[[], Awaitable[tuple[Member, ExclusiveRunner | None]]]
                     ) -> tuple[MemberInfo, ...]:
        self.member, self.runner = await open_()
        members = self._refresh(self.loop.time())
        if self.runner is not None:
            self.runner.set_view([m for m in members if m.is_live])
        self._pump = asyncio.ensure_future(self._pump_events(self.member.subscribe(max_backlog=None)))
        self.member.on_flush = self._flushed
        return members

    async def _pump_events(self, events: Any) -> None:
        """Feed the runner first (it must not wait for the application), then tell the application."""
        async for event in events:
            members = self._refresh(self.loop.time())
            runner = self.runner
            if runner is not None and not runner.closed:
                if isinstance(event, DeclaredDead):
                    runner.declared_dead()
                elif isinstance(event, MemberEvent):
                    runner.set_view([m for m in members if m.is_live])
            if not self.to_app(self._on_event, event, members):
                return

    def _refresh(self, now: float) -> tuple[MemberInfo, ...]:
        assert self.member is not None
        self.members = tuple(self.member.members())
        self._refreshed = now
        self._checksum = self.member.core.view_checksum
        return self.members

    def _flushed(self, now: float) -> None:
        """``Member.on_flush``: after each datagram or timer the member handled. Republish the
        member list if an incarnation changed (or a member came or went) without an event, or
        to keep ``heard_at`` fresh once a second; warn once while the application loop is
        blocked; stop if that loop was closed. Cheap: it runs for every datagram."""
        member = self.member
        if member is None or member.closed:
            return
        if self.app_loop.is_closed():
            self._app_closed()
            return
        if member.core.view_checksum != self._checksum or now - self._refreshed >= 1.0:
            self._refresh(now)
        self.app_lag.check(time.monotonic())

    def _app_closed(self) -> None:
        """The application's loop closed without leave() or close(): stop as if the process died."""
        if self.member is not None and not self.member.closed:
            _log.warning("node %s: the application's event loop closed without leave() or close(); "
                         "stopping as if the process had died", self.member.node_id)
            self._close()
            self.loop.stop()

    def _close(self) -> None:
        if self.member is not None:
            self.member.close()
        if self.runner is not None:
            self.runner.close()
        if self._pump is not None:
            self._pump.cancel()
        self.app_lag.stop()
