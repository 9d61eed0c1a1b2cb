"""One task per owned partition: the partition-worker API (issue 11, item 5).

What Azure's EventProcessorHost gives its users (``IEventProcessor``: open, process events, close
with a reason; a checkpoint the next owner resumes from), on top of the node's ownership events
instead of blob leases. Subclass ``PartitionProcessor``, hand a factory to
``PartitionWorkers(node, factory)``, and every partition the node owns runs::

    await processor.open(ctx)      # ctx.epoch: fencing token; ctx.payload: the previous owner's checkpoint
    await processor.process(ctx)   # until ctx.stopping is set; check ctx.owned() before each unit of work
    await processor.close(ctx, reason)  # what it returns (default ctx.checkpoint) goes to the next owner

Why each piece (docs/ownership.md has the rules behind them):

* ``close`` runs *before* the next owner's ``open``: in exclusive mode the node hands the partition
  on only after the drain finished (or ``handoff_timeout_s`` passed, when the task is cancelled
  and ownership ends anyway).
* ``ctx.owned()`` is the check "before each unit of work": it turns False the moment the quorum
  lease runs out, even when the event loop was frozen and no callback has run yet. A write that
  started before and finishes after is what ``ctx.epoch`` is for: give it to the store, which
  keeps the highest epoch per partition and refuses older ones.
* When ownership ends without a drain (the lease ran out, the cluster declared this node dead)
  the task is cancelled at once and ``close(ctx, "lost")`` runs for cleanup only: the partition
  may already be someone else's, so it must not write, and its result goes nowhere.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .background import detach

if TYPE_CHECKING:
    from .node import Node

__all__ = ["PartitionContext", "PartitionProcessor", "PartitionWorkers"]

_log = logging.getLogger("placement.workers")


@dataclass
class PartitionContext:
    """What a processor knows about its partition. Set ``checkpoint`` as work progresses: it is
    the default handoff payload."""

    partition: int
    epoch: int
    payload: Any  # left by the previous owner's close (None after a takeover from a dead owner)
    _node: Node = field(repr=False)
    checkpoint: Any = None
    #: Set when the partition is being released: finish the current unit, then return.
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def node_id(self) -> str:
        return self._node.node_id

    def owned(self) -> bool:
        """May work go on now? (lease valid and partition still held - also while draining)."""
        return self._node.may_work(self.partition, self.epoch)

    def record_load(self, units: float = 1.0) -> None:
        """Say that ``units`` of work were done on this partition (``Node.record_load``)."""
        self._node.record_load(self.partition, units)

    @property
    def deadline(self) -> float | None:
        """Loop time (``loop.time()``) by which a drain must end; None until ``stopping``."""
        return self._node.release_deadline(self.partition) if self.stopping.is_set() else None


class PartitionProcessor:
    """Override ``process`` (and ``open``/``close`` if needed). One instance per ownership."""

    async def open(self, ctx: PartitionContext) -> None:
        """Called first, with the epoch and the previous owner's payload."""

    async def process(self, ctx: PartitionContext) -> None:
        """Run until ``ctx.stopping`` is set (or return early: the partition stays owned)."""
        raise NotImplementedError

    async def close(self, ctx: PartitionContext, reason: str) -> Any:
        """``reason``: "released" (handed on: the result is the handoff payload) or "lost"
        (ownership ended without a drain: clean up, write nothing)."""
        return ctx.checkpoint


@dataclass
class _Run:
    processor: PartitionProcessor
    ctx: PartitionContext
    task: asyncio.Task


class PartitionWorkers:
    """Runs a ``PartitionProcessor`` from ``factory()`` for every partition ``node`` owns."""

    def __init__(self, node: Node, factory: Callable[[], PartitionProcessor]) -> None:
        self._node = node
        self._factory = factory
        self._runs: dict[int, _Run] = {}
        self.errors = 0  # exceptions raised by processors (logged, never fatal to the node)
        self.closed = False
        node.on_ownership(acquired=self._acquired, released=self._released)
        for p in sorted(node.owned_partitions()):  # owned before we were attached
            self._acquired(p)

    def running(self) -> frozenset[int]:
        return frozenset(self._runs)

    def _acquired(self, partition: int) -> None:
        if self.closed or partition in self._runs:
            return
        grant = self._node.grant(partition)
        epoch, payload = (grant.epoch, grant.payload) if grant is not None else (0, None)
        ctx = PartitionContext(partition, epoch, payload, self._node)
        processor = self._factory()
        task = asyncio.ensure_future(self._run(processor, ctx))
        self._runs[partition] = _Run(processor, ctx, task)

    async def _run(self, processor: PartitionProcessor, ctx: PartitionContext) -> None:
        try:
            await processor.open(ctx)
            await processor.process(ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            self._error("processing", ctx.partition)

    def _released(self, partition: int) -> Any:
        run = self._runs.pop(partition, None)
        if run is None:
            return None
        if self._node.config.ownership != "exclusive" or partition in self._node.releasing_partitions():
            drain = self._drain(run)
            if self._node.config.ownership == "exclusive":
                return drain  # the node awaits it, then hands the partition on with its result
            detach(drain)  # available mode waits for nobody
            return None
        run.task.cancel()  # ended without a drain: stop at once
        detach(self._close(run, "lost"))
        return None

    async def _drain(self, run: _Run) -> Any:
        run.ctx.stopping.set()
        try:
            await asyncio.shield(run.task)
        except asyncio.CancelledError:
            run.task.cancel()  # the node's drain deadline passed: ownership is over
            detach(self._close(run, "lost"))
            raise
        except Exception:
            pass  # already counted in _run
        return await self._close(run, "released")

    async def _close(self, run: _Run, reason: str) -> Any:
        try:
            return await run.processor.close(run.ctx, reason)
        except asyncio.CancelledError:
            raise
        except Exception:
            self._error(f"close ({reason})", run.ctx.partition)
            return None

    def _error(self, what: str, partition: int) -> None:
        self.errors += 1
        _log.exception("partition processor raised in %s of partition %d (the node carries on)", what, partition)

    async def close(self) -> None:
        """Stop every processor (cancel, then ``close(ctx, "lost")``) and take no new ones."""
        self.closed = True
        runs, self._runs = list(self._runs.values()), {}
        for run in runs:
            run.task.cancel()
        for run in runs:
            await self._close(run, "lost")
