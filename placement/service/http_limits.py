"""What the node's HTTP API refuses before a handler runs (issue 31): cross-site requests that
would change state, and request bodies too large, too many or too slow.

``CrossSite`` (ASGI middleware): a request with a method other than GET, HEAD and OPTIONS is
refused with ``403`` and a problem body saying why when

* it carries an ``Origin`` that is not one of this node's own (its ``--http-advertise`` URL, the
  address the connection reached, and for that port the loopback names ``127.0.0.1``,
  ``localhost`` and ``[::1]``; ``Origin: null`` included), or ``Sec-Fetch-Site: cross-site`` /
  ``same-site``: a page of another origin sent it (browsers add both to every cross-origin
  POST, and a DNS-rebound name is not one of the node's origins either);
* its ``Content-Type`` is one a page of any origin may send without a CORS preflight, as a
  plain HTML form does: ``application/x-www-form-urlencoded``, ``multipart/form-data``,
  ``text/plain`` (and any other ``text/*``). The API takes JSON or msgpack.

A client that is not a browser sends no ``Origin`` and works as before, with or without a body
(``POST /v1/leave`` has none). The console's page only reads (GET), so it is unaffected.

``BodyLimit`` (ASGI middleware): a body is counted as it streams in. A ``Content-Length`` above
``max_body`` is refused with ``413`` before any of the body is read; a chunked body is cut with
``413`` the moment it passes ``max_body`` (the handler never sees the rest, and the connection
is closed so the client stops sending). At most ``max_large`` requests whose body exceeds
``large`` bytes (by ``Content-Length``, or once that many chunked bytes arrived) run at once; one
more is answered ``503`` with ``Retry-After``. A body that stalls for ``body_idle_s`` between two
chunks is answered ``408``. What each costs in memory: at most ``max_body`` per request buffered
by a handler, times ``max_large``, plus the small ones.

Headers are bounded by the server: ``http_server`` sets h11's limit on an incomplete request
head (16 KiB) and closes a connection that has not sent a whole request head within its
header timeout (uvicorn 0.54 has no such timeout of its own: only ``timeout_keep_alive``, which
runs between requests and is cancelled by the first byte of the next one).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

_Message = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[_Message]]
_Send = Callable[[_Message], Awaitable[None]]
_ASGIApp = Callable[[_Message, _Receive, _Send], Awaitable[None]]

PROBLEM = "application/problem+json"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Content types a page may send to any origin without a preflight (the Fetch standard's
#: CORS-safelisted request header values): what a plain cross-site HTML form posts.
FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"})
MAX_BODY_BYTES = 32 * 1024 * 1024
LARGE_BODY_BYTES = 1024 * 1024
MAX_LARGE_REQUESTS = 2
BODY_IDLE_S = 30.0


async def send_problem(send: _Send, status: int, title: str, detail: str,
                       headers: Iterable[tuple[bytes, bytes]] = (), close: bool = False) -> None:
    body = json.dumps({"type": "about:blank", "title": title, "status": status, "detail": detail}).encode()
    head = [(b"content-type", PROBLEM.encode()), (b"content-length", str(len(body)).encode()), *headers]
    if close:  # the rest of the body is not wanted: the server closes the connection after this
        head.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _header(scope: _Message, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _origin(url: str) -> str | None:
    """``scheme://host[:port]`` of a URL, lower case, default ports dropped; None if it has none."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    return f"{parts.scheme.lower()}://{host.lower()}" + ("" if port is None or port == default else f":{port}")


class CrossSite:
    """Refuse state-changing requests a web page of another origin could send (module docstring).
    ``advertised``: the node's own base URLs (``--http-advertise``)."""

    def __init__(self, app: _ASGIApp, advertised: Iterable[str] = ()) -> None:
        self.app = app
        self.advertised = {o for o in map(_origin, advertised) if o is not None}

    def own_origins(self, scope: _Message) -> set[str]:
        origins = set(self.advertised)
        scheme = scope.get("scheme", "http")
        server = scope.get("server")
        if server and server[1] is not None:
            hosts = {str(server[0]), "127.0.0.1", "localhost", "::1"}
            for host in hosts:
                found = _origin(f"{scheme}://{f'[{host}]' if ':' in host else host}:{server[1]}")
                if found is not None:
                    origins.add(found)
        return origins

    def refusal(self, scope: _Message) -> str | None:
        """Why this request is refused, or None."""
        origin = _header(scope, b"origin")
        if origin is not None:
            own = self.own_origins(scope)
            if _origin(origin) not in own:
                return (f"cross-site request refused: Origin {origin!r} is not this node "
                        f"({', '.join(sorted(own)) or 'no origin known'}); state-changing requests are "
                        "accepted from clients that send no Origin (not a browser) or this node's own pages")
        fetch_site = _header(scope, b"sec-fetch-site")
        if fetch_site is not None and fetch_site.strip().lower() in ("cross-site", "same-site"):
            return ("cross-site request refused: the browser says it came from another site "
                    f"(Sec-Fetch-Site: {fetch_site})")
        ctype = _header(scope, b"content-type")
        if ctype is not None:
            media = ctype.split(";")[0].strip().lower()
            if media in FORM_TYPES or media.startswith("text/"):
                return (f"Content-Type {media} refused: any web page can send it to this node cross-site (as a "
                        "form does); send application/json (or application/msgpack where the route takes it)")
        return None

    async def __call__(self, scope: _Message, receive: _Receive, send: _Send) -> None:
        if scope["type"] == "http" and scope.get("method", "GET").upper() not in SAFE_METHODS:
            why = self.refusal(scope)
            if why is not None:
                await send_problem(send, 403, "Forbidden", why, close=True)
                return
        await self.app(scope, receive, send)


