"""The membership thread's plumbing: mailboxes between loops, and the application-loop lag probe."""

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from placement.service.node_thread import AppLoopLag, Mailbox


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


def test_lag_probe_reports_a_pending_probe_at_once_and_the_worst_recent_lag_after():
    posted: list[tuple[Callable[..., object], tuple[float, ...]]] = []

    def post(fn: Callable[..., object], *args: float) -> bool:  # AppLoopLag posts (answer, seq, sent)
        posted.append((fn, args))
        return True
    lag = AppLoopLag(post, warn_s=1.0)
    t0 = time.monotonic()
    assert lag.tick(t0) and len(posted) == 1
    assert lag.tick(t0 + 0.25) and len(posted) == 1, "one probe in flight at most"
    fn, args = posted[0]
    assert lag.lag_s >= time.monotonic() - t0 - 0.01  # pending: at least its age
    # The application loop answers 2 s late (the send time is moved back instead of waiting).
    fn(args[0], args[1] - 2.0)
    assert 2.0 <= lag.lag_s < 3.0
    assert lag.tick(time.monotonic()) and len(posted) == 2
    posted[1][0](*posted[1][1])  # answered at once: the 2 s stays the worst of the window
    assert 2.0 <= lag.lag_s < 3.0
