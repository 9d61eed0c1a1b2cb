"""The exclusive-ownership core (``placement.exclusive``) run for real, inside a ``Node``.

The rules live in the pure core; this module only carries them out, the way the simulator's
``SwimNode`` does under a simulated clock: it feeds the core the live view, the handoff
datagrams and ``loop.time()``; it sends what the core asks for on the gossip socket (sealed
with the gossip keys, ``placement.handoff_wire``); and it turns the core's actions into calls
of the application's handlers:

* ``Acquired`` -> the node's ``acquired`` handlers (with the fencing epoch and the previous
  owner's payload in ``Grant``);
* ``Release`` -> the ``released`` handlers. A handler may return an awaitable (an ``async def``
  handler does): the partition is handed on once it completes, and what it returns (a
  checkpoint, an offset) travels to the next owner in the note. It is cancelled at the
  release deadline, after which ownership ends anyway;
* ``Ended`` without a ``Release`` first (the lease ran out, the cluster declared this node
  dead) -> the ``released`` handlers too, at once: the partition may already be someone else's.

What this module must not do is decide anything: no timer here changes who owns what.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from membership import MemberInfo
from membership.aio import Member
from membership.wire import Keyring

from . import handoff_wire
from .exclusive import Acquired, Ended, ExclusiveConfig, Ownership, Release
from .table import PlacementTable, TableConfig

__all__ = ["Grant", "ExclusiveRunner"]

_log = logging.getLogger("placement.node")


@dataclass(frozen=True)
class Grant:
    """One ownership of a partition: write with ``epoch`` as the fencing token (a store that
    keeps the highest epoch per partition refuses a stale writer); ``payload`` is what the
    previous owner's release handler returned (None after a takeover from a dead owner)."""

    partition: int
    epoch: int
    payload: Any
    since: float  # time.time() when acquired (for display only: clocks are not compared)


@dataclass
class _Hooks:
    acquired: Callable[[Grant], None]
    releasing: Callable[[int, str], list[Any]]  # calls the handlers, returns their results
    ended: Callable[[int], None]


