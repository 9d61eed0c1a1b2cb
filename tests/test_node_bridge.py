"""The runner's way to the application (``placement.service.node_bridge.AppBridge``) as a unit:
both "threads" are one loop here (each post is a ``call_soon``), so what is checked is what the
bridge adds - the order of the news, the payload's way back, and the release deadline's
cancellation reaching the drain. ``test_node_exclusive`` checks handoffs between running nodes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from ownership.views import View
from placement.service.node_bridge import AppBridge, PendingRelease
from placement.service.node_ownership import Grant
from placement.service.node_thread import MembershipThread


class OneLoop:
    """The two sides of ``MembershipThread`` the bridge uses, on the running loop."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()

    def to_app(self, fn: Callable[..., object], *args: Any) -> bool:
        self.loop.call_soon(fn, *args)
        return True

    def to_member(self, fn: Callable[..., object], *args: Any) -> None:
        self.loop.call_soon(fn, *args)


class App:
    """The application side: records what arrived; a release drains until told to stop."""

    def __init__(self) -> None:
        self.news: list[tuple[str, object]] = []
        self.releases: list[PendingRelease] = []

    def acquired(self, grant: Grant) -> None:
        self.news.append(("acquired", grant.partition))

    def release(self, release: PendingRelease) -> None:
        self.news.append(("release", release.partition))
        self.releases.append(release)
        release.drain = asyncio.ensure_future(asyncio.Event().wait())  # a drain that does not end by itself

    def ended(self, partition: int) -> None:
        self.news.append(("ended", partition))

    def view(self, view: View) -> None:
        self.news.append(("view", view.num))


def bridge(app: App) -> AppBridge:
    return AppBridge(cast(MembershipThread, OneLoop()), app)


def test_news_arrives_in_the_order_the_runner_made_it_and_the_payload_goes_back():
    async def main() -> None:
        app = App()
        hooks = bridge(app).hooks()
        hooks.acquired(Grant(3, 7, None, 0.0))
        payload = hooks.release(3, "handoff")
        hooks.ended(4)
        assert hooks.view is not None
        hooks.view(View.of(9, {"n1": 1.0}))
        await asyncio.sleep(0)  # one loop pass runs what was posted
        assert app.news == [("acquired", 3), ("release", 3), ("ended", 4), ("view", 9)]

        app.releases[0].resolve({"offset": 42})
        assert await asyncio.wait_for(payload, 5) == {"offset": 42}

    asyncio.run(main())


def test_the_runner_giving_up_on_a_release_cancels_the_drain():
    async def main() -> None:
        app = App()
        payload = bridge(app).release(5, "handoff")
        await asyncio.sleep(0)
        release = app.releases[0]
        drain = release.drain
        assert drain is not None and not drain.done()

        assert isinstance(payload, asyncio.Future)
        payload.cancel()  # the release deadline passed, on the runner's loop
        await asyncio.wait_for(asyncio.wait({drain}), 5)
        assert release.cancelled and drain.cancelled()
        release.resolve("late")  # what a handler would return now goes nowhere: the runner gave up
        await asyncio.sleep(0)

    asyncio.run(main())
