"""Client-side routing: fetch a node's placement snapshot once, then route every key locally.

    with PlacementClient(["http://127.0.0.1:8001", "http://127.0.0.1:8002"]) as pc:
        pc.owner("order-42")            # member id: no HTTP call per key
        pc.owner_url("order-42")        # its base URL
        pc.route(keys)                  # {member: [keys]}
        pc.request("POST", "order-42", "/orders", json=...)   # to the leader; retried once on 421
        pc.request("GET", "order-42", "/orders/42", idempotent=True)  # any replica; fails over

A background thread (task, for ``AsyncPlacementClient``) long-polls ``GET /v1/placement
?after=<etag>&wait=<s>`` so the snapshot follows membership changes within one round trip.
Node URLs are tried in turn, so one dead node does not stop a client. A request that reaches
a node that does not own its key gets ``421 Misdirected Request`` (``placement.service.guard``): the
client refreshes its snapshot and retries once; so it does when a response carries a
placement checksum other than the one the request was routed with.

Idempotent requests (``idempotent=True``) are spread over the key's whole replica set, one
replica after the other (round robin, started at a different replica by every request), and
fail over to the next replica when one cannot be reached; the rest go to the leader alone, as
in laminarmq (reads load-balanced over replicas, writes to the leader). A non-idempotent
request that could not be delivered is not sent elsewhere: the caller cannot know whether the
leader acted on it. Which node to try next is decided by ``_Routing._attempts``, a generator
with no I/O; the sync and async clients only carry out what it yields.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from .errors import PlacementError, SnapshotError
from .snapshot import PlacementSnapshot

MSGPACK = "application/msgpack"
CHECKSUM_HEADER = "X-Placement-Checksum"
OWNER_HEADER = "X-Placement-Owner"


class NoNodeReachableError(PlacementError):
    """None of the node URLs answered with a placement snapshot."""


class NoReplicaReachableError(PlacementError):
    """An idempotent request reached none of its key's replicas."""


@dataclass(frozen=True)
class _Send:
    """Send the request to ``url`` (a base URL), tagged with the placement ``checksum`` it was
    routed with; answer with the response, or the ``httpx.TransportError`` that stopped it."""

    url: str
    checksum: str


class _Refresh:
    """Fetch the snapshot again, then carry on."""


_REFRESH = _Refresh()
Outcome = httpx.Response | httpx.TransportError | None
Attempts = Generator[_Send | _Refresh, Outcome, httpx.Response]


def _normalise(urls: str | Sequence[str]) -> list[str]:
    urls = [urls] if isinstance(urls, str) else list(urls)
    if not urls:
        raise PlacementError("give at least one node URL, e.g. http://127.0.0.1:8001")
    return [u.rstrip("/") for u in urls]


