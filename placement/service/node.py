"""A placement node: gossip membership + the placement table it implies + ownership events.

This is the composition root the issue calls "the node process": it starts the asyncio gossip
member (``membership.aio``), recomputes the ``PlacementTable`` from the live view on every
membership change (incrementally), and tells the embedding application which partitions it
acquired and released. The HTTP API (``placement.service.http_api``) and the CLI wrap it.

The gossip member and the exclusive-ownership runner run on a thread of their own
(``placement.service.node_thread``), so a blocked application loop delays neither probes and refutations
nor lease renewals: a busy worker is not declared dead and its partitions do not move (issue 15).
Everything the application sees - callbacks, ``ownership_changes()``, ``leadership()``, the
snapshot - lives on the loop that called ``start()``; ``placement.service.node_sync.NodeThread`` is the
same node for programs without asyncio.

Ownership has two modes (``NodeConfig.ownership``), two implementations of one interface
(``placement.service.node_mode.OwnershipMode``) that the node asks instead of branching:

``"exclusive"`` (the default, ``node_exclusive``) runs the exclusive-ownership core
(``ownership.core``, its rules and guarantees in docs/ownership.md) through
``placement.service.node_ownership`` on the membership thread, whose news reaches the
application's loop through ``node_bridge.AppBridge``: a partition is owned only under a quorum
lease, moves by handoff (the old owner's ``released`` handler drains, may be ``async`` and
returns a payload the new owner receives in ``grant(p).payload``), and a node cut off from a
witness majority stops owning before anyone can take its partitions.

``"available"`` (opt-in, the behaviour before exclusive ownership, ``node_available``) owns what
the local view's table says, at once; during a split or a freeze two nodes can own a partition.
Its rules:

* Members that are *alive or suspect* own partitions; dead and left members do not. Suspicion
  alone never moves a partition (that is what sank the lease designs: a slow node lost its
  leases and partitions jumped between hosts).
* A node that joins through seeds owns nothing until it has heard from the cluster: alone,
  its own view would give it every partition, and it would process them twice with their
  real owners.
* A node that learns the cluster declared it dead (it was frozen, or cut off) releases every
  partition at once - the others have already given them away - and takes none back for
  ``rejoin_holddown_s`` after refuting, so the others see it alive again first. The hold-down
  also damps a node that flaps because it is too slow to answer in time.
* A change is delivered as one ``OwnershipChange``: callbacks get ``released`` before
  ``acquired``. On a graceful leave the node releases everything *before* it announces that it
  leaves, so the new owners acquire after the old one released.

Embedding::

    async with Node(NodeConfig("n1", join=[("10.0.0.2", 7001)])) as node:
        node.owns("order-42"); node.owned_partitions()
        async for change in node.ownership_changes():
            start(change.acquired); stop(change.released)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from membership import (
    DeclaredDead,
    IdConflict,
    JoinAttempt,
    JoinRefused,
    MemberEvent,
    MemberInfo,
    RefusedPeer,
)
from membership.aio import Member, start_member
from membership.seeds import DnsSeed
from ownership.survival import Survival
from ownership.views import View

from ..changes import OwnershipChange
from ..errors import InvalidConfigError, PlacementError
from ..pins import decode_pins, validate_pins
from ..snapshot import PlacementSnapshot
from ..table import PlacementTable
from .change_stream import ChangeStream
from .console.events import EventLog
from .load_balance import LoadBalancer
from .load_meter import LoadMeter
from .membership_log import MembershipLog
from .node_available import AvailableOwnership
from .node_config import Addr, NodeConfig, read_key_file
from .node_exclusive import ExclusiveOwnership
from .node_mode import NodeSide, OwnershipMode
from .node_ownership import ExclusiveRunner, Grant
from .node_thread import MembershipThread

__all__ = ["JoinRefusedError", "LeadershipLost", "Listener", "Node", "NodeConfig", "read_key_file"]


class JoinRefusedError(PlacementError):
    """The cluster refused this node: its cluster name, partition count, replicas or seed differ
    (or it has no gossip keys and the cluster encrypts). Only a node that never joined is refused."""


class LeadershipLost(PlacementError):
    """Raised out of ``async with node.leadership(name)`` when leadership moved elsewhere."""


Listener = Callable[[int], object]


_log = logging.getLogger("placement.node")
# The core reports a persisting id conflict at most once a minute: hold "not ready" a little
# longer than that, so it does not flap while the conflict lasts.
_ID_CONFLICT_HOLD_S = 90.0


class Node:
    """One member of the cluster, embedded in an application process (see module docstring)."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self._member: Member | None = None
        self._closed = False  # close() was called: leave() has nothing left to do
        self._thread: MembershipThread | None = None  # runs the member and the runner
        self._snapshot: PlacementSnapshot | None = None
        self._followed: dict[str, float] | None = None  # see _follow
        self._followed_pins: dict[int, str] = {}  # its pins (rule 13)
        self._load = LoadMeter()  # record_load
        self._balancer: LoadBalancer | None = None  # --load-aware (start)
        self._balancing: asyncio.Task | None = None
        self._members_seen: tuple[MemberInfo, ...] | None = None  # the last member list (_recompute)
        self._changed = asyncio.Event()  # replaced on every new snapshot: long-poll waiters
        self._streams: set[ChangeStream] = set()
        self._acquired_cbs: list[Listener] = []
        self._released_cbs: list[Listener] = []
        self._leaderships: dict[str, list[Callable[[], None]]] = {}
        self._refused: JoinRefusedError | None = None
        self._join_settled = asyncio.Event()  # set once joined, or refused (wait_joined)
        self._id_conflict: tuple[str, float] | None = None  # (message, monotonic time)
        self._last_view_change = 0.0
        self._has_peer = False
        self._leaving = False
        self._leaders_checked = asyncio.Event()  # set and replaced whenever leadership may have changed
        self.declared_dead_count = 0
        self.placement_changes = 0
        self.callback_errors = 0  # exceptions raised by ownership callbacks (isolated)
        self.events = EventLog()  # what happened, for the console's timeline (GET /v1/events)
        self._seeds: tuple[Addr | DnsSeed, ...] = config.join  # join, or the members on file (start)
        self._membership_log = MembershipLog(config.node_id)
        side = NodeSide(table=lambda: self.table, publish=self._publish, leaderships_changed=self._check_leaderships,
                        may_own=lambda: self.joined and not self._leaving, closed=lambda: self._closed,
                        placement_view=self._follow)
        #: What this node owns and when that changes: the one place the two modes differ.
        self._mode: OwnershipMode = (
            ExclusiveOwnership(config, side, self.events) if config.ownership == "exclusive"
            else AvailableOwnership(config.node_id, config.rejoin_holddown_s, side))

    # ----- lifecycle --------------------------------------------------------------------
    async def start(self) -> Node:
        self._seeds = self._mode.prepare(self.config.join)
        self._thread = MembershipThread(self.config.node_id, self._on_event)
        # What happened on the thread meanwhile (the founder's acquisitions) follows this first view.
        try:
            self._on_event(None, await self._thread.start(self._open))
        except BaseException:
            self._mode.close()  # (the witness state's lock: a retry in this process may take it)
            raise
        if self.security_warning is not None:  # (once the node runs: not for one that failed to bind)
            _log.warning("%s", self.security_warning)
        self._mode.started()
        if self.joined:
            self._join_settled.set()
        if self.config.load_aware_s:
            self._balancer = LoadBalancer(
                self.node_id, self.config.table_config, self.config.load_aware_s, own_rates=self.load_rates,
                addresses=lambda: {m: self.snapshot.address(m) for m in self.table.members},
                set_loads=self._set_loads, set_weight=self._set_weight, by=self.config.balance_by,
                set_pins=self._set_pins)
            self._balancing = asyncio.ensure_future(self._balancer.run())
        return self

    async def wait_joined(self, timeout_s: float | None = None) -> None:
        """Return once this node has joined (heard from a member through its seeds; at once
        without seeds). Raises ``JoinRefusedError`` if the cluster refused it (other cluster
        name or settings, or keys), naming both sides' values, and ``TimeoutError`` after
        ``timeout_s``. ``start()`` does not wait: a seed may come up later."""
        if not self.joined and self._refused is None:
            await asyncio.wait_for(self._join_settled.wait(), timeout_s)
        if self._refused is not None:
            raise self._refused

    async def _open(self) -> tuple[Member, ExclusiveRunner | None]:
        """On the membership thread: bind the gossip socket, join, build the runner (exclusive mode)."""
        c = self.config
        meta = c.meta()
        # Seconds since the epoch: a restarted node starts above any incarnation the cluster
        # holds for its old self, so it is not mistaken for its dead predecessor.
        member = await start_member(
            c.membership_config(), c.node_id, bind=c.gossip_bind, advertise=c.gossip_advertise,
            meta=meta, seeds=self._seeds, incarnation=int(time.time()),
        )
        assert self._thread is not None
        runner = self._mode.open(member, self._thread)
        self._member = member  # with the runner: before the founder's first acquisitions reach the application
        return member, runner

    async def __aenter__(self) -> Node:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.leave()

    async def leave(self, timeout_s: float = 2.0) -> None:
        """Graceful leave: release every partition, announce the leave, stop."""
        if self._member is None or self._thread is None or self._leaving or self._closed:
            return  # not started, already leaving, or stopped abruptly (close): nothing to hand on
        self._leaving = True
        # Say so first (issue 30): open long-polls answer now (the HTTP API answers them with a
        # 503 that names the leave, so a client moves its long-poll to another node) and event
        # streams end after this event, so nothing open holds the process after the leave.
        self.events.append("leaving", self.node_id, "leaving the cluster: handing its partitions over, then "
                           "stopping; ask another node", time.time())
        self._changed.set()
        await self._mode.leave(timeout_s)  # every partition handed on, or released
        self._check_leaderships()
        await self._thread.run(self._member.leave(timeout_s))
        self._thread.stop()
        self._end_streams()

    def close(self) -> None:
        """Abrupt stop, as if the process died (others will detect it)."""
        self._closed = True
        if self._thread is not None:
            self._thread.close()
        self._end_streams()
        self._check_leaderships()

    def _set_loads(self, codes: bytes, at_s: int) -> None:
        runner = getattr(self._mode, "runner", None)
        if self._thread is not None and runner is not None:
            self._thread.to_member(runner.set_loads, codes, at_s)

    def _set_pins(self, pins: bytes, base: bytes, loads_at: int) -> None:
        """Pins this node's balancer planned (rule 13): to the ownership protocol, whose
        first-ranked member proposes the stable view again with them. Thread-safe."""
        runner = getattr(self._mode, "runner", None)
        if self._thread is not None and runner is not None:
            self._thread.to_member(runner.set_pins, pins, base, loads_at)

    def _set_weight(self, weight: float) -> None:
        """Gossip this node's new weight (load-aware weights): the next stable view carries it."""
        member = self._member
        if self._thread is None or member is None:
            return
        meta = self.config.meta(weight)
        self._thread.to_member(lambda: asyncio.ensure_future(member.update_meta(meta)))

    @property
    def load_balancing(self) -> dict[str, object] | None:
        """``--load-aware``: rounds gathered, the last plan, the move budget left; None when off."""
        return None if self._balancer is None else self._balancer.status()

    @property
    def load_balancer(self) -> LoadBalancer | None:
        """``--load-aware``: this node's balancer (its last figures and plans, for the console); None when off."""
        return self._balancer

    def _end_streams(self) -> None:
        if self._balancing is not None:
            self._balancing.cancel()
        if self._balancer is not None:
            self._balancer.close()
        self._mode.close()
        for stream in self._streams:
            stream.close()
        self.events.close()

    # ----- state ------------------------------------------------------------------------
    @property
    def node_id(self) -> str:
        return self.config.node_id

    @property
    def member(self) -> Member:
        if self._member is None:
            raise RuntimeError("node is not started")
        return self._member

    @property
    def snapshot(self) -> PlacementSnapshot:
        if self._snapshot is None:
            raise RuntimeError("node is not started")
        return self._snapshot

    @property
    def table(self) -> PlacementTable:
        return self.snapshot.table

    def members(self) -> list[MemberInfo]:
        """The member list as the membership thread last published it (after every change)."""
        if self._thread is None:
            raise RuntimeError("node is not started")
        return list(self._thread.members)

    @property
    def app_loop_lag_s(self) -> float:
        """How late the application's loop would run a timer (``loop_lag.AppLoopLag``): its
        longest busy run of the last minute, or how long it has been busy right now (seconds)."""
        return self._thread.app_lag.lag_s if self._thread is not None else 0.0

    @property
    def lease_valid_until(self) -> float | None:
        """Exclusive mode: the ``time.monotonic()`` instant this node's quorum lease ends, as last
        renewed (work started on a partition must end by then: ``may_work`` turns False the
        instant it passes); None in available mode. Exclusive mode's reads raise before ``start()``."""
        return self._mode.lease_valid_until()

    @property
    def seeds(self) -> tuple[Addr | DnsSeed, ...]:
        """The seeds this node joins through: ``join``, else the members it last knew in its
        cluster (``members_file``; known once started), else none: it founded a cluster."""
        return self._seeds

    @property
    def joined(self) -> bool:
        """Heard from another member (or alone by design: started without seeds)."""
        return self._has_peer or not self._seeds

    @property
    def ready(self) -> bool:
        """Joined and the view has settled."""
        if self._refused or self._leaving or self._member is None or self.id_conflict:
            return False
        if self.paused is not None:
            return False
        return self.joined and time.monotonic() - self._last_view_change >= self.config.settle_s

    @property
    def paused(self) -> str | None:
        """Exclusive mode: why this node owns nothing now (no stable view yet, no quorum lease:
        cut off from a majority of the witnesses), or None."""
        return self._mode.paused()

    @property
    def survival(self) -> Survival | None:
        """Exclusive mode: what the cluster survives, from the stable view this node holds
        (``ownership.survival``); None before it holds one, or in available mode."""
        return self._mode.survival()

    @property
    def security_warning(self) -> str | None:
        """Set when gossip runs without keys (no ``--key-file``): what that allows, and the fix.
        Logged at start, in ``/readyz`` and ``/v1/ownership`` (the console, ``placement status``)."""
        if self.config.membership_config().keys:
            return None
        return ("gossip runs without keys (no --key-file): it is neither encrypted nor authenticated, so anyone "
                "who can send UDP to the gossip port can join, read the member list, and declare members dead "
                "until they refute; make a key with `placement keygen --out FILE` and give every node "
                "--key-file FILE (README, \"Gossip without --key-file\")")

    @property
    def leaving(self) -> bool:
        """A graceful leave has started: this node takes no new work."""
        return self._leaving

    @property
    def refused(self) -> JoinRefusedError | None:
        return self._refused

    @property
    def id_conflict(self) -> str | None:
        """Set while another live process uses this node's id (reported within the last
        ``_ID_CONFLICT_HOLD_S``): the node is not ready until the duplicate is gone."""
        if self._id_conflict is None or time.monotonic() - self._id_conflict[1] > _ID_CONFLICT_HOLD_S:
            return None
        return self._id_conflict[0]

    def owns(self, key: str | bytes) -> bool:
        """May this node work on the key's partition now? (Exclusive: it holds it under a
        valid lease and is not releasing it. Available: it leads it, joined, not leaving.)"""
        return self._mode.owns(key)

    def owned_partitions(self) -> frozenset[int]:
        """Partitions this node may work on now (exclusive: held under a valid lease and not
        being released; available: led as last published - none before it joined, while held
        down after being declared dead, or once it is leaving)."""
        return self._mode.owned_partitions()

    def may_work(self, partition: int, epoch: int = 0) -> bool:
        """The check before each unit of work on ``partition`` (exclusive: still held at
        ``epoch``, draining included, under a quorum lease valid *now* - False the moment it
        lapses, even if no callback has run yet; available: led by this node)."""
        return self._mode.may_work(partition, epoch)

    def record_load(self, partition: int, units: float = 1.0) -> None:
        """Say that ``units`` of work were done on ``partition`` now (a request served, items
        processed): the per-partition rates load-aware weights plan from (``load_meter``).
        Call it from the application's loop."""
        if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < self.config.partitions:
            raise ValueError(f"partition must be an integer in [0, {self.config.partitions}), got {partition!r}")
        self._load.record(partition, float(units), time.monotonic())

    def load_rates(self) -> dict[int, float]:
        """Work per second on each partition this node recorded work on lately (decayed with a
        60 s half-life; partitions without work for a while are left out)."""
        return self._load.rates(time.monotonic())

    def release_deadline(self, partition: int) -> float | None:
        """Exclusive mode: ``loop.time()`` by which the drain of ``partition`` must end."""
        return self._mode.release_deadline(partition)

    def releasing_partitions(self) -> frozenset[int]:
        """Exclusive mode: partitions whose ``released`` handlers are draining them."""
        return self._mode.releasing_partitions()

    def grant(self, partition: int) -> Grant | None:
        """The fencing epoch and handed-over payload of a partition this node holds under a lease
        valid now, draining included (exclusive mode; None otherwise). Pass ``epoch`` to the
        store with every write."""
        return self._mode.grant(partition)

    def ownership_status(self) -> dict[str, object]:
        """What the ownership layer is doing (for /v1/ownership, /readyz and the console)."""
        return self._mode.status()

    def _leads(self, name: str) -> bool:
        return not self._closed and self._mode.leads(name)

    def leader(self, name: str) -> str:
        """The top-ranked live member for ``name`` (the leader of its partition): every node
        that shares the view computes the same answer, so no lease store is needed."""
        return self.table.owner(self.table.partition_of(name))

    # ----- ownership events -----------------------------------------------------------------
    def on_ownership(self, acquired: Listener | None = None, released: Listener | None = None) -> None:
        """Register callbacks ``acquired(partition)`` / ``released(partition)``."""
        if acquired is not None:
            self._acquired_cbs.append(acquired)
        if released is not None:
            self._released_cbs.append(released)

    async def ownership_changes(self) -> AsyncIterator[OwnershipChange]:
        """Every ownership change from now on; the first item is the current ownership. A
        reader that falls behind gets the changes it missed merged into one net change."""
        stream = ChangeStream(OwnershipChange(self.owned_partitions(), frozenset(), self.table.checksum))
        self._streams.add(stream)
        try:
            while (change := await stream.get()) is not None:
                yield change
        finally:
            self._streams.discard(stream)

    @contextlib.asynccontextmanager
    async def leadership(self, name: str) -> AsyncIterator[None]:
        """Wait until this node leads ``name``, then run the body while it does.

        The wait yields to the loop until this node becomes the leader: cancel it, or put
        ``asyncio.timeout`` around it, to stop waiting. If the node leaves or stops before it
        leads, ``LeadershipLost`` is raised. If leadership moves away during the body, the body
        is cancelled and ``LeadershipLost`` is raised.
        """
        while not self._leads(name):
            if self._refused is not None:
                raise self._refused
            if self._leaving or self._closed:
                raise LeadershipLost(f"node {self.node_id!r} stopped before it led {name!r}")
            await self._leaders_checked.wait()  # every point where leadership may change sets it
        task = asyncio.current_task()
        assert task is not None
        lost = False

        def check() -> None:
            nonlocal lost
            if not lost and not self._leads(name):
                lost = True
                task.cancel()

        self._leaderships.setdefault(name, []).append(check)
        try:
            yield
        except asyncio.CancelledError:
            if lost and task.uncancel() == 0:
                raise LeadershipLost(f"leadership of {name!r} moved to {self.leader(name)!r}") from None
            raise
        finally:
            self._leaderships[name].remove(check)

    async def wait_for_change(self, etag: str, timeout_s: float) -> PlacementSnapshot:
        """Return the snapshot once its etag differs from ``etag`` (or after the timeout), or at
        once when this node is leaving (then the answer would not change before it is gone)."""
        if self.snapshot.etag == etag and not self._leaving:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout_s)
        return self.snapshot

    # ----- internals --------------------------------------------------------------------
    def _on_event(self, event: object, members: tuple[MemberInfo, ...]) -> None:
        """A membership event, on the application loop (the runner has already seen it, on the
        membership thread); ``members`` is the member list right after it. ``event`` None: the
        first view, at start."""
        if isinstance(event, JoinRefused):
            self._refused = JoinRefusedError(
                f"cluster at {event.addr[0]}:{event.addr[1]} refused this node: {event.reason} "
                f"(this node: {self.config.cluster_settings()})"
            )
            self.events.append("refused", "", str(self._refused), time.time())
            _log.error("%s", self._refused)
            # An embedding application hears it as an error: wait_joined(), ownership_changes()
            # and leadership() raise it (issue 31: it only saw join attempts logged). The node
            # keeps asking its seeds until closed (`placement node` exits with status 3).
            self._join_settled.set()
            for stream in self._streams:
                stream.close(self._refused)
            self._check_leaderships()
            return
        if isinstance(event, (RefusedPeer, JoinAttempt)):
            self._log_join_event(event)
            return
        if isinstance(event, DeclaredDead):
            self.events.append("declared-dead", self.node_id, f"declared dead at incarnation {event.incarnation}; "
                               "refuted", time.time())
            self.declared_dead_count += 1
            self._mode.declared_dead()
            return
        if isinstance(event, IdConflict):
            # Available mode: both compute themselves leader of its partitions. Exclusive mode:
            # the one holding the id's leases keeps them, the other owns nothing while both run
            # (seen on processes: tests/test_bad_input_cluster.py), but they share one identity.
            what = ("both own its partitions" if self.config.ownership == "available"
                    else "they share one identity in the cluster; stop one")
            message = (f"another process at {event.addr[0]}:{event.addr[1]} uses node id "
                       f"{self.node_id!r}: give every process its own id ({what})")
            _log.error("%s", message)
            self._id_conflict = (message, time.monotonic())
            self.events.append("id-conflict", self.node_id, message, time.time())
            return
        if isinstance(event, MemberEvent):
            m = event.member
            if m.node_id != self.node_id:
                self._has_peer = True
                self._join_settled.set()
            self.events.append(event.kind, m.node_id, f"incarnation {m.incarnation} at {m.addr[0]}:{m.addr[1]}"
                               + (f" (by {event.by})" if event.by and event.by != m.node_id else ""), time.time())
            if m.node_id != self.node_id:
                self._membership_log.event(event)
        self._last_view_change = time.monotonic()
        self._recompute(members)

    def _log_join_event(self, event: RefusedPeer | JoinAttempt) -> None:
        if isinstance(event, RefusedPeer):
            _log.warning("refused a join from %r at %s:%d (it stops; this node carries on): %s",
                         event.node, *event.addr, event.reason)
            return
        seeds = ", ".join(f"{h}:{p}" for h, p in event.seeds)
        _log.warning("join attempt %d to %s failed: %s; next attempt in %.0f s",
                     event.attempt, seeds, event.reason, event.retry_at - event.at)

    def _follow(self, view: View) -> None:
        """A new stable view (exclusive mode): placement follows its members and weights from now
        on (the view leases and handoffs follow), not the live members gossip reports; with
        ``--load-aware``, the weights are planned from its load figures (``load_balance``)."""
        self._followed = view.weighted()
        try:
            self._followed_pins = validate_pins(decode_pins(view.pins), self.config.partitions)
        except InvalidConfigError:  # placed as if unpinned, as the ownership core does (``bad_pins``)
            self._followed_pins = {}
        if self._members_seen is not None:
            self._recompute(self._members_seen)
        if self._balancer is not None and not self._leaving and not self._closed:
            self._balancer.view_soon(view)  # (off the event loop: a plan can take most of a second)

    def _recompute(self, members: tuple[MemberInfo, ...]) -> None:
        """The placement snapshot clients route by: the table of the followed view (exclusive mode,
        once a stable view is held), else of the live members; addresses from gossip.

        Why the stable view in exclusive mode (issue 30): ownership moves only when a stable
        view does, ``stable_after_s`` (2 s) and a lease round after gossip reports a change. A
        snapshot of the live members sent clients to a restarted node that long before it could
        hold anything: its requests waited there, up to 3 s in a rolling restart. Every member
        holding one stable view also serves one checksum, where live views differ for a while."""
        self._members_seen = members
        live = [m for m in members if m.is_live]
        followed = self._followed
        weights = dict(followed) if followed is not None else {m.node_id: m.meta.weight for m in live}
        # Live members' addresses first; a member of the followed view that gossip no longer
        # holds live keeps the address it had.
        addresses = {m.node_id: m.meta.http for m in members if m.node_id in weights}
        addresses.update((m.node_id, m.meta.http) for m in live if m.node_id in weights)
        # Zones as gossip reports them (capacity_factor is cluster-wide and refuses --zone on
        # every member: no zones then).
        zones = {m.node_id: m.meta.zone for m in members
                 if m.node_id in weights and m.meta.zone and self.config.capacity_factor is None}
        old = self._snapshot.table if self._snapshot is not None else None
        # The followed view's pins (rule 13), as the ownership core places them.
        pins = self._followed_pins if followed is not None else {}
        table = old.with_members(weights, zones, pins=pins) if old is not None else PlacementTable.from_config(
            self.config.table_config, weights, zones, pins=pins or None)
        snapshot = PlacementSnapshot(table, addresses)
        if self._snapshot is not None and snapshot.etag == self._snapshot.etag:
            return
        self._snapshot = snapshot
        if old is not None and table.checksum != old.checksum:
            self.placement_changes += 1
            self.events.append("placement", "", f"{len(old.moved(table, leaders=True))} leaderships moved; "
                               f"{len(weights)} live members; checksum {table.checksum[:12]}", time.time())
        self._mode.view_changed()
        self._changed.set()
        self._changed = asyncio.Event()
        self._check_leaderships()

    def _check_leaderships(self) -> None:
        """Called wherever leadership may change: wakes the waiting ``leadership()`` calls and
        cancels the bodies whose leadership moved."""
        self._leaders_checked.set()
        self._leaders_checked = asyncio.Event()
        for checks in list(self._leaderships.values()):
            for check in list(checks):
                check()

    def _publish(self, change: OwnershipChange) -> list[object]:
        """Tell the application; returns what the ``released`` handlers returned (exclusive
        mode awaits those that are awaitable before it hands the partition on)."""
        if not change:
            return []
        results: list[object] = []
        for p in sorted(change.released):  # release before acquire
            for cb in self._released_cbs:
                results.append(self._call(cb, p, "released"))
        for p in sorted(change.acquired):
            for cb in self._acquired_cbs:
                self._call(cb, p, "acquired")
        for stream in self._streams:
            stream.put(change)
        self.events.ownership(self.node_id, len(change.acquired), len(change.released), time.time())
        return results

    def _call(self, cb: Listener, partition: int, what: str) -> object:
        """Run an application callback; its exception is logged with the partition and counted
        (``callback_errors``, in /metrics), and never aborts a leave, a release or the pump."""
        try:
            return cb(partition)
        except Exception:
            self.callback_errors += 1
            _log.exception("%s callback %s raised for partition %d (the node carries on)",
                           what, getattr(cb, "__qualname__", repr(cb)), partition)
            return None


if TYPE_CHECKING:  # nothing runs: mypy proves that a Node is what these modules are typed against
    from .guard import OwnerNode
    from .http_api import NodeLike

    def _node_satisfies_the_protocols(node: Node) -> tuple[NodeLike, OwnerNode]:
        return node, node