class _Refused(Exception):
    """Raised out of ``receive`` into the app when its body is refused (the app's own answer to
    that is dropped: ``BodyLimit`` answers)."""


@dataclass
class BodyStats:
    """What ``BodyLimit`` is doing, for ``/metrics``: the large requests running now, and the
    bodies refused so far by status (413 too large, 503 too many large at once, 408 stalled)."""

    running_large: int = 0
    refused: dict[int, int] = field(default_factory=lambda: {413: 0, 503: 0, 408: 0})


class BodyLimit:
    """Count request bodies as they stream in (module docstring). ``stats``: where it says what
    it does (``BodyStats``; the app's metrics read it)."""

    def __init__(self, app: _ASGIApp, max_body: int = MAX_BODY_BYTES, large: int = LARGE_BODY_BYTES,
                 max_large: int = MAX_LARGE_REQUESTS, body_idle_s: float = BODY_IDLE_S,
                 stats: BodyStats | None = None) -> None:
        self.app = app
        self.max_body = max_body
        self.large = large
        self.max_large = max_large
        self.body_idle_s = body_idle_s
        self.stats = stats if stats is not None else BodyStats()

    def _too_large(self) -> str:
        return f"the request body is larger than {self.max_body:,} bytes, this node's limit"

    def _busy(self) -> str:
        return (f"{self.max_large} requests with bodies over {self.large:,} bytes are already running on this "
                "node; retry shortly")

    async def __call__(self, scope: _Message, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length_text = _header(scope, b"content-length")
        length = None
        if length_text is not None:
            try:
                length = int(length_text)
            except ValueError:
                length = None
        if length is not None and length > self.max_body:
            self.stats.refused[413] += 1
            await send_problem(send, 413, "Content Too Large", self._too_large(), close=True)
            return
        refused: list[tuple[int, str, str]] = []  # (status, title, detail) once the body is refused
        started = False
        holds_slot = False
        received = 0
        body_done = False

        def take_slot() -> bool:
            nonlocal holds_slot
            if holds_slot:
                return True
            if self.stats.running_large >= self.max_large:
                return False
            self.stats.running_large += 1
            holds_slot = True
            return True

        if length is not None and length > self.large and not take_slot():
            self.stats.refused[503] += 1
            await send_problem(send, 503, "Service Unavailable", self._busy(), [(b"retry-after", b"1")], close=True)
            return

        async def counted() -> _Message:
            nonlocal received, body_done
            if refused:
                return {"type": "http.disconnect"}
            if body_done:  # after the body: a wait for the disconnect (streaming responses), unbounded
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.body_idle_s)
            except TimeoutError:
                refused.append((408, "Request Timeout", f"no part of the request body arrived for "
                                f"{self.body_idle_s:g} s"))
                raise _Refused from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > self.max_body:
                    refused.append((413, "Content Too Large", self._too_large()))
                    raise _Refused
                if received > self.large and not take_slot():
                    refused.append((503, "Service Unavailable", self._busy()))
                    raise _Refused
            else:
                body_done = True
            return message

        async def guarded_send(message: _Message) -> None:
            nonlocal started
            if refused:  # the app's answer to the refused body (a 400 or 500): ours goes instead
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, guarded_send)
        except _Refused:
            pass
        finally:
            if holds_slot:
                self.stats.running_large -= 1
        if refused:
            self.stats.refused[refused[0][0]] += 1
        if refused and not started:
            status, title, detail = refused[0]
            extra = [(b"retry-after", b"1")] if status == 503 else []
            await send_problem(send, status, title, detail, extra, close=True)
