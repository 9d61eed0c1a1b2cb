"""``placement node``'s HTTP server (``http_server.http_server``): uvicorn with no periodic tick,
the Date header made per response by ``DateHeader``, and an idle node's application loop with
no timer at all (issue 14: each wake-up of an idle thread costs ~240 us of CPU on the test box)."""

import asyncio
import email.utils
import time
from datetime import UTC, datetime

import httpx
import pytest

from placement.service.http_api import create_app
from placement.service.http_server import DateHeader, _server_class, http_server, listen_http
from placement.service.loop_lag import _BusyRuns
from placement.service.node import Node

from test_node_exclusive import config, eventually


async def plain(scope, receive, send):
    """A minimal ASGI app: 200, one header of its own."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"x-app", b"1")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def dated(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"Date", b"Thu, 01 Jan 1970 00:00:00 GMT")]})
    await send({"type": "http.response.body", "body": b"ok"})


def pending(loop: asyncio.AbstractEventLoop) -> list[asyncio.Handle]:
    """What will run on the loop without I/O: its live timers, and the callbacks already due
    (a timer that fell due together with the caller's own sleep is one of these by now). Read
    on the loop itself, from a coroutine: the caller's own sleep has fired and is in neither."""
    timers = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
    return [*timers, *(h for h in loop._ready if not h.cancelled())]  # type: ignore[attr-defined]


def test_the_date_header_is_well_formed_and_follows_the_clock_second_by_second():
    now = [1_795_000_000.25]  # 2026-11-18
    app = DateHeader(plain, clock=lambda: now[0])

    async def main():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://n") as client:
            async def date() -> str:
                r = await client.get("/")
                assert r.status_code == 200 and r.text == "ok" and r.headers["x-app"] == "1"
                assert len(r.headers.get_list("date")) == 1
                return r.headers["date"]

            first = await date()
            assert first == email.utils.formatdate(now[0], usegmt=True) == "Wed, 18 Nov 2026 11:06:40 GMT"
            assert email.utils.parsedate_to_datetime(first) == datetime.fromtimestamp(int(now[0]), UTC)
            cached = app.date()
            now[0] += 0.7  # the same second
            assert await date() == first and app.date() is cached, "formatted once per second"
            now[0] += 0.1  # the next one
            second = await date()
            assert second == "Wed, 18 Nov 2026 11:06:41 GMT"
            now[0] += 3600 * 24
            assert await date() == "Thu, 19 Nov 2026 11:06:41 GMT"

        # A response with a Date of its own keeps it, and only it.
        own = DateHeader(dated, clock=lambda: now[0])
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=own), base_url="http://n") as client:
            r = await client.get("/")
            assert r.headers.get_list("date") == ["Thu, 01 Jan 1970 00:00:00 GMT"]

    asyncio.run(main())


def test_the_server_refuses_what_would_need_a_tick():
    import uvicorn

    for kw in ({"limit_max_requests": 10}, {"callback_notify": plain}):
        with pytest.raises(ValueError, match="no tick"):
            _server_class()(uvicorn.Config(plain, **kw))


def test_an_idle_node_and_its_http_server_leave_no_timer_on_the_application_loop():
    """One exclusive node (as ``make run`` starts them) and its HTTP server on this loop, idle
    after a request: nothing is scheduled on the loop, so nothing wakes it; the server's
    responses carry a current Date (and uvicorn's Server header: its one ``on_tick`` ran), and
    setting ``should_exit`` stops it at once."""

    async def main():
        loop = asyncio.get_running_loop()
        async with Node(config("h1")) as node:
            await eventually(lambda: len(node.owned_partitions()) > 0, what="the node owns its partitions")
            sock = listen_http(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            server = http_server(create_app(node), ("127.0.0.1", port))
            serving = asyncio.create_task(server.serve(sockets=[sock]))
            await eventually(lambda: server.started, what="the server started")
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                r = await client.get("/healthz")
            assert r.status_code == 200 and r.headers["server"] == "uvicorn"
            assert len(r.headers.get_list("date")) == 1
            sent = email.utils.parsedate_to_datetime(r.headers["date"]).timestamp()
            assert abs(sent - time.time()) < 5

            assert isinstance(loop._selector, _BusyRuns), "the lag gauge wraps the selector"  # type: ignore[attr-defined]
            # The client closed its connection (uvicorn's keep-alive timer goes with it); the
            # node settles (a lease grant, a handoff note): poll with a deadline for an idle loop.
            deadline = time.monotonic() + 20
            while left := pending(loop):
                assert time.monotonic() < deadline, f"timers left on an idle application loop: {left}"
                await asyncio.sleep(0.05)  # polling with a deadline
            for _ in range(5):  # and it stays so (at moments not in step with any 0.1 s grid)
                await asyncio.sleep(0.137)
                assert pending(loop) == []

            started = time.monotonic()
            server.should_exit = True
            await asyncio.wait_for(serving, 10)
            assert time.monotonic() - started < 5

    asyncio.run(main())


def test_responses_on_a_kept_alive_connection_are_not_held_by_nagle():
    """``listen_http`` sets TCP_NODELAY, which accepted connections inherit: without it each
    response on a kept-alive connection waited ~40 ms for the client's delayed ACK (measured p50
    44 ms for ``GET /healthz`` on loopback; 0.5 ms with it)."""
    import socket
    import statistics

    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/x")
    async def x() -> dict[str, int]:
        return {"a": 1}

    async def main() -> float:
        sock = listen_http(("127.0.0.1", 0))
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        port = sock.getsockname()[1]
        server = http_server(app, ("127.0.0.1", port))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        await eventually(lambda: server.started, what="the server started")

        def requests() -> float:
            times = []
            with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:  # one connection, kept alive
                for _ in range(21):
                    t0 = time.perf_counter()
                    assert client.get("/x").status_code == 200
                    times.append(time.perf_counter() - t0)
            return statistics.median(times[1:])

        median = await asyncio.to_thread(requests)
        server.should_exit = True
        await asyncio.wait_for(serving, 10)
        return median

    median = asyncio.run(main())
    assert median < 0.02, f"median {median * 1000:.1f} ms per request"
