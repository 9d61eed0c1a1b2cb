"""The membership thread's plumbing: mailboxes between loops, the application loop's lag gauge,
and what the membership thread does on its member's wake-ups instead of a timer of its own."""

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from membership import MemberEvent, MembershipConfig, Meta
from membership.aio import start_member
from placement.service.loop_lag import AppLoopLag, _BusyRuns, _LagTimer
from placement.service.node_thread import Mailbox, MembershipThread


def test_a_mailbox_runs_posts_from_another_thread_in_order_once_opened_and_isolates_errors(caplog):
    async def main():
        loop = asyncio.get_running_loop()
        box = Mailbox(loop, held=True)
        got: list[int] = []
        done = asyncio.Event()

        def boom() -> None:
            raise RuntimeError("a handler bug")

        def post_all() -> None:
            for i in range(1000):
                box.post(got.append, i)
                if i == 500:
                    box.post(boom)
            box.post(loop.call_soon_threadsafe, done.set)

        poster = threading.Thread(target=post_all)
        poster.start()
        poster.join()
        await asyncio.sleep(0.05)
        assert got == [], "held until opened"
        box.open()
        await asyncio.wait_for(done.wait(), 5)
        assert got == list(range(1000))
        assert "a handler bug" in caplog.text

    caplog.set_level(logging.ERROR)
    asyncio.run(main())


def test_a_mailbox_to_a_closed_loop_says_so():
    loop = asyncio.new_event_loop()
    loop.close()
    box = Mailbox(loop)
    assert box.post(print) is False
    assert box.post(print) is False


def until(predicate: Callable[[], object], timeout_s: float, what: str) -> None:
    """Poll ``predicate`` from this (non-loop) thread until it holds, with a deadline."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.005)  # polling a condition with a deadline, not waiting for an effect


class AppLoop:
    """An application loop on a thread of its own, which the test can block and release."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._release = threading.Event()

    def block(self) -> None:
        """Block the loop until ``release()`` (returns once it is blocked)."""
        self._release.clear()
        blocked = threading.Event()

        def hold() -> None:
            blocked.set()
            self._release.wait(30)
        self.loop.call_soon_threadsafe(hold)
        assert blocked.wait(10), "the loop blocks"

    def release(self) -> None:
        self._release.set()

    def sync(self) -> None:
        """Return once what was posted to the loop before has run."""
        done = threading.Event()
        self.loop.call_soon_threadsafe(done.set)
        assert done.wait(10), "the loop runs"

    def close(self) -> None:
        self._release.set()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


