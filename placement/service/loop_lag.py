"""How long the application's event loop runs between two waits for I/O: how late it would
run a timer due now, measured with no timer of its own (issue 14, issue 15).

The membership thread (``placement.service.node_thread``) only reads it, to warn while that loop
is blocked. It is exposed (``placement_app_loop_lag_seconds``, a log line above one
second) but it does not feed Lifeguard's local health: a slow application is not a slow
member. Only this thread's own lag (measured by ``Member``) does, so only a stalled *process*
(SIGSTOP, swap, a stop-the-world GC, a long GIL hold) costs membership - and that is what
Lifeguard and the self-fencing lease handle.
"""

from __future__ import annotations

import asyncio
import logging
import selectors
import threading
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["AppLoopLag"]

_log = logging.getLogger("placement.node")


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
