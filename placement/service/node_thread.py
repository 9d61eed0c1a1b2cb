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
  the application loop through a ``Mailbox``, in order; replies (a drained partition's payload)
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

``AppLoopLag`` measures how long the application's loop runs between two waits for I/O (how late
it would run a timer), with no timer of its own; this thread only reads it, to warn while that
loop is blocked. It is exposed (``placement_app_loop_lag_seconds``, a log line above one
second) but it does not feed Lifeguard's local health: a slow application is not a slow
member. Only this thread's own lag (measured by ``Member``) does, so only a stalled *process*
(SIGSTOP, swap, a stop-the-world GC, a long GIL hold) costs membership - and that is what
Lifeguard and the self-fencing lease handle.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import selectors
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from membership import DeclaredDead, MemberEvent, MemberInfo
from membership.aio import Member

from .node_ownership import ExclusiveRunner

__all__ = ["AppLoopLag", "Mailbox", "MembershipThread"]

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


# A finished busy run shorter than this is not kept (the loop's ordinary iterations are far
# shorter); ``warn_s`` is meant to be well above it.
_NOTE_S = 0.05


class _BusyRuns(selectors.BaseSelector):
    """A selector event loop's own selector, wrapped to note when the loop is out of ``select()``.

    An asyncio selector loop waits in ``select()`` for I/O or its next timer and runs callbacks
    outside it; while it is out, how long it has been out is how late a timer due now would run.
    ``busy_since``: when the loop last left ``select()``, None while it is in it (written on the
    loop's thread, one reference store; read from any thread). At each entry, a finished run of
    ``_NOTE_S`` or more goes to every ``AppLoopLag`` of the loop. One per loop, shared by its
    ``AppLoopLag``s (several nodes may share one application loop); the loop's original selector
    is put back when the last one stops. Cost: two ``time.monotonic()`` calls and one Python
    call per loop iteration, no wake-up. Everything but ``select`` goes straight to the original.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, inner: selectors.BaseSelector) -> None:
        self.loop = loop
        self.inner = inner
        # Installed from a callback of the running loop: out of select() now.
        self.busy_since: float | None = time.monotonic() if loop.is_running() else None
        self.users: tuple[AppLoopLag, ...] = ()  # replaced, never mutated: iterated on the loop's thread
        self._lock = threading.Lock()  # for changes to ``users`` (from any thread)

    @classmethod
    def attach(cls, loop: asyncio.AbstractEventLoop, lag: AppLoopLag) -> _BusyRuns | None:
        """On the loop's thread (or before it runs): the loop's wrapper, installed if need be,
        with ``lag`` among its users; None if the loop has no selector of its own to wrap."""
        selector = getattr(loop, "_selector", None)  # BaseSelectorEventLoop's (private) attribute
        if isinstance(selector, cls):
            busy = selector
        elif isinstance(selector, selectors.BaseSelector):
            busy = cls(loop, selector)
            loop._selector = busy  # type: ignore[attr-defined]
        else:
            return None  # uvloop, a proactor loop, a closed loop
        with busy._lock:
            busy.users = (*busy.users, lag)
        return busy

    def drop(self, lag: AppLoopLag) -> None:
        """From any thread: ``lag`` hears of no more runs."""
        with self._lock:
            self.users = tuple(u for u in self.users if u is not lag)

    def release(self) -> None:
        """On the loop's thread: put the original selector back if nobody uses this one now."""
        with self._lock:
            if not self.users and getattr(self.loop, "_selector", None) is self:
                self.loop._selector = self.inner

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        now = time.monotonic()
        since = self.busy_since
        if since is not None and now - since >= _NOTE_S:
            for lag in self.users:
                try:
                    lag._ended(since, now)
                except Exception:  # never out of the loop's select()
                    _log.exception("recording a busy run of the application's event loop")
        self.busy_since = None  # after the run is recorded: a reader never sees it in neither place
        try:
            return self.inner.select(timeout)
        finally:
            self.busy_since = time.monotonic()

    # The rest: the original selector's.
    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self.inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.inner.modify(fileobj, events, data)

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self.inner.get_key(fileobj)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self.inner.get_map()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # fileno() of epoll, anything else
        if name == "inner":  # not set yet (no recursion)
            raise AttributeError(name)
        return getattr(self.inner, name)


