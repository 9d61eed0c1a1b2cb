"""``AsyncPlacementClient``: the client core (``placement.client.core``) run with ``httpx.AsyncClient``.

This module only performs I/O: it carries out the steps the core's plans yield, and keeps the
snapshot fresh from an asyncio task. What to send where, and what an answer means, is decided
in the core, once for this client and the synchronous one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any, TypeVar

import httpx

from ..snapshot import PlacementSnapshot
from .core import MSGPACK, Call, ClientCore, Done, Outcome, Plan, RetryPolicy, RoutingView, advance

T = TypeVar("T")


class AsyncPlacementClient(RoutingView):
    """asyncio client (httpx). Create with ``await AsyncPlacementClient.connect(urls)``."""

    def __init__(self, urls: str | Sequence[str], *, long_poll_s: float = 25.0, timeout_s: float = 5.0,
                 transport: httpx.AsyncBaseTransport | None = None, retry: RetryPolicy | None = None) -> None:
        self._core = ClientCore(urls, long_poll_s=long_poll_s, retry=retry)
        self._http = httpx.AsyncClient(timeout=timeout_s, transport=transport, headers={"Accept": MSGPACK})
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def connect(cls, urls: str | Sequence[str], *, refresh: bool = True, **kwargs: Any) -> AsyncPlacementClient:
        client = cls(urls, **kwargs)
        await client.refresh()
        if refresh:
            client._task = asyncio.create_task(client._refresh_loop(), name="placement-refresh")
        return client

    async def _run(self, plan: Plan[T]) -> T:
        """Carry out ``plan``'s steps until it returns (or raises)."""
        outcome: Outcome = None
        while not isinstance(step := advance(plan, outcome), Done):
            if isinstance(step, Call):
                try:
                    outcome = await self._http.request(step.method, step.url, **step.options)
                except httpx.HTTPError as exc:
                    outcome = exc
            else:
                await asyncio.sleep(step.seconds)
                outcome = None
        return step.value

    async def refresh(self) -> PlacementSnapshot:
        """Fetch the snapshot now."""
        return await self._run(self._core.refresh())

    async def _refresh_loop(self) -> None:
        while True:  # until aclose() cancels it
            await self._run(self._core.poll())

    async def request(self, method: str, key: str | bytes, path: str, *, idempotent: bool = False,
                      spread: bool | None = None, retry: RetryPolicy | None = None, **kwargs: Any) -> httpx.Response:
        """As ``PlacementClient.request``."""
        return await self._run(self._core.request(method, key, path, idempotent=idempotent, spread=spread,
                                                  retry=retry, **kwargs))

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._http.aclose()

    async def __aenter__(self) -> AsyncPlacementClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
