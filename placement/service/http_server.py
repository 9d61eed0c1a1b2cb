"""The HTTP server a node runs: uvicorn with no signal handling and no periodic tick, the
``Date`` header added per response (``DateHeader``), the listening socket bound up front so a
port in use is a one-line error naming the flag, and bounds on request heads (``_protocol_class``:
16 KiB, and a header-read timeout uvicorn does not have).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import socket
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from .. import argtypes
from ..errors import PlacementError
from .background import detach

if TYPE_CHECKING:
    import uvicorn


_Message = MutableMapping[str, Any]  # an ASGI scope or event
_Receive = Callable[[], Awaitable[_Message]]
_Send = Callable[[_Message], Awaitable[None]]
_ASGIApp = Callable[[_Message, _Receive, _Send], Awaitable[None]]


#: How long the server waits, once it stops listening, for the requests still in flight: the node
#: has left by then and answered its long-polls and event streams (``Node.leave``), so only
#: requests that take longer than this are cut off (issue 30: exit within 2 s of SIGTERM).
GRACEFUL_SHUTDOWN_S = 1  # (uvicorn types it as whole seconds)

#: A client must send a whole request head within this many seconds of connecting, or of the
#: end of its previous response (``_protocol_class``).
HEADER_TIMEOUT_S = 10.0
#: At shutdown, how long a connection accepted just before the server stopped listening may take to
#: send its first request head (``_protocol_class``).
SHUTDOWN_HEAD_GRACE_S = 0.25
#: The largest request head (request line and headers) h11 buffers: a larger one gets a 400.
MAX_HEAD_BYTES = 16 * 1024


def http_server(app: _ASGIApp, http: tuple[str, int], header_timeout_s: float = HEADER_TIMEOUT_S,
                tls: tuple[str, str] | None = None) -> uvicorn.Server:
    """The node's uvicorn server for ``app`` (start it with ``serve(sockets=[...])``): no
    signal handling, no periodic tick (``_server_class``), the Date header added by ``DateHeader``,
    request heads bounded in size and time (``_protocol_class``); HTTPS with ``tls`` (certificate
    chain and key files, PEM). Its config is loaded here (the protocol modules imported, the
    certificate read), not when it starts serving."""
    import uvicorn

    config = uvicorn.Config(DateHeader(app), host=http[0], port=http[1], log_level="warning", lifespan="off",
                            date_header=False, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
                            http=_protocol_class(header_timeout_s),
                            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
                            ssl_certfile=tls[0] if tls else None, ssl_keyfile=tls[1] if tls else None)
    config.load()
    return _server_class()(config)


class DateHeader:
    """ASGI middleware: a ``Date`` header on every HTTP response, as uvicorn's own would be.

    uvicorn adds the header from a value its ``main_loop`` refreshes on a timer (once a second,
    on a loop that wakes ten times a second); the node's server has no such tick (an idle
    node's application loop wakes for nothing: docs/benchmarks-log.md, "Idle CPU side by side
    with Serf, fifth pass"), so it runs with ``date_header=False`` and the header is made here, when a
    response starts: ``email.utils.formatdate(usegmt=True)`` of the whole second, as uvicorn
    formats it (RFC 9110's IMF-fixdate), computed once per second. A response that has a Date
    of its own keeps it. ``clock``: seconds since the epoch (tests give their own).

    Not dated any more: a 500 that uvicorn sends when the app fails before it starts a response
    (FastAPI's own 500s go through here; RFC 9110 section 6.6.1 makes Date optional on 5xx), and
    websocket handshakes, which the node does not serve. uvicorn's 400 to a request it cannot
    parse never had one with its h11 protocol (the one used here: httptools is not installed),
    which sends it without the default headers."""

    def __init__(self, app: _ASGIApp, clock: Callable[[], float] = time.time) -> None:
        self.app = app
        self._clock = clock
        self._date: tuple[int, bytes] = (-1, b"")  # (second, its header value): replaced whole

    def date(self) -> bytes:
        second = int(self._clock())
        cached = self._date
        if cached[0] != second:
            cached = (second, email.utils.formatdate(second, usegmt=True).encode("ascii"))
            self._date = cached
        return cached[1]

    async def __call__(self, scope: _Message, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_dated(message: _Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                if not any(name.lower() == b"date" for name, _ in headers):
                    message = {**message, "headers": [(b"date", self.date()), *headers]}
            await send(message)

        await self.app(scope, receive, send_dated)


def _protocol_class(header_timeout_s: float) -> type:
    """uvicorn's h11 protocol, closing a connection whose request head does not arrive in time.

    uvicorn 0.54 has no header-read timeout: ``timeout_keep_alive`` runs only between requests
    and the first byte of the next one cancels it, so a client that connects and sends nothing,
    or sends a header a minute, holds its connection (and a slot of ``limit_concurrency``, if it
    were set) as long as it likes. Here a timer starts when a connection is made and when a
    response ends; when it fires and the client has not sent a whole request head since
    (h11 still waits for one: ``their_state`` IDLE), the connection is closed. A request being
    answered (a long poll, an event stream) is not affected: its head has arrived.

    At shutdown uvicorn closes every connection without a request in progress. One accepted
    just before the server stopped listening may hold a request whose bytes the loop has not
    read yet: closed, its client saw the connection reset under a request, the outcome unknown
    (tests/test_restarts.py, once under load). Such a connection, which never sent anything,
    gets ``SHUTDOWN_HEAD_GRACE_S`` to send its head; its request is then answered (the node is
    leaving: 503 or 421) and the connection closed after it."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeout(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _fresh = True  # nothing received on this connection yet
        _closing_after = False  # shutdown came first: the next response closes the connection

        def data_received(self, data: bytes) -> None:
            self._fresh = False
            super().data_received(data)
            if self._closing_after and self.cycle is not None:
                self.cycle.keep_alive = False

        def shutdown(self) -> None:
            if self._fresh and not self.transport.is_closing():
                self._closing_after = True
                if self._head_timer is not None:
                    self._head_timer.cancel()
                self._head_timer = self.loop.call_later(SHUTDOWN_HEAD_GRACE_S, self._head_timeout)
                return
            super().shutdown()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = None if self.transport.is_closing() else self.loop.call_later(
                header_timeout_s, self._head_timeout)

        def _head_timeout(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeout


def _server_class() -> type[uvicorn.Server]:
    """Built when a node starts: uvicorn is imported then, not with this module."""
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server without its signal handling and without a periodic tick.

        Signals: we handle them (leave first, then stop). uvicorn >= 0.29 captures SIGINT/SIGTERM
        in serve(), stops serving at once and raises the signal again afterwards: the node then
        saw its HTTP server gone and stopped abruptly.

        Tick: uvicorn's ``main_loop`` wakes every 0.1 s and calls ``on_tick``, which (uvicorn
        0.54) refreshes the default headers (Date and Server) every tenth call, awaits
        ``config.callback_notify`` every ``timeout_notify`` seconds, and returns True to stop
        when ``should_exit`` is set or ``limit_max_requests`` is reached. Ten wake-ups a second
        of an idle node's loop, then one (issue 14: idle CPU); here none. ``on_tick`` runs once
        at the start (it sets the default headers: Server only, as the config has
        ``date_header=False``; the Date header is ``DateHeader``'s) and ``main_loop`` then waits
        for ``should_exit``, an event here, so setting it wakes the server at once. The node
        sets neither ``limit_max_requests`` nor ``callback_notify``, which would need the tick:
        a config that does is refused."""

        def __init__(self, config: uvicorn.Config) -> None:
            if config.limit_max_requests is not None or config.callback_notify is not None:
                raise ValueError("this server has no tick: limit_max_requests and callback_notify are not supported")
            self._exit = asyncio.Event()
            super().__init__(config)

        @property
        def should_exit(self) -> bool:
            return self._exit.is_set()

        @should_exit.setter
        def should_exit(self, value: bool) -> None:
            if value:
                self._exit.set()
            else:
                self._exit.clear()

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        async def main_loop(self) -> None:
            if not await self.on_tick(0):  # the default headers; True if should_exit is already set
                await self._exit.wait()

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            """uvicorn's, after taking in the connections the kernel completed and the loop had
            not accepted yet: closing the listening socket resets them, and a client that had
            sent its request on one saw it dropped, the outcome unknown (tests/test_restarts.py,
            a client sending without pause). Nothing is awaited between the last ``accept`` and
            uvicorn's close, so none can arrive in between; each is answered once (the node is
            leaving: 503 or 421) and closed after its response."""
            loop = asyncio.get_running_loop()
            config = self.config

            def protocol() -> asyncio.Protocol:
                make: Any = config.http_protocol_class  # (HeaderTimeout: uvicorn's h11 protocol)
                proto = make(config=config, server_state=self.server_state, app_state=self.lifespan.state)
                proto._closing_after = True  # its response closes the connection
                return proto

            for sock in sockets or []:
                while True:
                    try:
                        conn, _ = sock.accept()
                    except OSError:  # BlockingIOError: none left (the socket is non-blocking)
                        break
                    conn.setblocking(False)
                    detach(loop.connect_accepted_socket(protocol, conn, ssl=config.ssl))
            await super().shutdown(sockets)

    return Server


def bind_error(what: str, flag: str, addr: tuple[str, int], exc: OSError) -> PlacementError:
    return PlacementError(f"cannot bind {what} {addr[0]}:{addr[1]} ({flag} or {argtypes.env_variable(flag)}): "
                          f"{exc.strerror or exc}")


def advertise_bound_port(url: str, sock: socket.socket) -> str:
    """``url`` with the port the system chose for ``sock`` when the URL says port 0 (``--http
    HOST:0``, and the advertised URL made from it): others cannot reach port 0."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return url
    if port != 0:
        return url
    return urlunsplit(parts._replace(netloc=f"{parts.netloc.rsplit(':', 1)[0]}:{sock.getsockname()[1]}"))


def check_tls(cert: str, key: str) -> None:
    """Load the certificate chain and key as the server will: a one-line error naming the flags
    if they cannot be read or do not match (before anything starts)."""
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except FileNotFoundError as exc:
        raise PlacementError(f"--tls-cert {cert} / --tls-key {key}: {exc.filename}: no such file") from None
    except (OSError, ssl.SSLError) as exc:
        raise PlacementError(f"--tls-cert {cert} / --tls-key {key}: not a PEM certificate chain and its private "
                             f"key ({getattr(exc, 'reason', None) or exc})") from None


def listen_http(addr: tuple[str, int]) -> socket.socket:
    """The HTTP listening socket, bound here so a busy or foreign address names ``--http``."""
    try:
        family = socket.getaddrinfo(addr[0], addr[1], type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: rebind in TIME_WAIT
            # Accepted connections inherit it. Without it every response on a kept-alive connection
            # waited ~40 ms (Nagle's algorithm against the client's delayed ACK): measured p50 44 ms
            # for GET /healthz on loopback, 0.5 ms with it (issue 30's benchmark found it).
            if family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.bind(addr)
            sock.listen(2048)
        except OSError:
            sock.close()
            raise
        return sock
    except OSError as exc:
        raise bind_error("HTTP", "--http", addr, exc) from None