class _LagTimer:
    """The fallback for loops without a selector to wrap (uvloop, other loops): a timer every
    ``interval_s`` whose lateness is a busy run. ``busy_since`` is when it is due: from then on,
    a loop that has not run it is busy. It feeds the same ``AppLoopLag._ended`` as ``_BusyRuns``.
    A block of B >= ``interval_s`` is seen as a run between B - ``interval_s`` and B; a shorter
    one with probability B / ``interval_s``; and the loop wakes 1 / ``interval_s`` times a second."""

    def __init__(self, loop: asyncio.AbstractEventLoop, lag: AppLoopLag, interval_s: float) -> None:
        self.loop = loop
        self.lag: AppLoopLag | None = lag
        self.interval_s = interval_s
        self.busy_since: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._arm()

    def _arm(self) -> None:
        # One clock: time.monotonic(); a loop's own time() may be cached per iteration (uvloop's
        # is) and stand still while the loop is blocked.
        self.busy_since = time.monotonic() + self.interval_s
        self._handle = self.loop.call_later(self.interval_s, self._ran)

    def _ran(self) -> None:
        now, due, lag, self._handle = time.monotonic(), self.busy_since, self.lag, None
        if lag is None:
            return
        if due is not None and now - due >= _NOTE_S:
            lag._ended(due, now)
        self._arm()

    def drop(self, lag: AppLoopLag) -> None:
        self.lag = None
        self.busy_since = None

    def release(self) -> None:
        self.busy_since = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class AppLoopLag:
    """How late the application's loop would run a timer: the gauge of a blocked application.

    On a selector event loop (asyncio's default on Linux) it arms no timer: it measures the
    loop's *busy runs*, the stretches between two waits in ``select()`` (``_BusyRuns`` wraps the
    loop's selector). While the loop is out of ``select()``, how long it has been out is exactly
    how late a timer due now would run. So every block is seen, however short, at the cost of
    two clock reads per loop iteration and no wake-up. On other loops (uvloop has no selector to
    wrap) a timer every ``interval_s`` measures how late it runs (``_LagTimer``); both feed the
    same bookkeeping here.

    ``lag_s`` (read from any thread: the HTTP API, ``node_sync.NodeThread``) is how long the
    current run has lasted if the loop is busy now - a loop blocked right now shows up without
    waiting for it to recover - or the longest finished run (of ``_NOTE_S`` or more) of the last
    ``window_s`` if that is more: what a scrape every 15-60 s should see, a block that ended
    between two scrapes is not lost. A run of ``warn_s`` or more is logged when it ends (on the
    application loop); while it lasts, the membership thread logs it once (``check``, on
    wake-ups that thread has anyway).

    Why no timer: the application loop of an idle ``placement node`` woke twice a second for
    this gauge's 0.5 s timer and uvicorn's tick; on this project's test machine (a Firecracker
    VM) every wake-up of an idle thread costs ~240 us of CPU, about as much as an idle gossip
    member's other work (docs/benchmarks-log.md, "Idle CPU side by side with Serf", third to fifth
    passes). Before that the gauge was a probe posted from the membership thread, which woke
    both threads. The timer also saw a block shorter than its interval only by chance.

    One clock: ``time.monotonic()`` (the default loop's ``time()``), for the loop and for
    readers on other threads. What crosses threads is single reference stores: a source's
    ``busy_since`` and the tuple ``_recent``, replaced whole.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, *, interval_s: float = 0.5, warn_s: float = 1.0,
                 window_s: float = 60.0, timer: bool = False) -> None:
        """``interval_s``: the fallback timer's (only where there is no selector to wrap, or
        with ``timer=True``)."""
        self._loop = loop
        self.interval_s = interval_s
        self.warn_s = warn_s
        self.window_s = window_s
        self._timer = timer
        self._source: _BusyRuns | _LagTimer | None = None  # None: not started, or stopped
        self._stopped = False
        self._warned: float | None = None  # the run already reported as under way: one line per block
        self._recent: tuple[tuple[float, float], ...] = ()  # (ended at, seconds) of runs >= _NOTE_S

    def start(self) -> None:
        """On the application loop (or before it runs). A stopped gauge stays stopped."""
        if self._stopped or self._source is not None:
            return
        source = None if self._timer else _BusyRuns.attach(self._loop, self)
        self._source = source if source is not None else _LagTimer(self._loop, self, self.interval_s)

    def stop(self) -> None:
        """From any thread; a closed loop is fine (there is nothing left to undo on it)."""
        self._stopped = True
        source, self._source = self._source, None
        if source is None:
            return
        source.drop(self)  # at once: no more runs reach this gauge
        try:
            here = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            here = False
        if here:
            source.release()
            return
        try:
            self._loop.call_soon_threadsafe(source.release)
        except RuntimeError:
            pass  # the loop is closed: its selector is closed too, its timers will never run

    def _ended(self, since: float, now: float) -> None:
        """On the application loop: a busy run from ``since`` to ``now`` (``_NOTE_S`` or more)."""
        run = now - since
        self._recent = (*(r for r in self._recent if now - r[0] <= self.window_s), (now, run))
        if run >= self.warn_s:
            _log.warning("the application's event loop was blocked for %.1f s (membership and leases were not: "
                         "they run on their own thread)", run)

    def check(self, now: float) -> None:
        """From any thread (the membership thread, on its own wake-ups), ``now`` from
        ``time.monotonic()``: log once per block when the loop has been busy for ``warn_s``."""
        source = self._source
        since = source.busy_since if source is not None else None
        if since is not None and now - since >= self.warn_s and self._warned != since:
            self._warned = since
            _log.warning("the application's event loop has not run for %.1f s; membership and leases carry on "
                         "on their own thread", now - since)

    @property
    def lag_s(self) -> float:
        now = time.monotonic()
        source = self._source
        since = source.busy_since if source is not None else None
        current = now - since if since is not None and now > since else 0.0
        return max([current, *(run for at, run in self._recent if now - at <= self.window_s)])


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
