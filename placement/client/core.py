"""What the client decides, with no I/O: routing, failover order, snapshot refresh, errors.

Theory of operation. Every operation of the client is a *plan*: a generator that yields the
next step - a ``Call`` (one HTTP request to make) or a ``Pause`` (seconds to wait) - and is
told what happened: it is sent the ``httpx.Response`` a call got (None after a pause), or has
the ``httpx.HTTPError`` that stopped the call thrown in (``generator.throw``). What a plan
returns is the operation's result; what it raises is the operation's error. ``advance`` is one
such exchange, the whole of what a shell does besides the I/O itself. The sync and async
clients (``placement.client.sync``, ``placement.client.aio``) only carry the steps out, so both
make the same requests in the same order for the same answers, and a test can drive a plan
with scripted answers and no network (the shape of h11 and aioquic: the protocol knows what to
send next, the driver owns sockets and clocks).

httpx appears here only as data: responses are inspected and errors classified, nothing is sent.

The plans:

``refresh``  fetch the snapshot from the node URLs in turn (the last one that answered first)
             and install it; every URL failing is ``NoNodeReachableError``.
``poll``     one long-poll round of the background refresh (``GET /v1/placement?after=<etag>
             &wait=<s>``); every node down means a pause, then the shell polls again.
``request``  one request for a key: to its leader, or (``spread``, by default when idempotent)
             to each of its replicas in turn from a rotating start. Until the policy's total
             deadline (``RetryPolicy``; issue 30: what a careful caller did during rolling
             restarts, done here):
             * 421 (the node does not own the key: it took nothing): refresh, re-route, retry;
               at once the first time, after a backoff the next ones. Past the deadline the
               421 is the answer.
             * 503 with ``Retry-After`` (the owner cannot take it yet: a handoff, a node
               leaving): wait that long (capped) and retry; a 503 whose wait would end past the
               deadline is the answer.
             * no connection (``ConnectError``, ``ConnectTimeout``: nothing was sent): refresh
               and re-route, after a backoff unless the refresh moved the key; past the
               deadline ``NoReplicaReachableError``. Any request, as the node never saw it.
             * the connection failed after the request may have been sent (read errors, a
               dropped connection): an idempotent request goes on as above, any other one ends
               at once with ``OutcomeUnknownError`` (the caller cannot know whether the node
               acted on it; ``idempotent=True`` says that sending it again is safe).
             * another placement checksum in any other answer: refresh for the next requests;
               the answer is returned (a 2xx is never sent again; another status of an
               idempotent request is retried once on the new owners).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx

from ..errors import PlacementError, SnapshotError
from ..snapshot import PlacementSnapshot

MSGPACK = "application/msgpack"
CHECKSUM_HEADER = "X-Placement-Checksum"
OWNER_HEADER = "X-Placement-Owner"
PLACEMENT_PATH = "/v1/placement"
#: Pause of the background refresh while no node answers: retry, gently.
ALL_DOWN_RETRY_S = 1.0
#: A long-poll may take ``wait`` seconds to answer: its timeout is that much plus this margin.
LONG_POLL_MARGIN_S = 10.0


T = TypeVar("T")


class NoNodeReachableError(PlacementError):
    """None of the node URLs answered with a placement snapshot."""


class NoReplicaReachableError(PlacementError):
    """A request reached none of the nodes it may go to (its leader, or its replicas) before
    its deadline: nothing was delivered, or (idempotent requests) it is safe to send again."""


class OutcomeUnknownError(PlacementError):
    """A request not marked idempotent was sent, and its connection failed before an answer:
    the node may or may not have acted on it, so the client did not send it again."""


#: Errors by which httpx says the request was never sent (no connection was made).
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout)


@dataclass(frozen=True)
class RetryPolicy:
    """How long ``request`` keeps trying (module docstring).

    ``deadline_s``: total time from the first attempt after which no new attempt starts (it
    covers a crashed owner's detection and takeover, ~10 s with exclusive ownership; 0: no
    retries but the first 421's). ``max_retry_after_s``: the longest ``Retry-After`` obeyed at
    once (a longer one is cut to this). ``backoff_s`` .. ``max_backoff_s``: the pause before a
    retry after a connection error or a repeated 421, doubling."""

    deadline_s: float = 15.0
    max_retry_after_s: float = 5.0
    backoff_s: float = 0.05
    max_backoff_s: float = 1.0

    def __post_init__(self) -> None:
        if not (self.deadline_s >= 0 and self.max_retry_after_s >= 0 and 0 < self.backoff_s <= self.max_backoff_s):
            raise ValueError(f"invalid retry policy {self}")


@dataclass(frozen=True)
class Call:
    """Make this HTTP request: ``options`` are keyword arguments of httpx's ``request()``
    (headers, params, timeout, and whatever the caller passed: json, content...)."""

    method: str
    url: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Pause:
    """Wait this long before the next step (a shell being closed may end the wait early)."""

    seconds: float


@dataclass(frozen=True)
class Done(Generic[T]):
    """The plan returned ``value``: the operation's result."""

    value: T


Step = Call | Pause
#: A plan yields steps, is sent a response (None after a pause), and returns its result.
Plan = Generator[Step, httpx.Response | None, T]
#: What a step came to: a call's response or the error that stopped it; None after a pause.
Outcome = httpx.Response | httpx.HTTPError | None


def advance(plan: Plan[T], outcome: Outcome) -> Step | Done[T]:
    """Tell ``plan`` what its last step came to (None to start it); get its next step, or
    ``Done`` with its result. An error the plan does not handle propagates from here."""
    try:
        return plan.throw(outcome) if isinstance(outcome, httpx.HTTPError) else plan.send(outcome)
    except StopIteration as done:
        return Done(done.value)


def _answer(call: Call) -> Plan[httpx.Response]:
    """Yield ``call`` and return its response (``yield from`` keeps the plans free of Nones)."""
    response = yield call
    assert response is not None, "a shell answers a Call with a response or throws its error"
    return response


def normalise_urls(urls: str | Sequence[str]) -> list[str]:
    urls = [urls] if isinstance(urls, str) else list(urls)
    if not urls:
        raise PlacementError("give at least one node URL, e.g. http://127.0.0.1:8001")
    return [u.rstrip("/") for u in urls]


class ClientCore:
    """The state of one client - node URLs (the one that last answered first) and the current
    snapshot - and the plans that read and change it. Routing on the snapshot is local."""

    # Where the next idempotent request starts in its replica set (shared by the clients of a
    # process: spreading needs only a start that moves on).
    _spread = itertools.count()
    #: The current table's ``lookup`` (owners of a key, leader first), bound at ``install``.
    lookup: Callable[[str | bytes], tuple[str, ...]]

    def __init__(self, urls: str | Sequence[str], *, long_poll_s: float = 25.0, retry: RetryPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.urls = normalise_urls(urls)
        self.long_poll_s = long_poll_s
        self.retry = retry or RetryPolicy()
        self.clock = clock  # seconds, for the retry deadline (the shells' pauses run on it too)
        self._snapshot: PlacementSnapshot | None = None

    # ----- local routing on the current snapshot ------------------------------------------
    def install(self, snapshot: PlacementSnapshot) -> None:
        self._snapshot = snapshot
        self.lookup = snapshot.table.lookup  # bound once: the per-key hot path

    @property
    def snapshot(self) -> PlacementSnapshot:
        if self._snapshot is None:
            raise PlacementError("no placement snapshot yet: run the refresh plan first")
        return self._snapshot

    def targets(self, key: str | bytes, spread: bool) -> list[str]:
        """Base URLs to try in turn: the leader alone, or every replica from a rotating start
        (round robin over requests, as laminarmq spreads reads over the replica set)."""
        owners = self.lookup(key)
        if not spread:
            owners = owners[:1]
        elif len(owners) > 1:
            start = next(self._spread) % len(owners)
            owners = owners[start:] + owners[:start]
        return [self.snapshot.address(m) for m in owners]

    # ----- plans ------------------------------------------------------------------------
    def refresh(self, params: Mapping[str, Any] | None = None,
                timeout: float | None = None) -> Plan[PlacementSnapshot]:
        """Fetch the snapshot from the first node that answers with one, install it, return it.

        ``timeout`` None keeps the shell's own timeout. A node that answered is asked first
        next time, so one dead node costs a timeout once, not on every refresh."""
        options: dict[str, Any] = {}
        if params is not None:
            options["params"] = dict(params)
        if timeout is not None:
            options["timeout"] = timeout
        errors = []
        for url in list(self.urls):
            try:
                response = yield from _answer(Call("GET", f"{url}{PLACEMENT_PATH}", options))
                response.raise_for_status()
                snapshot = PlacementSnapshot.from_msgpack(response.content)
            except (httpx.HTTPError, SnapshotError) as exc:
                errors.append(f"{url}: {exc}")
                continue
            # One assignment: threads of a sync client may refresh at once (issue 30's benchmark).
            self.urls = [url, *(u for u in self.urls if u != url)]
            self.install(snapshot)
            return snapshot
        raise NoNodeReachableError("no node answered a placement request: " + "; ".join(errors))

    def poll(self) -> Plan[None]:
        """One round of the background refresh: long-poll for a snapshot other than ours."""
        params = {"after": self.snapshot.etag, "wait": self.long_poll_s}
        try:
            yield from self.refresh(params, timeout=self.long_poll_s + LONG_POLL_MARGIN_S)
        except NoNodeReachableError:
            yield Pause(ALL_DOWN_RETRY_S)

    def request(self, method: str, key: str | bytes, path: str, *, idempotent: bool = False,
                spread: bool | None = None, retry: RetryPolicy | None = None,
                **kwargs: Any) -> Plan[httpx.Response]:
        """One request for ``key`` (module docstring): its response, retried under ``retry``
        (default: the core's policy). ``spread`` (default ``idempotent``): any replica may
        answer, else the leader alone (e.g. an endpoint guarded by ``require_ownership``).

        ``kwargs`` go to httpx as they are, plus the checksum of the placement the request was
        routed with (``X-Placement-Checksum``), by which the node tells a stale client."""
        policy = retry or self.retry
        spread = idempotent if spread is None else spread
        deadline = self.clock() + policy.deadline_s
        backoff = policy.backoff_s
        misdirected = stale_retried = False
        while True:
            errors: list[str] = []
            response: httpx.Response | None = None
            checksum = self.snapshot.checksum
            for url in self.targets(key, spread):
                if not url:
                    errors.append("a replica without an HTTP address")
                    continue
                headers = {**kwargs.get("headers", {}), CHECKSUM_HEADER: checksum}
                try:
                    response = yield from _answer(Call(method, f"{url}{path}", {**kwargs, "headers": headers}))
                except httpx.TransportError as exc:
                    if not idempotent and not isinstance(exc, NOT_SENT):
                        raise OutcomeUnknownError(
                            f"{method} {url}{path} for {key!r}: {type(exc).__name__}: {exc}; the node may or may "
                            "not have acted on it, so it was not sent again (pass idempotent=True to requests "
                            "that are safe to send twice)") from exc
                    errors.append(f"{url}: {type(exc).__name__}: {exc}")
                    continue
                break
            if response is None:  # nobody took it (no connection, or an idempotent request lost)
                what = "the replicas" if spread else "the leader"
                if self.clock() + backoff > deadline:
                    raise NoReplicaReachableError(f"no answer from {what} of {key!r} within "
                                                  f"{policy.deadline_s:g} s: " + "; ".join(errors))
                if not (yield from self._refreshed_moves(key, spread)):
                    yield Pause(backoff)
                backoff = min(2 * backoff, policy.max_backoff_s)
                continue
            if response.status_code == 421:
                if misdirected:  # again: let the cluster settle a little before asking again
                    if self.clock() + backoff > deadline:
                        return response
                    yield Pause(backoff)
                    backoff = min(2 * backoff, policy.max_backoff_s)
                misdirected = True
                yield from self.refresh()
                continue
            wait = _retry_after(response) if response.status_code == 503 else None
            if wait is not None:
                wait = max(policy.backoff_s, min(wait, policy.max_retry_after_s))
                if self.clock() + wait > deadline:
                    return response
                yield Pause(wait)
                continue
            if not _stale(response, checksum):
                return response
            yield from self.refresh()  # for the next requests
            if response.is_success or not idempotent or stale_retried:
                return response
            stale_retried = True

    def _refreshed_moves(self, key: str | bytes, spread: bool) -> Plan[bool]:
        """Refresh (a failure is no error here: the request goes on until its deadline); True if
        the key's targets changed, so that the retry need not wait."""
        def where() -> list[str]:
            return [self.snapshot.address(m) for m in self.lookup(key)[:None if spread else 1]]

        before = where()
        try:
            yield from self.refresh()
        except NoNodeReachableError:
            return False
        return where() != before


def _retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (RFC 9110 10.2.3: delta-seconds; an HTTP date is not used here),
    or None when absent or not a number."""
    value = response.headers.get("retry-after")
    try:
        return None if value is None else max(0.0, float(value))
    except ValueError:
        return None


def _stale(response: httpx.Response, checksum: str) -> bool:
    """The node says the request was routed with an old placement: 421, or another checksum."""
    seen = response.headers.get(CHECKSUM_HEADER)
    return response.status_code == 421 or (seen is not None and seen != checksum)


class RoutingView:
    """The routing questions both shells answer from their core's snapshot, with no I/O."""

    _core: ClientCore

    @property
    def snapshot(self) -> PlacementSnapshot:
        return self._core.snapshot

    @property
    def checksum(self) -> str:
        return self._core.snapshot.checksum

    def owner(self, key: str | bytes) -> str:
        """Leader of the key's partition."""
        return self._core.lookup(key)[0]  # the core's bound lookup: no extra call per key

    def owners(self, key: str | bytes, k: int | None = None) -> tuple[str, ...]:
        """Replica set of the key's partition (first ``k``), leader first."""
        return self._core.lookup(key)[:k]

    def owner_url(self, key: str | bytes) -> str:
        return self._core.snapshot.address(self._core.lookup(key)[0])

    def route(self, keys: Iterable[str | bytes]) -> dict[str, list[str | bytes]]:
        """Keys grouped by their leader (vectorised)."""
        return self._core.snapshot.table.route(keys)