class _Routing:
    """Local routing on the current snapshot: the part both clients share (no I/O)."""

    _snapshot: PlacementSnapshot

    def _install(self, snapshot: PlacementSnapshot) -> None:
        self._snapshot = snapshot
        self._lookup = snapshot.table.lookup  # bound once: the per-key hot path

    @property
    def snapshot(self) -> PlacementSnapshot:
        return self._snapshot

    @property
    def checksum(self) -> str:
        return self._snapshot.checksum

    def owner(self, key: str | bytes) -> str:
        """Leader of the key's partition."""
        return self._lookup(key)[0]

    def owners(self, key: str | bytes, k: int | None = None) -> tuple[str, ...]:
        """Replica set of the key's partition (first ``k``), leader first."""
        return self._lookup(key)[:k]

    def owner_url(self, key: str | bytes) -> str:
        return self._snapshot.address(self._lookup(key)[0])

    def route(self, keys: Iterable[str | bytes]) -> dict[str, list[str | bytes]]:
        """Keys grouped by their leader (vectorised)."""
        return self._snapshot.table.route(keys)

    def _needs_retry(self, response: httpx.Response, checksum: str) -> bool:
        seen = response.headers.get(CHECKSUM_HEADER)
        return response.status_code == 421 or (seen is not None and seen != checksum)

    @staticmethod
    def _parse(response: httpx.Response) -> PlacementSnapshot:
        response.raise_for_status()
        return PlacementSnapshot.from_msgpack(response.content)

    def _answered(self, url: str) -> None:
        """Stick to a node that answers: try it first next time."""
        self._urls.remove(url)
        self._urls.insert(0, url)

    @staticmethod
    def _with_checksum(kwargs: dict[str, Any], checksum: str) -> dict[str, Any]:
        return {**kwargs, "headers": {**kwargs.get("headers", {}), CHECKSUM_HEADER: checksum}}

    # Where the next idempotent request starts in its replica set (shared by the clients of a
    # process: spreading needs only a start that moves on).
    _spread = itertools.count()

    def _targets(self, key: str | bytes, idempotent: bool) -> list[str]:
        """Base URLs to try in turn: the leader alone, or every replica from a rotating start."""
        owners = self._lookup(key)
        if not idempotent:
            owners = owners[:1]
        elif len(owners) > 1:
            start = next(self._spread) % len(owners)
            owners = owners[start:] + owners[:start]
        return [self._snapshot.address(m) for m in owners]

    def _attempts(self, key: str | bytes, idempotent: bool) -> Attempts:
        """The decisions of one ``request`` (sans-I/O): yields what to do, is sent what happened.

        A 421 or another placement checksum in the answer means the snapshot is stale: refresh
        it and start over on the new owners, once. A transport error moves an idempotent
        request on to the next replica and ends any other request (re-raised)."""
        refreshed = False
        while True:
            errors = []
            for url in self._targets(key, idempotent):
                if not url:
                    errors.append("a replica without an HTTP address")
                    continue
                checksum = self.checksum
                outcome = yield _Send(url, checksum)
                if isinstance(outcome, httpx.TransportError):
                    if not idempotent:
                        raise outcome
                    errors.append(f"{url}: {type(outcome).__name__}: {outcome}")
                    continue
                assert outcome is not None
                if refreshed or not self._needs_retry(outcome, checksum):
                    return outcome
                break
            else:
                what = "the replicas" if idempotent else "the leader"
                raise NoReplicaReachableError(f"no answer from {what} of {key!r}: " + "; ".join(errors))
            yield _REFRESH
            refreshed = True


_FETCH_ERRORS = (httpx.HTTPError, SnapshotError)


def _unreachable(errors: list[str]) -> NoNodeReachableError:
    return NoNodeReachableError("no node answered a placement request: " + "; ".join(errors))


