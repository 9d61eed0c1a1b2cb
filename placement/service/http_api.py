"""The node's HTTP API (FastAPI): members, placement snapshot, owners, bulk routing, health, metrics.

JSON by default; msgpack when the request says ``Accept: application/msgpack`` (and, for
``POST /v1/route``, ``Content-Type: application/msgpack``). Errors are RFC 9457 problem details
(``application/problem+json``); bad input gets a 4xx, never a 500.

Handlers return pre-serialised ``Response`` objects: the pydantic models below document the
bodies in the OpenAPI schema without costing a validation pass per request, which keeps
``GET /v1/owners`` close to the cost of a no-op route (BENCHMARKS.md). The OpenAPI 3.1 document
(``/openapi.json``) names every status a route answers with, each with its media types: the
problem body for errors, the msgpack form beside JSON where ``Accept`` selects it.
tests/test_openapi.py validates it and fuzzes a live node against it with schemathesis.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import time
from collections.abc import Mapping
from http import HTTPStatus
from typing import Annotated, Any, Protocol

import msgpack
from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel, Field, WithJsonSchema
from starlette.exceptions import HTTPException as StarletteHTTPException

from membership import MemberInfo
from membership.status import STATUSES

from ..snapshot import PlacementSnapshot
from ..table import MAX_REPLICAS
from .console.events import EventLog
from .console.routes import add_console_routes
from .http_limits import MAX_BODY_BYTES, BodyLimit, BodyStats, CrossSite
from .key_rules import MAX_KEY_CHARS, key_error
from .load_meter import DEFAULT_HALF_LIFE_S

MSGPACK = "application/msgpack"
PROBLEM = "application/problem+json"
MAX_ROUTE_KEYS = 1_000_000
MAX_ROUTE_BODY_BYTES = MAX_BODY_BYTES  # every body's limit (http_limits.BodyLimit), counted as it streams
MAX_WAIT_S = 60.0
#: OpenAPI responses of a route by status, as FastAPI's ``responses=`` takes them.
Responses = dict[int | str, dict[str, Any]]


class NodeLike(Protocol):
    """What the API needs from a node (``placement.service.node.Node`` provides it: mypy checks
    that in ``node.py``). Read-only properties, because the API only reads them: a node may
    compute them (``Node.node_id`` does) or keep them as plain attributes."""

    @property
    def node_id(self) -> str: ...
    @property
    def placement_changes(self) -> int: ...
    @property
    def callback_errors(self) -> int: ...
    @property
    def events(self) -> EventLog: ...
    @property
    def snapshot(self) -> PlacementSnapshot: ...
    @property
    def ready(self) -> bool: ...
    @property
    def joined(self) -> bool: ...
    def members(self) -> list[MemberInfo]: ...
    def owned_partitions(self) -> frozenset[int]: ...
    def releasing_partitions(self) -> frozenset[int]: ...
    def grant(self, partition: int) -> Any: ...
    def ownership_status(self) -> dict[str, Any]: ...
    @property
    def paused(self) -> str | None: ...
    async def wait_for_change(self, etag: str, timeout_s: float) -> PlacementSnapshot: ...
    async def leave(self, timeout_s: float = 2.0) -> None: ...


# ----- documented bodies (OpenAPI) ---------------------------------------------------------
class MemberOut(BaseModel):
    id: str
    gossip: str = Field(description="host:port of the member's gossip endpoint")
    http: str = Field(description="base URL of the member's HTTP API")
    status: str = Field(description="alive | suspect | dead | left")
    incarnation: int
    weight: float
    tags: dict[str, str]
    zone: str = Field("", description="failure domain (placement node --zone); \"\": none")
    heard_s_ago: float | None = Field(None, description="seconds since this node last received a datagram from "
                                                       "the member (null: never; this node itself)")


class Owner(BaseModel):
    id: str
    http: str
    zone: str = Field("", description="the owner's failure domain (placement node --zone); \"\": none")


class OwnersOut(BaseModel):
    key: str
    partition: int
    owners: list[Owner] = Field(description="replica set, leader first")
    checksum: str


# A member is the pair [id, weight] on the wire. Its exact JSON Schema is a tuple (prefixItems),
# which is valid OpenAPI 3.1, but schemathesis 4.32 rewrites prefixItems into the draft-4 form
# `items: [...]` before checking response schemas, then rejects its own rewrite. This form
# admits the same pairs (one string, one number) but not their order; the description says it.
MemberPair = Annotated[tuple[str, float], WithJsonSchema({
    "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": ["string", "number"]},
    "contains": {"type": "string"}, "maxContains": 1,
    "description": "[id, weight]: the member id (string), then its weight (number)",
})]


class _PlacementFields(BaseModel):
    """What both forms of ``GET /v1/placement`` hold besides the owner table."""

    format: str
    checksum: str = Field(description="identity of the placement (members, weights, settings)")
    etag: str = Field(description="identity of the snapshot (placement and addresses)")
    partitions: int
    replicas: int
    seed: int
    capacity_factor: float | None
    members: list[MemberPair] = Field(description="[id, weight] sorted by id")
    addresses: dict[str, str] = Field(description="member id -> base URL")
    owners_width: int


class PlacementOut(_PlacementFields):
    owners: list[list[int]] = Field(description="per partition, indices into members, leader first")


class PlacementMsgpackOut(_PlacementFields):
    """The msgpack form: as the JSON one, with the owner table packed in one bin value."""

    owners: bytes = Field(description="owners_width little-endian int32 member indices per partition (msgpack bin)")


class RouteIn(BaseModel):
    keys: list[Annotated[str, Field(min_length=1, max_length=MAX_KEY_CHARS)]] = Field(
        description=f"at most {MAX_ROUTE_KEYS:,} keys, each 1 to {MAX_KEY_CHARS} characters")


class RouteGroup(BaseModel):
    http: str
    keys: list[str]


class RouteOut(BaseModel):
    checksum: str
    routes: dict[str, RouteGroup] = Field(description="leader id -> its address and keys")


class Health(BaseModel):
    status: str = Field(description="ok (healthz), ready (readyz), leaving (leave)")
    node: str = Field(description="this node's id")
    warning: str | None = Field(None, description="readyz, exclusive ownership: set when the crash of one member "
                                "would stop all work, with what to add (the node is ready all the same)")
    security_warning: str | None = Field(None, description="readyz: set when gossip runs without keys (no "
                                         "--key-file), with what that allows and the fix (ready all the same)")


class SurvivalOut(BaseModel):
    """What the cluster survives, from the stable view this node holds (``ownership.survival``)."""

    members: list[str]
    workers: list[str] = Field(description="the members with a positive weight: they own partitions")
    witnesses: list[str] = Field(description="the view's witnesses, first witness first (it breaks ties)")
    fatal: list[str] = Field(description="members whose crash alone stops all work")
    crashes_survived: int = Field(description="simultaneous crashes of any members always survived")
    split: str = Field(description="what a network split does")
    warning: str | None = Field(description="what a fatal crash is and what to add, or null")
    summary: str


class OwnershipOut(BaseModel):
    node: str
    mode: str = Field(description="exclusive (never two owners) or available (opt-in)")
    owned: list[int] = Field(description="partitions this node may work on now, ascending")
    releasing: list[int] = Field(description="partitions being drained before their handoff")
    waiting: int = Field(description="partitions this node leads but waits to receive (exclusive)")
    paused: str | None = Field(description="why this node owns nothing now, or null")
    lease_valid_for_s: float | None = Field(description="seconds the quorum lease still runs (exclusive)")
    epochs: dict[str, int] = Field(description="partition -> fencing epoch of its current ownership")
    stable_view: int | None = Field(None, description="number of the stable view ownership follows (exclusive); "
                                    "nodes that report one number hold the same view")
    witnesses: list[str] = Field(default_factory=list, description="the witnesses of that view (exclusive)")
    votes: bool | None = Field(None, description="this node is one of those witnesses (exclusive)")
    forgetful: bool | None = Field(None, description="started without what its previous process promised as a "
                                   "witness (no --state-dir, or the file lost) and not voted since (exclusive)")
    quiet_for_s: float | None = Field(None, description="seconds before this node may vote on stable views: a "
                                      "restart without its witness state waits twice the lease (exclusive)")
    survival: SurvivalOut | None = Field(None, description="what the cluster survives (exclusive; null before "
                                         "this node holds a stable view)")
    security_warning: str | None = Field(None, description="set when gossip runs without keys (no --key-file): "
                                         "what that allows and the fix")


class Problem(BaseModel):
    """RFC 9457 problem details, the body of every error response."""

    type: str = Field(description="always about:blank: the title names the problem")
    title: str
    status: int = Field(description="the HTTP status code")
    detail: str = Field(description="what was wrong, and what to do")


def problem(status: int, title: str, detail: str, headers: Mapping[str, str] | None = None) -> Response:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return Response(json.dumps(body), status_code=status, media_type=PROBLEM, headers=headers)


#: How long a client should wait before asking a node that has not joined yet again.
NOT_JOINED_RETRY_S = 2
#: Retry-After of a node that is leaving: a client asks another node at once.
LEAVING_RETRY_S = 0


def _not_joined(node: NodeLike) -> Response | None:
    """503 while the node has not joined (issue 16): its view holds only itself, so its answer
    would name itself as the owner of every key."""
    if node.joined:
        return None
    return problem(503, "Not joined", "this node has not joined the cluster yet (no member has answered "
                   "through its seeds), so it cannot say who owns what: ask another node, or retry",
                   {"Retry-After": str(NOT_JOINED_RETRY_S)})


def _leaving(node: NodeLike) -> Response | None:
    """503 from a node that is leaving (issue 30): a long-poll open on it is answered at once, and
    a client asks another node for its snapshot (``Retry-After`` 0: at once)."""
    if not getattr(node, "leaving", False):
        return None
    return problem(503, "Leaving", "this node is leaving the cluster (it hands its partitions over, then stops): "
                   "ask another node", {"Retry-After": str(LEAVING_RETRY_S)})


def _loopback(request: Request) -> bool:
    host = request.client.host if request.client is not None else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _problems(*statuses: int) -> Responses:
    """OpenAPI responses for the error statuses a route answers with: problem bodies."""
    return {status: {"description": HTTPStatus(status).phrase, "content": {PROBLEM: {"schema": _ref(Problem)}}}
            for status in statuses}


def _msgpack_too(schema: dict[str, Any]) -> Responses:
    """The msgpack alternative of a 200 response, chosen with ``Accept: application/msgpack``."""
    return {200: {"content": {MSGPACK: {"schema": schema}}}}


_ETAG = {"ETag": {"description": "quoted etag of the snapshot", "schema": {"type": "string"}}}


def _wants_msgpack(request: Request) -> bool:
    return MSGPACK in request.headers.get("accept", "")


def _encode(request: Request, body: Any, headers: dict[str, str] | None = None) -> Response:
    if _wants_msgpack(request):
        return Response(msgpack.packb(body, use_bin_type=True), media_type=MSGPACK, headers=headers)
    return Response(json.dumps(body, separators=(",", ":")), media_type="application/json", headers=headers)


def _member_out(m: MemberInfo) -> dict[str, Any]:
    return {
        "id": m.node_id, "gossip": f"{m.addr[0]}:{m.addr[1]}", "http": m.meta.http, "status": m.status,
        "incarnation": m.incarnation, "weight": m.meta.weight, "tags": dict(m.meta.tags), "zone": m.meta.zone,
        # The membership core runs on loop time, i.e. time.monotonic() (asyncio's clock).
        "heard_s_ago": None if m.heard_at is None else round(max(0.0, time.monotonic() - m.heard_at), 2),
    }


# Always exported (0 until they happen), so dashboards and alerts find them from the start.
_GOSSIP_COUNTERS = ("probes_sent", "probe_failures", "ping_reqs_sent", "suspicions", "refutations",
                    "deaths_declared", "datagrams_in", "datagrams_out", "bytes_in", "bytes_out")


class _NodeCollector:
    """Prometheus metrics read from the node at scrape time (no bookkeeping on hot paths).

    ``prometheus_client`` is imported by the first scrape, not with this module: a node
    answers ``/healthz`` ~10 ms sooner after it is started (issue 14)."""

    def __init__(self, node: NodeLike, bodies: BodyStats | None = None) -> None:
        self.node = node
        self.bodies = bodies
        self._registry: Any = None

    def exposition(self) -> bytes:
        """The metrics in the Prometheus text format 0.0.4."""
        from prometheus_client import CollectorRegistry, generate_latest

        if self._registry is None:
            self._registry = CollectorRegistry()
            self._registry.register(self)
        return generate_latest(self._registry)

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        by_status = GaugeMetricFamily("placement_members", "Members in this node's view by status", labels=["status"])
        counts: dict[str, int] = {s: 0 for s in STATUSES}
        for m in self.node.members():
            counts[m.status] = counts.get(m.status, 0) + 1
        for status, n in counts.items():
            by_status.add_metric([status], n)
        yield by_status
        if self.bodies is not None:
            yield GaugeMetricFamily("placement_http_large_requests_running", "Requests with a large body running now "
                                    "(at most http_limits.MAX_LARGE_REQUESTS)", value=self.bodies.running_large)
            refused = CounterMetricFamily("placement_http_bodies_refused", "Request bodies refused, by status "
                                          "(413 too large, 503 too many large at once, 408 stalled)", labels=["status"])
            for code, n in sorted(self.bodies.refused.items()):
                refused.add_metric([str(code)], n)
            yield refused
        core = getattr(getattr(self.node, "member", None), "core", None)
        stats = dict.fromkeys(_GOSSIP_COUNTERS, 0) | dict(getattr(core, "stats", {}))
        dropped = CounterMetricFamily("placement_gossip_dropped_datagrams", "Datagrams dropped, by reason",
                                      labels=["reason"])
        for name, value in sorted(stats.items()):
            if name.startswith("dropped_"):
                dropped.add_metric([name[len("dropped_"):]], value)
            elif name != "dropped":
                yield CounterMetricFamily(f"placement_gossip_{name}", f"Gossip core counter {name}", value=value)
        yield dropped
        yield CounterMetricFamily("placement_changes", "Placement recomputations that changed the table",
                                  value=self.node.placement_changes)
        yield GaugeMetricFamily("placement_partitions_owned", "Partitions this node leads",
                                value=len(self.node.owned_partitions()))
        ownership = self.node.ownership_status()
        if ownership["mode"] == "exclusive":
            for name, value in sorted(ownership["counters"].items()):
                yield CounterMetricFamily(f"placement_ownership_{name}", f"Exclusive ownership counter {name}",
                                          value=value)
            yield CounterMetricFamily("placement_ownership_unknown_messages", "Ownership messages of kinds this "
                                      "version does not know (from a newer member), skipped",
                                      value=ownership.get("unknown_messages", 0))
            yield CounterMetricFamily("placement_handoff_dropped_datagrams", "Handoff datagrams dropped (malformed, "
                                      "another cluster, not sealed with our keys)", value=ownership["dropped"])
            yield GaugeMetricFamily("placement_ownership_lease_valid_seconds", "Seconds the quorum lease still runs",
                                    value=ownership["lease_valid_for_s"])
            yield GaugeMetricFamily("placement_ownership_paused", "1 while this node may own nothing",
                                    value=1 if ownership["fenced"] else 0)
            survival = getattr(self.node, "survival", None)
            if survival is not None:  # (ownership.survival; absent before a stable view is held)
                yield GaugeMetricFamily("placement_crashes_survived", "Simultaneous member crashes the stable view "
                                        "always survives (0: some single crash stops all work)",
                                        value=survival.crashes)
        yield CounterMetricFamily("placement_callback_errors", "Exceptions raised by ownership callbacks "
                                  "(logged with the partition; the node carries on)",
                                  value=self.node.callback_errors)
        lag = getattr(self.node, "app_loop_lag_s", None)  # placement.service.loop_lag.AppLoopLag
        if lag is not None:
            yield GaugeMetricFamily("placement_app_loop_lag_seconds", "How late the application's event loop "
                                    "would run a timer: its longest run between two waits for I/O of the last "
                                    "minute, or how long it has been busy now (does not affect membership)",
                                    value=lag)


# Links between operations (OpenAPI 3.1, 4.8.20): a snapshot's etag is what a client sends back
# to long-poll for the next change, or to revalidate the one it holds.
_PLACEMENT_LINKS = {
    "nextChange": {"operationId": "placement", "parameters": {"after": "$response.body#/etag"},
                   "description": "long-poll (with wait) until the snapshot differs from this one"},
    "revalidate": {"operationId": "placement", "parameters": {"header.If-None-Match": "$response.header.ETag"},
                   "description": "304 while the snapshot is unchanged"},
}


def create_app(node: NodeLike, admin_token: str | None = None, on_leave=None) -> FastAPI:
    """The HTTP API of ``node``. ``on_leave`` runs after a ``POST /v1/leave`` completed."""
    app = FastAPI(title="placement node", version="1", description=__doc__.split("\n\n")[0],
                  generate_unique_id_function=lambda route: route.name)
    bodies = BodyStats()
    collector = _NodeCollector(node, bodies)
    # GET /v1/owners?replicas= above this answered fewer owners than asked, silently (issue 31)
    cluster_replicas = getattr(getattr(node, "config", None), "replicas", MAX_REPLICAS)
    # Outermost first: a cross-site request is refused before its body is read (http_limits).
    app.add_middleware(BodyLimit, stats=bodies)
    app.add_middleware(CrossSite, advertised=[getattr(getattr(node, "config", None), "http_advertise", "") or ""])

    def openapi() -> dict[str, Any]:
        """FastAPI's document, plus the schemas that only raw ``responses`` entries name."""
        if app.openapi_schema is None:
            spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            components = spec.setdefault("components", {})
            schemas = components.setdefault("schemas", {})
            for model in (Problem, PlacementMsgpackOut):
                schemas[model.__name__] = model.model_json_schema(mode="serialization")
            if admin_token:
                components["securitySchemes"] = {"adminToken": {
                    "type": "http", "scheme": "bearer", "description": "the node's --admin-token"}}
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(StarletteHTTPException)
    async def http_problem(request: Request, exc: StarletteHTTPException) -> Response:
        try:
            title = HTTPStatus(exc.status_code).phrase
        except ValueError:  # a status code the standard library does not name
            title = "Error"
        return problem(exc.status_code, title, str(exc.detail), exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_problem(request: Request, exc: RequestValidationError) -> Response:
        detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return problem(422, "Invalid request", detail)

    @app.get("/", response_class=RedirectResponse, status_code=307, response_description="to the console page",
             responses={307: {"headers": {"Location": {"schema": {"type": "string", "const": "/ui"}}}}})
    async def root() -> RedirectResponse:
        return RedirectResponse("/ui", status_code=307)

    add_console_routes(app, node, _problems(422))

    @app.get("/v1/members", response_model=list[MemberOut],
             responses=_msgpack_too({"type": "array", "items": _ref(MemberOut)}))
    async def members(request: Request) -> Response:
        return _encode(request, [_member_out(m) for m in node.members()])

    @app.get("/v1/placement", response_model=PlacementOut, responses={
        200: {"headers": _ETAG, "links": _PLACEMENT_LINKS,
              "content": {MSGPACK: {"schema": _ref(PlacementMsgpackOut)}}},
        304: {"description": "the snapshot still has the etag named in If-None-Match", "headers": _ETAG},
        **_problems(422, 503)})
    async def placement(
        request: Request,
        after: str | None = Query(None, max_length=64, description="long-poll: return once the etag differs"),
        wait: float = Query(0.0, ge=0.0, le=MAX_WAIT_S, description="long-poll bound in seconds"),
        if_none_match: str | None = Header(None, alias="If-None-Match",
                                           description="the quoted etag held: 304 if it is still current"),
    ) -> Response:
        if (refusal := _not_joined(node)) is not None:
            return refusal
        snap = node.snapshot
        if after is not None and wait > 0:
            snap = await node.wait_for_change(after, wait)
        if (refusal := _leaving(node)) is not None:
            return refusal
        etag = f'"{snap.etag}"'
        if if_none_match == etag:
            return Response(status_code=304, headers={"ETag": etag})
        return _encode(request, snap.to_dict(binary=_wants_msgpack(request)), {"ETag": etag})

    @app.get("/v1/owners", response_model=OwnersOut,
             responses={**_msgpack_too(_ref(OwnersOut)), **_problems(422, 503)})
    async def owners(
        request: Request,
        key: str = Query(..., min_length=1, max_length=MAX_KEY_CHARS),
        replicas: int | None = Query(None, ge=1, le=cluster_replicas, description="how many of the replica set: "
                                     f"at most the cluster's --replicas, {cluster_replicas} (more is a 422)"),
    ) -> Response:
        if (refusal := _not_joined(node)) is not None:
            return refusal
        snap = node.snapshot
        table = snap.table
        if (why := key_error(key)) is not None:
            return problem(422, "Invalid request", f"key: {why}")
        p = table.partition_of(key)
        ids = table.owners(p)[:replicas]
        body = {"key": key, "partition": p,
                "owners": [{"id": m, "http": snap.address(m), "zone": table.zone_of(m)} for m in ids],
                "checksum": table.checksum}
        return _encode(request, body)

    @app.post("/v1/route", response_model=RouteOut,
              responses={**_msgpack_too(_ref(RouteOut)), **_problems(400, 403, 413, 415, 422, 503)},
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": RouteIn.model_json_schema()},
                  MSGPACK: {"schema": RouteIn.model_json_schema()}}}})
    async def route(request: Request) -> Response:
        if (refusal := _not_joined(node)) is not None:
            return refusal
        raw = await request.body()
        if len(raw) > MAX_ROUTE_BODY_BYTES:
            return problem(413, "Body too large", f"at most {MAX_ROUTE_BODY_BYTES} bytes")
        ctype = request.headers.get("content-type", "application/json").split(";")[0].strip()
        try:
            if ctype == MSGPACK:
                body = msgpack.unpackb(raw, raw=False)
            elif ctype in ("application/json", ""):
                body = json.loads(raw)
            else:
                return problem(415, "Unsupported media type", f"send application/json or {MSGPACK}, not {ctype}")
        except (ValueError, msgpack.UnpackException, msgpack.ExtraData) as exc:
            # Some msgpack errors have no message (FormatError of b"\xc1"): their name says it.
            why = f"{type(exc).__name__}: {exc}" if str(exc) else f"{type(exc).__name__} (not valid {ctype})"
            return problem(400, "Malformed body", f"could not decode the {ctype} body: {why}")
        keys = body.get("keys") if isinstance(body, dict) else None
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            return problem(422, "Invalid request", 'body must be {"keys": [string, ...]}')
        if len(keys) > MAX_ROUTE_KEYS:
            return problem(413, "Too many keys", f"at most {MAX_ROUTE_KEYS:,} keys per request")
        # The rule of GET /v1/owners (issue 31: "" and a 5 MB key were routed here).
        bad = next((i for i, k in enumerate(keys) if not 0 < len(k) <= MAX_KEY_CHARS), None)
        if bad is not None:
            return problem(422, "Invalid key", f"keys[{bad}]: {key_error(keys[bad])}")
        snap = node.snapshot
        try:
            groups = snap.table.route(keys)
        except UnicodeEncodeError as exc:
            return problem(422, "Invalid key", f"keys must be valid Unicode text: {exc.reason}")
        routes = {m: {"http": snap.address(m), "keys": ks} for m, ks in groups.items()}
        return _encode(request, {"checksum": snap.checksum, "routes": routes})

    @app.get("/healthz", response_model=Health)
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "node": node.node_id}

    @app.get("/readyz", response_model=Health, responses=_problems(503))
    async def readyz() -> Response:
        survival = getattr(node, "survival", None)
        warning = None if survival is None else survival.warning
        insecure = getattr(node, "security_warning", None)
        if not node.ready:
            refused = getattr(node, "refused", None) or getattr(node, "id_conflict", None)
            paused = getattr(node, "paused", None)
            detail = (str(refused) if refused else f"ownership paused: {paused}" if paused
                      else "not joined yet, or the membership view has not settled")
            return problem(503, "Not ready", detail + "".join(f"; {w}" for w in (warning, insecure) if w))
        body: dict[str, Any] = {"status": "ready", "node": node.node_id}
        if warning:
            body["warning"] = warning  # a warning, not a reason to be unready: a 2-node cluster works
        if insecure:
            body["security_warning"] = insecure
        return Response(json.dumps(body), media_type="application/json")

    @app.get("/v1/ownership", response_model=OwnershipOut)
    async def ownership() -> dict[str, Any]:
        """What this node owns now, what it is releasing, and why it is paused (if it is)."""
        status = node.ownership_status()
        survival = getattr(node, "survival", None)
        owned = sorted(node.owned_partitions())
        grants = {p: node.grant(p) for p in owned}
        return {
            "node": node.node_id, "mode": status["mode"], "owned": owned,
            "releasing": sorted(node.releasing_partitions()), "waiting": status.get("waiting", 0),
            "paused": node.paused, "lease_valid_for_s": status.get("lease_valid_for_s"),
            "epochs": {str(p): g.epoch for p, g in grants.items() if g is not None},
            "stable_view": status.get("stable_view"), "witnesses": status.get("witnesses", []),
            "votes": status.get("votes"), "forgetful": status.get("forgetful"),
            "quiet_for_s": status.get("quiet_for_s"), "survival": None if survival is None else survival.to_dict(),
            "security_warning": getattr(node, "security_warning", None),
        }

    @app.get("/v1/load")
    async def load() -> dict[str, Any]:
        """Work per second on each partition this node recorded work on lately (``Node.record_load``;
        decayed with a 60 s half-life), and their sum."""
        rates = node.load_rates() if hasattr(node, "load_rates") else {}
        return {"node": node.node_id, "half_life_s": DEFAULT_HALF_LIFE_S, "total": sum(rates.values()),
                "partitions": {str(p): round(r, 6) for p, r in sorted(rates.items())},
                "balancing": getattr(node, "load_balancing", None)}

    @app.get("/metrics", response_class=Response, responses={200: {
        "description": "Prometheus text exposition format 0.0.4",
        "content": {"text/plain": {"schema": {"type": "string"}}}}})
    async def metrics() -> Response:
        return Response(collector.exposition(), media_type="text/plain; version=0.0.4")

    @app.post("/v1/leave", status_code=202, response_model=Health, response_description="leaving",
              responses=_problems(401, 403) if admin_token else _problems(403),
              openapi_extra={"security": [{"adminToken": []}]} if admin_token else None)
    async def leave(request: Request) -> Response:
        if not admin_token and not _loopback(request):
            # Safe by default (issue 16): without a token, only a process on this host may stop it.
            return problem(403, "Forbidden", "this node has no --admin-token, so POST /v1/leave is accepted "
                           "only from loopback; start it with --admin-token and send Authorization: Bearer <token>")
        if admin_token:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not token:  # schemes are case-insensitive (RFC 9110 11.1)
                return problem(401, "Unauthorized", "send Authorization: Bearer <admin token>")
            if not hmac.compare_digest(token.encode(), admin_token.encode()):
                return problem(403, "Forbidden", "wrong admin token")

        async def run() -> None:
            await node.leave()
            if on_leave is not None:
                on_leave()

        app.state.leave_task = asyncio.create_task(run())
        return Response(json.dumps({"status": "leaving", "node": node.node_id}), status_code=202,
                        media_type="application/json")

    return app
