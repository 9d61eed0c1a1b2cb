"""The exclusive-ownership core (``ownership.core``) run for real, inside a ``Node``.

It runs on the node's membership thread (``placement.service.node_thread``), beside the gossip member, so
lease renewals and witness answers go on while the application's loop is blocked; the
application's handlers run on the application's loop, reached through ``_Hooks``.

The rules live in the pure core; this module only carries them out, the way the simulator's
``SwimNode`` does under a simulated clock: it feeds the core the live view, the handoff
datagrams and ``loop.time()``; it sends what the core asks for on the gossip socket (sealed
with the gossip keys, ``ownership.wire``); and it turns the core's actions into calls
of the application's handlers:

* ``Acquired`` -> the node's ``acquired`` handlers (with the fencing epoch and the previous
  owner's payload in ``Grant``);
* ``Release`` -> the ``released`` handlers, on the application's loop. A handler may return an
  awaitable (an ``async def`` handler does): the partition is handed on once it completes, and
  what it returns (a checkpoint, an offset) travels to the next owner in the note. ``_Hooks.release``
  gives the runner one awaitable for all of that; it is cancelled at the release deadline, after
  which ownership ends anyway;
* ``Ended`` without a ``Release`` first (the lease ran out, the cluster declared this node
  dead) -> the ``released`` handlers too, at once: the partition may already be someone else's.

What this module must not do is decide anything: no timer here changes who owns what.

The application thread reads what this node holds from ``holding``, an immutable ``Holding``
replaced (one reference store) after every change, never from the core's dicts, which this
thread mutates. Its ``valid_until`` is on ``time.monotonic()``, the clock of asyncio's loops, so
``may_work`` turns False the instant the lease lapses, whatever either loop is doing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from membership import MemberInfo
from membership.aio import Member
from membership.wire import Keyring
from ownership import Acquired, Ended, ExclusiveConfig, Ownership, Release, wire
from ownership.driver import MemberOwnership
from ownership.lease import WitnessState
from ownership.protocol import OwnershipProtocol
from ownership.views import View

from ..table import PlacementTable, TableConfig
from .members_file import MembersFile
from .witness_state import StateFile

__all__ = ["Grant", "ExclusiveRunner", "Holding"]

_log = logging.getLogger("placement.node")
_survival_log = logging.getLogger("placement.survival")  # (how a cluster forms: shown by ``placement node``)
#: 2020-01-01 UTC: a founder numbers its first view by the seconds since, so that the fencing
#: epochs of a cluster founded anew (after every member restarted without ``--state-dir``)
#: are above those of the cluster before it (``ownership.core``, rule 11).
_FIRST_VIEW_ORIGIN = 1577836800


@dataclass(frozen=True)
class Grant:
    """One ownership of a partition: write with ``epoch`` as the fencing token (a store that
    keeps the highest epoch per partition refuses a stale writer); ``payload`` is what the
    previous owner's release handler returned (None after a takeover from a dead owner)."""

    partition: int
    epoch: int
    payload: Any
    since: float  # time.time() when acquired (for display only: clocks are not compared)


@dataclass(frozen=True)
class Holding:
    """What this node holds, as published for other threads (never mutated once published)."""

    valid_until: float = 0.0  # time.monotonic() at which the quorum lease ends
    grants: Mapping[int, Grant] = field(default_factory=dict)  # every partition held, draining included
    releasing: Mapping[int, float] = field(default_factory=dict)  # partition -> drain deadline
    owned: frozenset[int] = frozenset()  # held and not being released

    def valid(self) -> bool:
        return time.monotonic() < self.valid_until


@dataclass
class _Hooks:
    """Called on the runner's thread; each reaches the application's loop."""

    acquired: Callable[[Grant], None]
    release: Callable[[int, str], Awaitable[Any]]  # runs the handlers; resolves to the payload
    ended: Callable[[int], None]
    view: Callable[[View], None] | None = None  # a new stable view was installed (its own object)