class PlacementClient(_Routing):
    """Synchronous client (httpx). Thread-safe for lookups; refreshes in a daemon thread."""

    def __init__(self, urls: str | Sequence[str], *, refresh: bool = True, long_poll_s: float = 25.0,
                 timeout_s: float = 5.0, transport: httpx.BaseTransport | None = None) -> None:
        self._urls = _normalise(urls)
        self._long_poll_s = long_poll_s
        self._http = httpx.Client(timeout=timeout_s, transport=transport, headers={"Accept": MSGPACK})
        self._stop = threading.Event()
        self._install(self._fetch())
        self._thread: threading.Thread | None = None
        if refresh:
            self._thread = threading.Thread(target=self._refresh_loop, name="placement-refresh", daemon=True)
            self._thread.start()

    def _fetch(self, params: dict[str, Any] | None = None, timeout: float | httpx.Timeout = httpx.USE_CLIENT_DEFAULT) -> PlacementSnapshot:
        errors = []
        for url in list(self._urls):
            try:
                snap = self._parse(self._http.get(f"{url}/v1/placement", params=params, timeout=timeout))
            except _FETCH_ERRORS as exc:
                errors.append(f"{url}: {exc}")
                continue
            self._answered(url)
            return snap
        raise _unreachable(errors)

    def refresh(self) -> PlacementSnapshot:
        """Fetch the snapshot now."""
        self._install(self._fetch())
        return self._snapshot

    def _refresh_loop(self) -> None:
        while not self._stop.is_set():
            try:
                params = {"after": self._snapshot.etag, "wait": self._long_poll_s}
                self._install(self._fetch(params, timeout=self._long_poll_s + 10))
            except NoNodeReachableError:
                self._stop.wait(1.0)  # every node down: retry, gently
            except RuntimeError:  # httpx: the client was closed under a pending long-poll
                if not self._stop.is_set():
                    raise

    def request(self, method: str, key: str | bytes, path: str, *, idempotent: bool = False,
                **kwargs: Any) -> httpx.Response:
        """Send a request for ``key``: to its leader, or (``idempotent``) to any of its replicas,
        failing over to the next; refresh and retry once on 421 or a stale checksum."""
        attempts, outcome = self._attempts(key, idempotent), None
        while True:
            try:
                action = attempts.send(outcome)
            except StopIteration as done:
                return done.value
            if isinstance(action, _Refresh):
                self.refresh()
                outcome = None
                continue
            try:
                outcome = self._http.request(method, f"{action.url}{path}",
                                             **self._with_checksum(kwargs, action.checksum))
            except httpx.TransportError as exc:
                outcome = exc

    def close(self) -> None:
        self._stop.set()
        self._http.close()

    def __enter__(self) -> "PlacementClient":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncPlacementClient(_Routing):
    """asyncio client (httpx). Create with ``await AsyncPlacementClient.connect(urls)``."""

    def __init__(self, urls: str | Sequence[str], *, long_poll_s: float = 25.0, timeout_s: float = 5.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._urls = _normalise(urls)
        self._long_poll_s = long_poll_s
        self._http = httpx.AsyncClient(timeout=timeout_s, transport=transport, headers={"Accept": MSGPACK})
        self._task: asyncio.Task | None = None

    @classmethod
    async def connect(cls, urls: str | Sequence[str], *, refresh: bool = True, **kwargs: Any) -> "AsyncPlacementClient":
        client = cls(urls, **kwargs)
        await client.refresh()
        if refresh:
            client._task = asyncio.create_task(client._refresh_loop(), name="placement-refresh")
        return client

    async def _fetch(self, params: dict[str, Any] | None = None, timeout: Any = httpx.USE_CLIENT_DEFAULT) -> PlacementSnapshot:
        errors = []
        for url in list(self._urls):
            try:
                snap = self._parse(await self._http.get(f"{url}/v1/placement", params=params, timeout=timeout))
            except _FETCH_ERRORS as exc:
                errors.append(f"{url}: {exc}")
                continue
            self._answered(url)
            return snap
        raise _unreachable(errors)

    async def refresh(self) -> PlacementSnapshot:
        self._install(await self._fetch())
        return self._snapshot

    async def _refresh_loop(self) -> None:
        while True:
            try:
                params = {"after": self._snapshot.etag, "wait": self._long_poll_s}
                self._install(await self._fetch(params, timeout=self._long_poll_s + 10))
            except NoNodeReachableError:
                await asyncio.sleep(1.0)  # every node down: retry, gently

    async def request(self, method: str, key: str | bytes, path: str, *, idempotent: bool = False,
                      **kwargs: Any) -> httpx.Response:
        """As ``PlacementClient.request``."""
        attempts, outcome = self._attempts(key, idempotent), None
        while True:
            try:
                action = attempts.send(outcome)
            except StopIteration as done:
                return done.value
            if isinstance(action, _Refresh):
                await self.refresh()
                outcome = None
                continue
            try:
                outcome = await self._http.request(method, f"{action.url}{path}",
                                                   **self._with_checksum(kwargs, action.checksum))
            except httpx.TransportError as exc:
                outcome = exc

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncPlacementClient":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
