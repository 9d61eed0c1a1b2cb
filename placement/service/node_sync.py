"""A node for programs that do not run asyncio (threads, Celery, Django, Flask): issue 15.

``NodeThread`` runs a ``Node`` on an event loop of its own, in a daemon thread; the node's
membership and leases run on a second thread (``placement.service.node_thread``), so neither a busy
program nor a slow callback makes the node look dead::

    with NodeThread(NodeConfig("worker-1", join=(("10.0.0.4", 7001),))) as node:
        node.on_ownership(acquired=start_partition, released=stop_partition)   # plain functions
        while running:
            for p in node.owned_partitions(): ...
            if node.may_work(p, node.grant(p).epoch): write(p, fence=node.grant(p).epoch)

Callbacks run on the node's loop thread, one at a time, in order: ``released`` may block to
drain (up to ``handoff_timeout_s``, after which ownership ends anyway) and what it returns
travels to the next owner as its ``grant(p).payload``. The reads (``owns``, ``owned_partitions``,
``may_work``, ``grant``, ``members``) are safe from any thread: they read immutable snapshots.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from membership import MemberInfo

from .node import Listener, Node, NodeConfig
from .node_ownership import Grant

__all__ = ["NodeThread"]

T = TypeVar("T")


class NodeThread:
    """A started ``Node`` driven from synchronous code (see the module docstring)."""

    def __init__(self, config: NodeConfig) -> None:
        self.node = Node(config)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=f"placement-node-{config.node_id}",
                                        daemon=True)
        self._callbacks: list[tuple[Listener | None, Listener | None]] = []
        self._started = False

    # ----- lifecycle --------------------------------------------------------------------
    def start(self, timeout_s: float = 30.0) -> NodeThread:
        """Start the node (binds the gossip socket, joins); raises what ``Node.start`` raises."""
        if self._started:
            return self
        self._thread.start()
        try:
            self._run(self._start(), timeout_s)
        except BaseException:
            self._stop_loop()
            raise
        self._started = True
        return self

    async def _start(self) -> None:
        for acquired, released in self._callbacks:  # registered before start: see the founder's acquisitions
            self.node.on_ownership(acquired, released)
        await self.node.start()

    def leave(self, timeout_s: float = 2.0) -> None:
        """Graceful leave: release (drain) every partition, announce the leave, stop."""
        if self._started:
            budget = self.node.config.exclusive.handoff_timeout_s + 2 * timeout_s + 5.0
            try:
                self._run(self.node.leave(timeout_s), budget)
            finally:
                self._stop_loop()

    def close(self) -> None:
        """Abrupt stop, as if the process died."""
        if self._started and not self.loop.is_closed():
            self._run(self._close(), 10.0)
        self._stop_loop()

    async def _close(self) -> None:
        self.node.close()

    def __enter__(self) -> NodeThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.leave()

    # ----- callbacks --------------------------------------------------------------------
    def on_ownership(self, acquired: Listener | None = None, released: Listener | None = None) -> None:
        """Register ``acquired(partition)`` / ``released(partition)`` (plain functions; they run
        on the node's loop thread). Before ``start`` they also see the first acquisitions."""
        if not self._started:
            self._callbacks.append((acquired, released))
            return

        async def register() -> None:
            self.node.on_ownership(acquired, released)

        self._run(register(), 10.0)

    # ----- reads (any thread) -------------------------------------------------------------
    def owns(self, key: str | bytes) -> bool:
        return self.node.owns(key)

    def owned_partitions(self) -> frozenset[int]:
        return self.node.owned_partitions()

    def may_work(self, partition: int, epoch: int = 0) -> bool:
        return self.node.may_work(partition, epoch)

    def grant(self, partition: int) -> Grant | None:
        return self.node.grant(partition)

    def members(self) -> list[MemberInfo]:
        return self.node.members()

    @property
    def paused(self) -> str | None:
        return self.node.paused

    @property
    def app_loop_lag_s(self) -> float:
        return self.node.app_loop_lag_s

    # ----- internals ----------------------------------------------------------------------
    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("NodeThread: call this from another thread, not from a callback")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"node {self.node.node_id}: no answer from its loop within {timeout_s} s") from None

    def _stop_loop(self) -> None:
        if self.loop.is_closed():
            return
        if self._thread.ident is None:  # never started
            self.loop.close()
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(10.0)
            if not self._thread.is_alive():
                self.loop.close()