class ExclusiveRunner:
    """Drives one ``Ownership`` with the real clock; see the module docstring."""

    def __init__(self, node_id: str, config: ExclusiveConfig, table_config: TableConfig, *, founder: bool,
                 member: Member, cluster: str, keys: tuple[bytes, ...], hooks: _Hooks) -> None:
        self._loop = asyncio.get_running_loop()
        self._member = member
        self._cluster = cluster
        self._keyring = Keyring(keys) if keys else None
        self._table_config = table_config
        self._table: PlacementTable | None = None
        self._table_view: dict[str, float] = {}
        self._hooks = hooks
        self.own = Ownership(node_id, config, self._table_of, self._loop.time(), founder=founder)
        self.grants: dict[int, Grant] = {}
        self._draining: dict[int, asyncio.Task] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._left = asyncio.Event()
        self.dropped: dict[str, int] = {"malformed": 0}
        self.sent = 0
        self.no_address = 0
        self.closed = False
        member.add_channel(handoff_wire.MAGIC, self._datagram)

    # ------------------------------------------------------------------ inputs

    def set_view(self, live: list[MemberInfo]) -> None:
        if self.closed:
            return
        view = {m.node_id: m.meta.weight for m in live}
        suspects = [m.node_id for m in live if m.status == "suspect"]
        self.own.set_view(view, suspects, self._loop.time())
        self._drive()

    def declared_dead(self) -> None:
        if not self.closed:
            self.own.declared_dead(self._loop.time())
            self._drive()

    async def leave(self, timeout_s: float) -> bool:
        """Release everything with handoffs; True once all notes were acknowledged."""
        self.own.leave(self._loop.time())
        self._drive()
        try:
            await asyncio.wait_for(self._left.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        for task in self._draining.values():
            task.cancel()

    def _datagram(self, data: bytes, addr: tuple[str, int]) -> None:
        decoded = handoff_wire.decode_many(data, cluster=self._cluster, keyring=self._keyring)
        if decoded is None:
            self.dropped["malformed"] += 1  # garbage, another cluster, or not sealed with our keys
            return
        if not self.closed:
            self.own.receive_many(decoded[0], decoded[1], self._loop.time())
            self._drive()

    def _tick(self) -> None:
        self._timer = self._timer_at = None
        if not self.closed:
            self.own.handle_timer(self._loop.time())
            self._drive()

    # ------------------------------------------------------------------ state

    def owned_now(self) -> frozenset[int]:
        """Partitions this node may start work on: owned, not being released, lease valid."""
        own = self.own
        if self._loop.time() >= own.valid_until:
            return frozenset()
        return frozenset(p for p, o in own.owned.items() if not o.releasing)

    def holds(self, partition: int, epoch: int) -> bool:
        """Still owned at ``epoch`` (also while draining), under a lease valid now."""
        o = self.own.owned.get(partition)
        return o is not None and o.epoch == epoch and self._loop.time() < self.own.valid_until

    def release_deadline(self, partition: int) -> float | None:
        o = self.own.owned.get(partition)
        return o.deadline if o is not None and o.releasing else None

    def releasing(self) -> frozenset[int]:
        return frozenset(p for p, o in self.own.owned.items() if o.releasing)

    def status(self) -> dict[str, Any]:
        own, now = self.own, self._loop.time()
        return {
            "owned": len(self.owned_now()),
            "releasing": len(self.releasing()),
            "waiting": len(own.waiting),
            "lease_valid_for_s": max(0.0, own.valid_until - now),
            "fenced": own.fenced_reason,
            "stable_members": len(own.lease.stable),
            "witnesses": list(own.lease.witnesses),
            "counters": dataclasses.asdict(own.counters),
            "dropped": self.dropped["malformed"],
        }

    # ------------------------------------------------------------------ outputs

    def _table_of(self, view: Mapping[str, float]) -> PlacementTable:
        old = self._table
        if old is not None and self._table_view == view:
            return old
        self._table_view = dict(view)
        self._table = (old.with_members(self._table_view) if old is not None
                       else PlacementTable.from_config(self._table_config, self._table_view))
        return self._table

    def _drive(self) -> None:
        own, now = self.own, self._loop.time()
        while True:
            done: list[tuple[int, Any]] = []  # released at once (no awaitable handler)
            for action in own.actions():
                if isinstance(action, Acquired):
                    grant = Grant(action.partition, action.epoch, action.payload, time.time())
                    self.grants[action.partition] = grant
                    self._hooks.acquired(grant)
                elif isinstance(action, Release):
                    self._start_release(action, done)
                elif isinstance(action, Ended):
                    self._ended(action)
            if not done:
                break
            own.releases_done(done, now)  # the rules run once for all of them
        by_dst: dict[str, list[Any]] = {}
        for dst, msg in own.messages(now):
            by_dst.setdefault(dst, []).append(msg)
        if by_dst:
            addresses = {m.node_id: m.addr for m in self._member.members()}
            for dst, msgs in by_dst.items():
                addr = addresses.get(dst)
                if addr is None:
                    self.no_address += 1  # not (yet) in our member list: resent while it matters
                    continue
                for data in handoff_wire.encode_many(own.me, msgs, cluster=self._cluster, keyring=self._keyring):
                    self._member.send_datagram(data, addr)
                    self.sent += 1
        if own.left_ready:
            self._left.set()
        due = own.get_timer()
        if self._timer_at is None or due < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = due
            self._timer = self._loop.call_at(due, self._tick)

    def _start_release(self, action: Release, done: list[tuple[int, Any]]) -> None:
        p = action.partition
        if p in self._draining:
            return  # already draining (an earlier deadline only shortens what the core waits)
        results = self._hooks.releasing(p, action.reason)
        pending = [r for r in results if inspect.isawaitable(r)]
        if not pending:
            done.append((p, next((r for r in results if r is not None), None)))
            return
        epoch = self.own.owned[p].epoch
        self._draining[p] = asyncio.ensure_future(self._drain(p, epoch, pending))

    async def _drain(self, p: int, epoch: int, pending: list[Awaitable[Any]]) -> None:
        payload = None
        try:
            for result in await asyncio.gather(*pending, return_exceptions=True):
                if isinstance(result, BaseException):
                    if isinstance(result, asyncio.CancelledError):
                        raise result
                    _log.error("released handler for partition %d raised %r (handing it on anyway)", p, result)
                elif payload is None:
                    payload = result
        finally:
            self._draining.pop(p, None)
        o = self.own.owned.get(p)
        if not self.closed and o is not None and o.epoch == epoch:
            self.own.release_done(p, self._loop.time(), payload)
            self._drive()

    def _ended(self, action: Ended) -> None:
        p = action.partition
        self.grants.pop(p, None)
        task = self._draining.pop(p, None)
        if task is not None:  # the deadline passed: ownership is over, stop the drain
            task.cancel()
            _log.warning("partition %d: release did not finish before its deadline; ownership ended "
                         "and its handler was cancelled", p)
        self._hooks.ended(p)