class ExclusiveRunner:
    """Drives one ``Ownership`` with the real clock; see the module docstring."""

    def __init__(self, node_id: str, config: ExclusiveConfig, table_config: TableConfig, *, founder: bool,
                 member: Member, cluster: str, keys: tuple[bytes, ...], hooks: _Hooks, weight: float = 1.0,
                 state_file: StateFile | None = None, restored: WitnessState | None = None,
                 members_file: MembersFile | None = None, may_found: bool = False,
                 restored_yields: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        self._member = member
        self._cluster = cluster
        self._keyring = Keyring(keys) if keys else None
        self._table_config = table_config
        self._table: PlacementTable | None = None
        self._table_view: dict[str, float] = {}
        self._table_pins: dict[int, str] = {}
        self._hooks = hooks
        # A founder draws the cluster's incarnation (``ownership.views.View.inc``): a cluster
        # founded anew under the same name is then told apart from the old one.
        own = Ownership(node_id, config, self._table_of, self._loop.time(), founder=founder, weight=weight,
                        restored=restored, incarnation=secrets.randbits(61) + 1, may_found=may_found,
                        first_view=max(1, int(time.time()) - _FIRST_VIEW_ORIGIN), restored_yields=restored_yields)
        #: ``--state-dir``: the witness's promises are written there before anything produced
        #: after a change is sent (``placement.service.witness_state``).
        self._state_file = state_file
        #: Where the members this node knows are kept, so that started again without ``--join``
        #: it rejoins them (``placement.service.members_file``).
        self._members_file = members_file
        #: The rules in membership's shape, joined to the gossip member's core (view feed,
        #: addresses, leave) as the simulator joins them (``ownership.driver``).
        self.glue = MemberOwnership(OwnershipProtocol(own, cluster=cluster, keyring=self._keyring,
                                                      persist=None if state_file is None else self._persist),
                                    member.core)
        self.state_write_errors = 0
        self._older_told = 0
        self._foreign_told = 0
        self._grants: dict[int, Grant] = {}
        self.holding = Holding()
        # Actions not yet carried out: they wait for one ``holding`` rebuild per loop iteration
        # (a handoff of 1,000 partitions ends in 1,000 release_done calls; rebuilding after each
        # was quadratic), then reach the handlers in order, after the state they may read.
        self._unpublished: list[Acquired | Release | Ended] = []
        self._flush_handle: asyncio.Handle | None = None
        self._draining: dict[int, asyncio.Task] = {}
        self._released: list[tuple[int, int, Any]] = []  # (partition, epoch, payload) drained, not yet told
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._left = asyncio.Event()
        self._view: View | None = None  # the stable view last told to ``hooks.view``
        self.closed = False
        member.add_channel(wire.MAGIC, self._datagram)

    @property
    def own(self) -> Ownership:
        """The rules' state (``glue.core``), to read."""
        return self.glue.core

    # ------------------------------------------------------------------ inputs

    def set_view(self, live: list[MemberInfo]) -> None:
        if self.closed:
            return
        if self._members_file is not None:
            self._members_file.note(((m.node_id, m.addr) for m in live), self._loop.time())
        self.glue.feed_view(self._loop.time(), live)
        self._drive()

    def set_loads(self, codes: bytes, at_s: int) -> None:
        """The load figures gathered for the whole cluster (``load_balance``): views this node
        proposes commit them (rule 12). On the membership thread."""
        if not self.closed:
            self.glue.set_loads(codes, at_s, self._loop.time())
            self._drive()

    def set_pins(self, pins: bytes, base: bytes, loads_at: int) -> None:
        """Pins this node's balancer planned from a stable view (rule 13). On the membership thread."""
        if not self.closed:
            self.glue.set_pins(pins, base, loads_at, self._loop.time())
            self._drive()

    def declared_dead(self) -> None:
        if not self.closed:
            self.glue.declared_dead(self._loop.time())
            self._drive()

    async def leave(self, timeout_s: float) -> bool:
        """Release everything with handoffs; True once all notes were acknowledged."""
        self.glue.leave(self._loop.time())
        self._drive()
        try:
            await asyncio.wait_for(self._left.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        self.closed = True
        for handle in (self._timer, self._flush_handle):
            if handle is not None:
                handle.cancel()
        for task in self._draining.values():
            task.cancel()

    def _datagram(self, data: bytes, addr: tuple[str, int]) -> None:
        if not self.closed:
            self.glue.receive_datagram(data, self._loop.time())
            self._drive()

    def _tick(self) -> None:
        self._timer = self._timer_at = None
        if not self.closed:
            self.glue.handle_timer(self._loop.time())
            self._drive()

    # ------------------------------------------------------------------ state

    def owned_now(self) -> frozenset[int]:
        """Partitions this node may start work on: owned, not being released, lease valid."""
        h = self.holding
        return h.owned if h.valid() else frozenset()

    def holds(self, partition: int, epoch: int) -> bool:
        """Still owned at ``epoch`` (also while draining), under a lease valid now."""
        h = self.holding
        g = h.grants.get(partition)
        return g is not None and g.epoch == epoch and h.valid()

    def grant(self, partition: int) -> Grant | None:
        """The grant of a partition held under a lease valid now (draining included)."""
        h = self.holding
        return h.grants.get(partition) if h.valid() else None

    def release_deadline(self, partition: int) -> float | None:
        return self.holding.releasing.get(partition)

    def releasing(self) -> frozenset[int]:
        return frozenset(self.holding.releasing)

    def status(self) -> dict[str, Any]:
        """Read from any thread: counts and scalars only, no iteration over the core's dicts."""
        own, now = self.own, time.monotonic()
        return {
            "owned": len(self.owned_now()),
            "releasing": len(self.releasing()),
            "waiting": len(own.waiting),
            "lease_valid_for_s": max(0.0, own.valid_until - now),
            "fenced": own.fenced_reason,
            "stable_view": own.lease.num,
            "stable_members": len(own.lease.stable),
            "witnesses": list(own.lease.witnesses),
            "votes": own.me in own.lease.witnesses,  # one of the witnesses of its stable view
            # A restart without its predecessor's promises (no --state-dir, or the file lost)
            # takes no part in choosing views until its quiet time has passed; with them, none.
            "forgetful": own.lease.views.forgetful,
            "quiet_for_s": max(0.0, own.lease.views.quiet_until - now),
            "counters": dataclasses.asdict(own.counters),
            "dropped": self.glue.proto.malformed,
            # Messages of kinds this version does not know, skipped (a newer member: an upgrade).
            "unknown_messages": self.glue.proto.dropped["unknown_kind"],
            **({} if self._state_file is None else {"state_writes": self._state_file.writes,
                                                    "state_write_errors": self.state_write_errors}),
        }

    # ------------------------------------------------------------------ outputs

    def _table_of(self, view: Mapping[str, float], pins: Mapping[int, str] | None = None) -> PlacementTable:
        """The table of a stable view's weights and pins (``Ownership``'s table function)."""
        old = self._table
        pins = dict(pins or {})
        if old is not None and self._table_view == view and self._table_pins == pins:
            return old
        self._table_view, self._table_pins = dict(view), pins
        self._table = (old.with_members(self._table_view, pins=pins) if old is not None
                       else PlacementTable.from_config(self._table_config, self._table_view, pins=pins or None))
        return self._table

    def _drive(self) -> None:
        own, now = self.own, self._loop.time()
        actions = self.glue.actions()
        if actions:
            self._unpublished.extend(actions)
            if self._flush_handle is None:
                self._flush_handle = self._loop.call_soon(self._flush)
        elif self.holding.valid_until != own.valid_until:  # a renewal: published at once
            self.holding = dataclasses.replace(self.holding, valid_until=own.valid_until)
        datagrams = self.glue.datagrams_to_send(now)
        views = own.lease.views
        if views.yielded and not self._foreign_told and self._state_file is not None:
            self._foreign_told = views.foreign_inc
            _survival_log.warning("%s held what this node promised in an earlier cluster named %r; members of a "
                                  "cluster founded anew under that name (incarnation %x) spoke to it, so it joins "
                                  "that cluster as a member that kept no promises (it waits the restart quiet time "
                                  "before voting)", self._state_file.path, self._cluster, views.foreign_inc)
        elif views.foreign_inc and views.foreign_inc != self._foreign_told and self._state_file is not None:
            self._foreign_told = views.foreign_inc
            restored = views.durable_state().view
            _log.error("%s holds stable view %d of an earlier cluster named %r (incarnation %x; the "
                       "members heard from are of incarnation %x): it takes no part in this cluster. Stop this "
                       "node and delete the file (it forgets the old cluster's promises)", self._state_file.flag,
                       restored.num, self._cluster, restored.inc, views.foreign_inc)
        elif views.older_refused > self._older_told and not views.view.members and self._state_file is not None:
            self._older_told = views.older_refused
            restored_num = views.durable_state().view.num
            _log.error("%s holds stable view %d, but the cluster offers view %d: this member keeps "
                       "no view older than one it held. If the cluster was created anew under the same name, "
                       "this file is from the old one: stop this node and delete the file (it forgets those "
                       "promises)", self._state_file.flag, restored_num, views.older_refused)
        for data, addr in datagrams:
            self._member.send_datagram(data, addr)
        if self.glue.left_ready:
            self._left.set()
        view = own.lease.views.view  # replaced whole on install: an identity test per pass
        if view is not self._view:
            self._view = view
            if self._hooks.view is not None and view.members:
                self._hooks.view(view)
        # The timer follows the core's deadline both ways: left at an earlier deadline that
        # passed (the resend check of a round a quorum has granted since), it would wake this
        # thread for nothing, once a renewal (issue 14: idle CPU).
        due = self.glue.get_timer()
        if due != self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = due
            self._timer = self._loop.call_at(due, self._tick)

    def _persist(self, state: WitnessState) -> bool:
        """``--state-dir``: the promises written before anything that depends on them is sent."""
        assert self._state_file is not None
        try:
            self._state_file.save(state)
        except OSError as exc:
            # Not written, so not said: these datagrams are dropped (the core resends, as after a
            # loss) and the write is tried again before the next ones.
            self.state_write_errors += 1
            _log.error("--state-dir %s: cannot write what this witness promised (%s); sending nothing "
                       "until it can", self._state_file.path, exc.strerror or exc)
            return False
        return True

    def _flush(self) -> None:
        """Publish what is held now, then carry out the actions since the last flush, in order."""
        self._flush_handle = None
        actions, self._unpublished = self._unpublished, []
        if self.closed:
            return
        own = self.own
        grants: dict[int, Grant] = {}
        for action in actions:
            if isinstance(action, Acquired):
                grants[action.partition] = self._grants[action.partition] = Grant(
                    action.partition, action.epoch, action.payload, time.time())
            elif isinstance(action, Ended):
                self._grants.pop(action.partition, None)
        releasing = {p: o.deadline for p, o in own.owned.items() if o.releasing}
        held = {p: self._grants[p] for p in own.owned}
        self.holding = Holding(own.valid_until, held, releasing, frozenset(held.keys() - releasing.keys()))
        for action in actions:
            if isinstance(action, Acquired):
                self._hooks.acquired(grants[action.partition])
            elif isinstance(action, Release):
                self._start_release(action)
            elif isinstance(action, Ended):
                self._ended(action)

    def _start_release(self, action: Release) -> None:
        p = action.partition
        o = self.own.owned.get(p)
        if p in self._draining or o is None:
            return  # already draining (an earlier deadline only shortens what the core waits), or ended
        self._draining[p] = asyncio.ensure_future(self._drain(p, o.epoch, self._hooks.release(p, action.reason)))

    async def _drain(self, p: int, epoch: int, released: Awaitable[Any]) -> None:
        try:
            payload = await released
        except asyncio.CancelledError:
            raise
        except Exception:  # the node isolates handler errors; this is the last line of defence
            _log.exception("releasing partition %d failed (handing it on anyway)", p)
            payload = None
        finally:
            self._draining.pop(p, None)
        self._released.append((p, epoch, payload))
        if len(self._released) == 1:
            self._loop.call_soon(self._finish_releases)

    def _finish_releases(self) -> None:
        """The drains that finished in this loop iteration, handed to the core together (their
        payloads come back from the application loop in batches, through its mailbox)."""
        batch, self._released = self._released, []
        if self.closed:
            return
        done = [(p, payload) for p, epoch, payload in batch
                if (o := self.own.owned.get(p)) is not None and o.epoch == epoch]
        if done:
            self.glue.releases_done(done, self._loop.time())  # the rules run once for all of them
        self._drive()

    def _ended(self, action: Ended) -> None:
        p = action.partition
        task = self._draining.pop(p, None)
        if task is not None:  # the deadline passed: ownership is over, stop the drain
            task.cancel()
            _log.warning("partition %d: release did not finish before its deadline; ownership ended "
                         "and its handler was cancelled", p)
        self._hooks.ended(p)