def messages(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def busy_since(lag: AppLoopLag) -> float | None:
    """When the loop's current busy run began (the fallback timer: when it is due), or None."""
    source = lag._source
    return source.busy_since if source is not None else None


def longest(lag: AppLoopLag) -> float:
    return max((run for _, run in lag._recent), default=0.0)


BOTH = pytest.mark.parametrize("timer", [False, True], ids=["busy-runs", "fallback-timer"])


@BOTH
def test_lag_shows_a_blocked_loop_at_once_from_another_thread_logs_it_when_it_ends_and_forgets_it(timer, caplog):
    caplog.set_level(logging.WARNING, logger="placement.node")
    app = AppLoop()
    lag = AppLoopLag(app.loop, interval_s=0.05, warn_s=0.3, window_s=1.0, timer=timer)
    try:
        app.loop.call_soon_threadsafe(lag.start)
        until(lambda: lag._source is not None, 5, "the gauge started")
        assert isinstance(app.loop._selector, _BusyRuns) != timer  # type: ignore[attr-defined]
        app.block()
        # Read from this thread while the loop is blocked: how long it has been busy, growing.
        until(lambda: lag.lag_s >= 0.4, 10, "the blocked loop's lag, read while the block lasts")
        assert longest(lag) < 0.4, "seen under way, not as a finished run"
        assert messages(caplog, "was blocked for") == []
        app.release()
        until(lambda: longest(lag) >= 0.4, 5, "the run ended when the loop waited again")
        assert lag.lag_s >= 0.4, "the longest run of the window"
        assert messages(caplog, "the application's event loop was blocked for"), "a block >= warn_s is logged"
        # Once out of the window (1 s here) it is forgotten.
        until(lambda: lag.lag_s < 0.3, 10, "the block aged out of the window")
        if not timer:
            assert lag.lag_s < 0.05, "an idle loop waits in select(): no lag at all"
    finally:
        lag.stop()
        app.close()


def test_busy_runs_see_every_short_block_at_its_length():
    """A timer every 0.5 s saw a 0.08 s block with probability 0.16, as a lag of 0-0.08 s."""
    app = AppLoop()
    lag = AppLoopLag(app.loop, warn_s=10.0)
    try:
        app.loop.call_soon_threadsafe(lag.start)
        until(lambda: lag._source is not None, 5, "the gauge started")
        for _ in range(5):
            seen = len(lag._recent)
            app.loop.call_soon_threadsafe(time.sleep, 0.08)  # blocks that loop, not this test
            until(lambda: len(lag._recent) > seen, 5, "the short block recorded")
            assert 0.08 <= lag._recent[-1][1] < 0.6
    finally:
        lag.stop()
        app.close()


@BOTH
def test_a_block_is_warned_about_once_from_another_thread_while_it_lasts(timer, caplog):
    """What the membership thread calls on its own wake-ups (its ``now`` given here)."""
    caplog.set_level(logging.WARNING, logger="placement.node")
    app = AppLoop()
    lag = AppLoopLag(app.loop, interval_s=0.05, warn_s=0.3, timer=timer)
    try:
        app.loop.call_soon_threadsafe(lag.start)
        until(lambda: lag._source is not None, 5, "the gauge started")
        for episode in (1, 2):
            app.block()
            since = busy_since(lag)  # stands still while the loop is blocked
            assert since is not None
            lag.check(since + 0.29)
            assert len(messages(caplog, "has not run for")) == episode - 1, "not yet warn_s"
            for late in (0.3, 0.31, 0.5, 2.0, 10.0):
                lag.check(since + late)
            assert len(messages(caplog, "has not run for")) == episode, "one line per block"
            app.release()
            until(lambda: busy_since(lag) != since, 5, "the block ended")
    finally:
        lag.stop()
        app.close()


def test_the_gauges_of_one_loop_share_one_wrapper_and_the_last_to_stop_puts_the_selector_back(caplog):
    caplog.set_level(logging.WARNING, logger="placement.node")

    async def on_its_loop() -> None:
        loop = asyncio.get_running_loop()
        original = loop._selector  # type: ignore[attr-defined]
        a, b = AppLoopLag(loop, warn_s=0.11), AppLoopLag(loop, warn_s=0.11)
        a.start()
        b.start()
        a.start()  # started once only
        busy = loop._selector  # type: ignore[attr-defined]
        assert isinstance(busy, _BusyRuns) and busy.inner is original and busy.users == (a, b)
        assert [h for h in loop._scheduled if not h.cancelled()] == [], "no timer"  # type: ignore[attr-defined]
        time.sleep(0.12)  # this loop, blocked
        await asyncio.sleep(0)  # back in select(): the run ends
        assert longest(a) >= 0.12 and longest(b) >= 0.12
        assert len(messages(caplog, "was blocked for")) >= 2, "each node's gauge logs it"
        # I/O goes through the wrapper as before.
        left, right = socket.socketpair()
        with left, right:
            left.setblocking(False)
            right.setblocking(False)
            await loop.sock_sendall(left, b"ping")
            assert await asyncio.wait_for(loop.sock_recv(right, 4), 5) == b"ping"
        a.stop()
        assert loop._selector is busy and busy.users == (b,), "b still uses it"  # type: ignore[attr-defined]
        b.stop()
        assert loop._selector is original  # type: ignore[attr-defined]
        b.start()  # a stopped gauge stays stopped
        assert loop._selector is original  # type: ignore[attr-defined]
        c = AppLoopLag(loop)
        c.start()
        assert isinstance(loop._selector, _BusyRuns) and loop._selector is not busy  # type: ignore[attr-defined]
        c.stop()
        assert loop._selector is original and c.lag_s == 0.0  # type: ignore[attr-defined]
    asyncio.run(on_its_loop())


@BOTH
def test_lag_stops_cleanly_from_another_thread_and_on_a_closed_loop(timer):
    app = AppLoop()
    original = app.loop._selector  # type: ignore[attr-defined]
    lags = [AppLoopLag(app.loop, interval_s=0.05, timer=timer) for _ in range(2)]
    for lag in lags:
        app.loop.call_soon_threadsafe(lag.start)
    until(lambda: all(lag._source is not None for lag in lags), 5, "the gauges started")
    sources = [lag._source for lag in lags]
    lags[0].stop()  # from this thread
    assert lags[0]._source is None and busy_since(lags[0]) is None
    app.sync()  # what stop() left to that loop has run
    if timer:
        timer0 = sources[0]
        assert isinstance(timer0, _LagTimer) and timer0._handle is None, "its timer cancelled on its loop"
    else:
        assert app.loop._selector is sources[0] is sources[1], "the other gauge still uses it"  # type: ignore[attr-defined]
    lags[1].stop()
    app.sync()
    assert app.loop._selector is original  # type: ignore[attr-defined]
    app.close()
    lags[1].stop()  # the loop is closed now: nothing to do, nothing raised

    closed = asyncio.new_event_loop()
    lag = AppLoopLag(closed, timer=timer)
    lag.start()  # before the loop runs
    assert lag.lag_s == 0.0, "a loop that has not run yet is not blocked"
    closed.close()  # (through the wrapper: the original selector is closed)
    assert closed._selector is None  # type: ignore[attr-defined]
    lag.stop()


def test_loops_without_a_selector_to_wrap_get_the_timer():
    lag = AppLoopLag(asyncio.new_event_loop())
    for loop in (SimpleNamespace(), SimpleNamespace(_selector=None)):  # uvloop; a closed loop
        assert _BusyRuns.attach(loop, lag) is None  # type: ignore[arg-type]


# ----- the membership thread: no timer of its own ----------------------------------------------

async def lone_member_thread(events: list[object]) -> MembershipThread:
    """A MembershipThread around one member with no seeds (no runner)."""
    async def open_():
        return await start_member(MembershipConfig(cluster_name="thread"), "a"), None

    thread = MembershipThread("a", lambda event, members: events.append(event))
    await thread.start(open_)
    return thread


def test_the_membership_thread_arms_no_timer_nor_the_node_on_the_app_loop_and_an_incarnation_change_is_republished():
    async def main():
        events: list[object] = []
        thread = await lone_member_thread(events)
        try:
            member = thread.member
            assert member is not None

            def scheduled() -> list[asyncio.TimerHandle]:
                return [h for h in thread.loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
            handles = await thread.call(scheduled)
            assert handles, "the member's own timer"
            owners = {getattr(h._callback, "__self__", None) for h in handles}  # type: ignore[attr-defined]
            assert owners == {member}, f"only the member's own timers on an idle membership loop: {handles}"
            # Nor does the node on the application loop: its lag gauge wraps the loop's selector.
            app_loop = asyncio.get_running_loop()
            timers = app_loop._scheduled  # type: ignore[attr-defined]
            assert [h for h in timers if not h.cancelled()] == [], "no timer on the application loop"
            busy = app_loop._selector  # type: ignore[attr-defined]
            assert isinstance(busy, _BusyRuns) and busy.users == (thread.app_lag,)

            before = thread.members
            (me,) = before

            async def bump() -> tuple:
                await member.update_meta(Meta(weight=2.0))  # our incarnation goes up; no MemberEvent
                return thread.members  # read before anything else runs on this loop
            after = await thread.run(bump())
            (me_after,) = after
            assert me_after.incarnation == me.incarnation + 1 and me_after.meta.weight == 2.0
            assert not [e for e in events if isinstance(e, MemberEvent)]
        finally:
            thread.stop()

    asyncio.run(main())


def test_the_member_list_is_republished_every_second_without_a_change():
    """``heard_at`` changes without an event or a checksum change: the list is a second old at most."""
    async def main():
        thread = await lone_member_thread([])
        member = thread.member
        assert member is not None
        try:
            checksum = member.core.view_checksum
            seen = [thread.members]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while len(seen) < 3:
                assert loop.time() < deadline, "republished twice"
                if thread.members is not seen[-1]:
                    seen.append(thread.members)
                await asyncio.sleep(0.01)  # polling with a deadline
            assert member.core.view_checksum == checksum and seen[1] == seen[0]
        finally:
            thread.stop()

    asyncio.run(main())


def test_a_blocked_application_loop_is_warned_about_once_per_episode_from_the_membership_thread(caplog):
    """The check rides on the member's wake-ups (here: junk datagrams, which it reads and drops)."""
    caplog.set_level(logging.WARNING, logger="placement.node")

    async def main():
        thread = await lone_member_thread([])
        thread.app_lag.warn_s = 0.3
        flushes: list[float] = []
        member = thread.member
        assert member is not None
        hook = member.on_flush
        assert hook is not None

        def counting(now: float) -> None:
            flushes.append(now)
            hook(now)
        await thread.call(setattr, member, "on_flush", counting)
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
                for episode in (1, 2):
                    # Block this (the application's) loop, polling with a deadline, until the
                    # membership thread warned and handled five more datagrams.
                    deadline = time.monotonic() + 10
                    while len(messages(caplog, "has not run for")) < episode:
                        assert time.monotonic() < deadline, "the membership thread warns"
                        out.sendto(b"not gossip", member.bound)
                        time.sleep(0.01)
                    seen = len(flushes)
                    while len(flushes) < seen + 5:
                        assert time.monotonic() < deadline, "more wake-ups of the member"
                        out.sendto(b"not gossip", member.bound)
                        time.sleep(0.01)
                    assert len(messages(caplog, "has not run for")) == episode, "one line per episode"
                    await asyncio.sleep(0)  # back in select(): the episode ends, logged at once
                    assert len(messages(caplog, "was blocked for")) == episode
        finally:
            thread.stop()

    asyncio.run(main())


def test_the_membership_thread_stops_when_the_application_loop_closes_without_leave(caplog):
    caplog.set_level(logging.WARNING, logger="placement.node")
    threads: list[MembershipThread] = []

    async def main():
        threads.append(await lone_member_thread([]))
    asyncio.run(main())  # ends without leave() or close()
    (thread,) = threads
    until(lambda: thread.loop.is_closed(), 10, "the membership thread stops")
    assert thread.member is not None and thread.member.closed
    assert messages(caplog, "closed without leave() or close()")
