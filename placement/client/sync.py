"""``PlacementClient``: the client core (``placement.client.core``) run with ``httpx.Client``.

This module only performs I/O: it carries out the steps the core's plans yield, and keeps the
snapshot fresh from a daemon thread. What to send where, and what an answer means, is decided
in the core, once for this client and the asyncio one.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, TypeVar

import httpx

from ..snapshot import PlacementSnapshot
from .core import MSGPACK, Call, ClientCore, Done, Outcome, Plan, RetryPolicy, RoutingView, advance

T = TypeVar("T")


class PlacementClient(RoutingView):
    """Synchronous client (httpx). Thread-safe for lookups; refreshes in a daemon thread."""

    def __init__(self, urls: str | Sequence[str], *, refresh: bool = True, long_poll_s: float = 25.0,
                 timeout_s: float = 5.0, transport: httpx.BaseTransport | None = None,
                 retry: RetryPolicy | None = None) -> None:
        self._core = ClientCore(urls, long_poll_s=long_poll_s, retry=retry)
        self._http = httpx.Client(timeout=timeout_s, transport=transport, headers={"Accept": MSGPACK})
        self._stop = threading.Event()
        self._run(self._core.refresh())
        self._thread: threading.Thread | None = None
        if refresh:
            self._thread = threading.Thread(target=self._refresh_loop, name="placement-refresh", daemon=True)
            self._thread.start()

    def _run(self, plan: Plan[T]) -> T:
        """Carry out ``plan``'s steps until it returns (or raises)."""
        outcome: Outcome = None
        while not isinstance(step := advance(plan, outcome), Done):
            if isinstance(step, Call):
                try:
                    outcome = self._http.request(step.method, step.url, **step.options)
                except httpx.HTTPError as exc:
                    outcome = exc
            else:
                self._stop.wait(step.seconds)  # close() ends the pause at once
                outcome = None
        return step.value

    def refresh(self) -> PlacementSnapshot:
        """Fetch the snapshot now."""
        return self._run(self._core.refresh())

    def _refresh_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._run(self._core.poll())
            except RuntimeError:  # httpx: the client was closed under a pending long-poll
                if not self._stop.is_set():
                    raise

    def request(self, method: str, key: str | bytes, path: str, *, idempotent: bool = False,
                spread: bool | None = None, retry: RetryPolicy | None = None, **kwargs: Any) -> httpx.Response:
        """Send a request for ``key``: to its leader, or (``spread``, by default ``idempotent``) to
        any of its replicas, failing over to the next. Retried until ``retry``'s deadline (default:
        the client's ``RetryPolicy``): after a 421 (refreshed), a 503 with ``Retry-After``, no
        connection; after a lost connection only when ``idempotent`` (else ``OutcomeUnknownError``).
        Rules: ``placement.client.core``."""
        return self._run(self._core.request(method, key, path, idempotent=idempotent, spread=spread, retry=retry,
                                            **kwargs))

    def close(self) -> None:
        self._stop.set()
        self._http.close()

    def __enter__(self) -> PlacementClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
