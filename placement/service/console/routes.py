"""The console's HTTP routes, added to a node's app by ``placement.service.http_api.create_app``.

``GET /ui`` (and ``/ui/{asset}``)  the page, static files from ``placement/service/console/ui``
``GET /v1/events``     the node's event log (``console.events``): JSON, long-polled with
                       ``after``/``wait``, or a server-sent event stream when the request
                       accepts ``text/event-stream`` (what a browser's EventSource sends)
``GET /v1/map``        the partition map as one binary body (``console.summary.map_payload``)
``GET /v1/checksum``   this node's placement checksum, cheap enough to ask every member
``GET /v1/agreement``  every live member's checksum, asked over HTTP by this node and grouped
``GET /v1/balancing``  load-aware weights: each member's load and weights, the last plans
                       (``console.balancing``; says so when the node runs without them)

Why the node asks its peers for ``/v1/agreement`` instead of the page: the page's origin is
one node, and a browser may not read other origins without CORS; one fan-out per node also
serves every open console (answers are kept ``AGREEMENT_TTL_S``), over kept-alive connections
(one client per node, closed when the node stops): at 256 members a fan-out over new
connections cost the node about twice the CPU (BENCHMARKS.md, console).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

from fastapi import FastAPI, Header, Path, Query, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from ..background import detach
from .balancing import BalancingOut, balancing
from .summary import MAP_MEDIA_TYPE, agreement, map_payload

if TYPE_CHECKING:
    import httpx

EVENT_STREAM = "text/event-stream"
MAX_WAIT_S = 60.0
MAX_EVENTS = 1000
KEEPALIVE_S = 15.0  # an SSE comment this often keeps proxies from closing an idle stream
AGREEMENT_TTL_S = 1.0
AGREEMENT_TIMEOUT_S = 1.0
AGREEMENT_CONCURRENCY = 64
ASSETS = {"console.js": "text/javascript", "console.css": "text/css"}


class EventOut(BaseModel):
    seq: int = Field(description="position in this node's log; send it back as after / Last-Event-ID")
    at: float = Field(description="wall-clock seconds since the epoch")
    kind: str = Field(description="joined | updated | suspect | alive | dead | left | placement | ownership | "
                                  "declared-dead | refused | id-conflict | survival")
    member: str = Field(description="the member it is about, or empty")
    detail: str


class EventsOut(BaseModel):
    node: str
    first_seq: int = Field(description="oldest event held: a reader whose after < first_seq - 1 missed some")
    last_seq: int
    events: list[EventOut]


class ChecksumOut(BaseModel):
    node: str
    checksum: str
    etag: str
    members: int = Field(description="live members in this node's placement")


class MemberChecksum(BaseModel):
    id: str
    http: str
    checksum: str | None = Field(description="what the member reported, or null")
    error: str | None = Field(description="why it did not answer, or null")


class AgreementOut(BaseModel):
    node: str
    checked_at: float = Field(description="wall-clock seconds since the epoch of the fan-out")
    agree: bool = Field(description="every member that answered reports the same checksum, and every member of "
                        "the stable view with an HTTP address answered")
    majority: str | None
    checksums: dict[str, int] = Field(description="checksum -> how many members report it")
    disagree: list[str] = Field(description="members reporting another checksum than the majority")
    unreachable: list[str]
    unconfirmed: list[str] = Field(description="members of the stable view (exclusive ownership; else of this "
                                   "node's placement) with an HTTP address that did not answer: agreement "
                                   "cannot be confirmed while any is listed")
    members: list[MemberChecksum]


def _sse(event: Any) -> str:
    return f"id: {event.seq}\ndata: {json.dumps(event.to_dict(), separators=(',', ':'))}\n\n"


def add_console_routes(app: FastAPI, node: Any, problems: dict[int | str, dict[str, Any]]) -> None:
    """Add the console routes to ``app``; ``problems`` documents the 422 problem response."""
    ui = resources.files(__package__) / "ui"
    map_cache: dict[str, bytes] = {}  # etag -> payload: built once per snapshot
    fanout: dict[str, Any] = {}  # "at", "task": the latest agreement fan-out; "client": its HTTP client

    @contextlib.contextmanager
    def next_append() -> Iterator[asyncio.Event]:
        """An event set at the next append to (or close of) the node's log, while in the block."""
        woken = asyncio.Event()
        node.events.listeners.append(woken.set)
        try:
            yield woken
        finally:
            node.events.listeners.remove(woken.set)

    @app.get("/ui", response_class=HTMLResponse, response_description="the console page (text/html)")
    async def console_page() -> HTMLResponse:
        return HTMLResponse((ui / "index.html").read_text(encoding="utf-8"))

    @app.get("/ui/{asset}", response_class=Response, responses={
        200: {"description": "a static file of the page", "content": {
            media: {"schema": {"type": "string"}} for media in sorted(set(ASSETS.values()))}},
        **problems})
    async def console_asset(asset: Literal[tuple(ASSETS)] = Path(description="a file of the page")) -> Response:  # type: ignore[valid-type]
        return Response((ui / asset).read_bytes(), media_type=ASSETS[asset],
                        headers={"Cache-Control": "no-cache"})

    @app.get("/v1/events", response_model=EventsOut, responses={
        200: {"content": {EVENT_STREAM: {"schema": {"type": "string", "description":
              "with Accept: text/event-stream: one event per message, id = seq, data = an EventOut as JSON"}}}},
        **problems})
    async def events(
        request: Request,
        after: int = Query(0, ge=0, description="return the events numbered above this"),
        wait: float = Query(0.0, ge=0.0, le=MAX_WAIT_S,
                            description="long-poll: when after is the last event, wait this long for the next"),
        limit: int = Query(MAX_EVENTS, ge=1, le=MAX_EVENTS, description="at most this many, the newest"),
        last_event_id: str | None = Header(None, alias="Last-Event-ID", max_length=64, description=
                                           "sent by a reconnecting EventSource: a seq, wins over after "
                                           "(an id that is not a seq is ignored, as ids are opaque in SSE)"),
    ) -> Response:
        log = node.events
        start = int(last_event_id) if last_event_id and last_event_id.isascii() and last_event_id.isdigit() else after
        if EVENT_STREAM in request.headers.get("accept", ""):
            return StreamingResponse(stream(start, limit), media_type=EVENT_STREAM,
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        if wait > 0 and start == log.last_seq and not log.closed and not getattr(node, "leaving", False):
            with next_append() as woken, contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), wait)
        body = {"node": node.node_id, "first_seq": log.first_seq, "last_seq": log.last_seq,
                "events": [e.to_dict() for e in log.after(start, limit)]}
        return Response(json.dumps(body, separators=(",", ":")), media_type="application/json")

    async def stream(seq: int, limit: int) -> AsyncIterator[str]:
        log = node.events
        yield "retry: 1000\n\n"  # reconnect after 1 s (to this node again after a restart)
        while not log.closed:
            with next_append() as woken:  # before reading the log: no append slips between
                for event in log.after(seq, limit):
                    yield _sse(event)
                    seq = event.seq
                if getattr(node, "leaving", False):  # its "leaving" event was the last: end the stream
                    return  # (issue 30: an open stream must not hold a node that stops)
                if seq == log.last_seq and not log.closed:
                    try:
                        await asyncio.wait_for(woken.wait(), KEEPALIVE_S)
                    except TimeoutError:
                        yield ": keepalive\n\n"

    @app.get("/v1/map", response_class=Response, responses={
        200: {"description": "the partition map: see placement.service.console.summary.map_payload",
              "content": {MAP_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}},
              "headers": {"ETag": {"description": "quoted etag of the snapshot", "schema": {"type": "string"}}}},
        304: {"description": "the snapshot still has the etag named in If-None-Match"}, **problems})
    async def partition_map(
        if_none_match: str | None = Header(None, alias="If-None-Match", description="the quoted etag held"),
    ) -> Response:
        snap = node.snapshot
        etag = f'"{snap.etag}"'
        if if_none_match == etag:
            return Response(status_code=304, headers={"ETag": etag})
        if snap.etag not in map_cache:
            map_cache.clear()
            map_cache[snap.etag] = map_payload(snap)
        return Response(map_cache[snap.etag], media_type=MAP_MEDIA_TYPE, headers={"ETag": etag})

    @app.get("/v1/balancing", response_model=BalancingOut)
    async def load_balancing() -> Response:
        """Who is hot and what load-aware weights did: each member's load (work per second, from the
        figures this node gathered last), its weights gossiped, placed and planned, and the last
        plans: the view each was planned from, max/mean before and after, the moves. Not part of
        GET /v1/load, which every member asks every round."""
        gossiped = {m.node_id: m.meta.weight for m in node.members() if m.is_live}
        body = balancing(node.node_id, getattr(node, "load_balancer", None), node.snapshot.table, gossiped)
        return Response(json.dumps(body, separators=(",", ":")), media_type="application/json")

    @app.get("/v1/checksum", response_model=ChecksumOut)
    async def checksum() -> Response:
        snap = node.snapshot
        body = {"node": node.node_id, "checksum": snap.checksum, "etag": snap.etag,
                "members": len(snap.table.members)}
        return Response(json.dumps(body), media_type="application/json")

    async def ask_members() -> dict[str, Any]:
        import httpx  # on the first /v1/agreement, not at start-up: /healthz answers ~50 ms sooner

        snap = node.snapshot
        answers: dict[str, str | None] = {}
        rows: list[dict[str, Any]] = []
        limit = asyncio.Semaphore(AGREEMENT_CONCURRENCY)

        async def ask(client: httpx.AsyncClient, member: str, url: str) -> None:
            found, error = None, None
            if member == node.node_id:
                found = snap.checksum
            elif not url:
                error = "no HTTP address advertised"
            else:
                try:
                    async with limit:
                        r = await client.get(f"{url.rstrip('/')}/v1/checksum")
                    r.raise_for_status()
                    found = r.json()["checksum"]
                    if not isinstance(found, str):
                        found, error = None, "answered without a checksum"
                except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                    error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            answers[member] = found
            rows.append({"id": member, "http": url, "checksum": found, "error": error})

        client = fanout.get("client")
        if client is None:
            client = fanout["client"] = httpx.AsyncClient(timeout=AGREEMENT_TIMEOUT_S, limits=httpx.Limits(
                max_connections=AGREEMENT_CONCURRENCY, max_keepalive_connections=AGREEMENT_CONCURRENCY))
            node.events.listeners.append(close_client)
        # The stable view's members too: one that this node's view holds dead may be alive elsewhere.
        survival = getattr(node, "survival", None)
        view = set(survival.members) if survival is not None else set(snap.table.members)
        known = {m.node_id: m.meta.http for m in node.members()}
        urls = {m: snap.address(m) or known.get(m, "") for m in sorted(set(snap.table.members) | view)}
        await asyncio.gather(*(ask(client, m, url) for m, url in urls.items()))
        rows.sort(key=lambda r: r["id"])
        return {"node": node.node_id, "checked_at": time.time(),
                **agreement(answers, [m for m in view if urls.get(m)]), "members": rows}

    def close_client() -> None:
        if node.events.closed and "client" in fanout:
            node.events.listeners.remove(close_client)
            with contextlib.suppress(RuntimeError):  # no running loop: the process is ending anyway
                detach(fanout.pop("client").aclose())

    @app.get("/v1/agreement", response_model=AgreementOut)
    async def cluster_agreement() -> Response:
        now = time.monotonic()
        if "task" not in fanout or now - fanout["at"] > AGREEMENT_TTL_S:
            fanout.update(at=now, task=asyncio.ensure_future(ask_members()))
        body = await asyncio.shield(fanout["task"])
        return Response(json.dumps(body, separators=(",", ":")), media_type="application/json")
