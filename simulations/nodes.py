"""Node models: the common process life cycle, and a node running the real SWIM core.

Every node model has the same life cycle and fault hooks, so the scenarios and the metrics
treat the gossip design and the lease baselines (``simulations.leases``) alike:

``start()``          a new process (first start, or a restart with the same id and address)
``crash()``          kill -9: the process stops at once; in-flight work for it is dropped
``leave()``          graceful leave (the model's own way of handing work back)
``stall(seconds)``   the event loop freezes; work waits and runs late, in order
``lag_s``            every datagram is handled this much late (CPU starvation)
``leads()``          the partitions this process currently believes it leads (int array)

``SwimNode`` runs ``membership.Swim`` and derives placement from its *own* view: the live
members (alive + suspect, as ``membership`` says placement must), weighted by
``Meta.weight``, through ``PlacementTable.with_members`` (incremental). The table is only
recomputed when an observer asks for ``leads()`` after the view changed; the metrics ask at
a fixed sampling interval, which keeps a 256-node hour cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import ClassVar

import numpy as np

from membership import MemberEvent, MembershipConfig, Meta, Swim
from membership.driver import drain
from ownership import Ended, ExclusiveConfig, Ownership, Release, wire
from ownership.driver import MemberOwnership
from ownership.lease import WitnessState
from ownership.protocol import OwnershipProtocol
from placement import PlacementTable

__all__ = ["Node", "SwimNode", "PlacementSettings"]

_EMPTY = np.zeros(0, dtype=np.int64)


class PlacementSettings:
    """Cluster-wide placement settings every node builds its table with."""

    def __init__(self, partitions: int = 1024, replicas: int = 1, seed: int = 0) -> None:
        self.partitions = partitions
        self.replicas = replicas
        self.seed = seed
        # Tables by view: the nodes of a converged cluster hold equal views, and a table is a
        # function of the view alone, so each distinct view is computed once, not per node.
        self._tables: dict[tuple[frozenset, tuple], PlacementTable] = {}

    def table(self, view: dict[str, float], base: PlacementTable | None,
              pins: dict[int, str] | None = None) -> PlacementTable:
        """The table of ``view`` with ``pins`` (a stable view's: rule 13), incrementally from
        ``base``, a table of an earlier view."""
        key = (frozenset(view.items()), tuple(sorted(pins.items())) if pins else ())
        table = self._tables.get(key)
        if table is None:
            if base is None:
                table = PlacementTable.build(view, self.partitions, self.replicas, self.seed, pins=pins or None)
            else:
                table = base.with_members(view, pins=pins or {})
            if len(self._tables) >= 64:
                self._tables.clear()
            self._tables[key] = table
        return table

    def fingerprint(self) -> str:
        return f"partitions={self.partitions},replicas={self.replicas},seed={self.seed}"


class Node:
    """Process life cycle and fault state shared by every node model."""

    #: Whether the model keeps a membership view (``view``, ``live_view``, ``view_token``).
    has_view = False

    def __init__(self, sim, node_id: str, index: int, weight: float) -> None:
        self.sim = sim
        self.node_id = node_id
        self.index = index  # dense number, used by the metrics' arrays
        self.weight = weight
        self.addr: tuple[str, int] | None = None
        self.proc = 0  # incremented on every start; work of older processes is dropped
        self.up = False  # the process runs
        self.leaving = False
        self.stalled_until = 0.0
        self.pending_lag_s = 0.0
        self.lag_s = 0.0
        self.started_at = 0.0
        self.view: dict[str, float] = {}  # membership view (models that have one)
        # Traffic of this node id over all its processes (``simulations.engine.TRAFFIC_FIELDS``,
        # kept by the engine).
        self.sent = self.sent_bytes = self.own_sent = self.own_sent_bytes = 0
        self.received = self.received_bytes = self.own_received = self.own_received_bytes = 0

    def start(self) -> None:
        self.proc += 1
        self.started_at = self.sim.now
        self.up = True
        self.leaving = False
        self.stalled_until = 0.0
        self.pending_lag_s = 0.0

    def crash(self) -> None:
        self.up = False
        self.leaving = False

    def stall(self, seconds: float) -> None:
        """Freeze the process's event loop for ``seconds`` from now."""
        now = self.sim.now
        start = max(now, self.stalled_until)
        self.stalled_until = start + seconds
        self.pending_lag_s = self.stalled_until - now

    def loop_lag(self, lag_s: float) -> None:
        """The loop woke ``lag_s`` late (after a stall). Models may tell their protocol."""

    def set_weight(self, weight: float) -> None:
        """The operator changed this node's weight (models that place by weight announce it)."""
        self.weight = weight

    def receive(self, data: bytes, src: tuple[str, int]) -> None:
        raise NotImplementedError

    def leave(self) -> None:
        raise NotImplementedError

    def leads(self) -> np.ndarray:
        raise NotImplementedError

    def live_view(self) -> frozenset[str] | None:
        """Ids this node believes are members (None: the model has no membership view)."""
        return None

    def view_token(self) -> object:
        """Cheap identity of the view (equal tokens = equal views)."""
        return None


class SwimNode(Node):
    """A node process running the real membership core, and placement from its own view."""

    has_view = True
    addr: tuple[str, int]  # always set: a gossip process has an address from its creation on
    #: Placement tables set on any ``SwimNode`` of this process so far: while it stays the same,
    #: no node holds a table the one-leader invariant has not seen (``OneLeaderPerView``), so
    #: that check, run after every step, skips its per-node work.
    tables_set: ClassVar[int] = 0

    def __init__(self, sim, node_id: str, index: int, weight: float, *, config: MembershipConfig,
                 placement: PlacementSettings, seeds: Callable[[], list[tuple[str, int]]],
                 on_event: Callable[[SwimNode, MemberEvent], None], clock_offset_s: float = 0.0,
                 exclusive: ExclusiveConfig | None = None, drain_s: float = 0.0,
                 on_ownership: Callable[[SwimNode, object], None] | None = None,
                 durable: dict[str, WitnessState] | None = None, rejoin_files: bool = False,
                 durable_yields: bool = False) -> None:
        super().__init__(sim, node_id, index, weight)
        #: A restarted process rejoins through the members its previous process knew live when
        #: it stopped (the node's members file, ``placement.service.members_file``) instead of
        #: through running members, and may found a cluster (rule 11), as a node restarted
        #: without ``--join`` does. ``_known``: those members' addresses (None: never ran).
        self.rejoin_files = rejoin_files
        self._known: list[tuple[str, int]] | None = None
        self._live_addrs: dict[str, tuple[str, int]] = {}  # this process's live others
        #: Stable storage of witness promises, by node id (``SwimSystem.durable``): what a
        #: process wrote before sending is what its restart gets back. None: forgotten.
        self.durable = durable
        self.durable_yields = durable_yields  # (``SwimSystem.durable_yields``)
        #: Exclusive ownership (``ownership.core``) when set; None: every node leads what
        #: its own table says (availability first, the behaviour before exclusive ownership).
        self.exclusive = exclusive
        self.drain_s = drain_s  # how long the simulated application takes to release
        self._on_ownership = on_ownership
        #: The running process's ownership protocol joined to its membership core, as the node
        #: runs it (``ownership.driver``; None: down, or no exclusive ownership).
        self.glue: MemberOwnership | None = None
        self._owned_version = 0
        self.config = config
        self.placement = placement
        self.addr = (f"10.{index >> 16 & 255}.{index >> 8 & 255}.{index & 255}", 7946)
        self._seeds = seeds
        self._on_event = on_event
        self.clock_offset_s = clock_offset_s
        self.core: Swim | None = None
        self._placement_table: PlacementTable | None = None
        self._view_version = 0  # bumped on every view change
        self._table_version = -1  # the view version the table was computed from
        self._leads = _EMPTY
        self._timer_at: float | None = None
        self.joined = False
        self._send = partial(sim.send, self)

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        super().start()
        now = self.sim.now
        self.core = Swim(self.config, self.node_id, self.addr, meta=Meta(weight=self.weight),
                         rng=self.sim.process_rng(), now=now, clock_offset_s=self.clock_offset_s)
        self.view = {self.node_id: self.weight}
        self._view_version += 1
        self._timer_at = None
        seeds = self._seeds()
        self._live_addrs = {}
        if self.rejoin_files and self._known is None:
            self._known = []  # a first start: an empty members file
        rejoining = self.rejoin_files and bool(self._known) and self.exclusive is not None
        if rejoining:
            seeds = list(self._known or ())
        # A process claims partitions only once it has joined (heard from a member), as the
        # node's composition root does; alone, it would briefly claim every partition. The
        # first node of a cluster (no seeds) owns from the start.
        # With a bootstrap list (``ExclusiveConfig.bootstrap``) nobody founds: every process is
        # started as with --join, even the first, and the listed members choose view 1.
        founder = not seeds and not (self.exclusive is not None and self.exclusive.bootstrap)
        self.joined = founder
        self._owned_version += 1
        if self.exclusive is not None:
            # (A founder starts a new cluster: the node refuses to found one over kept promises.)
            restored = None if self.durable is None or founder else self.durable.get(self.node_id)
            own = Ownership(self.node_id, self.exclusive, self._table_of, now, founder=founder,
                            weight=self.weight, restored=restored, may_found=rejoining and bool(seeds),
                            first_view=1 + int(now),  # (the simulated clock: 1 at the start)
                            restored_yields=self.durable_yields)
            # The node's shell around the rules (decoding, packing, promises kept before sending)
            # and its glue to the membership core (view feed, addresses, leave, timer).
            self.glue = MemberOwnership(
                OwnershipProtocol(own, persist=None if self.durable is None else self._persist), self.core)
            self.glue.feed_view(now)
        self.core.join(seeds, now)
        self._flush()

    @property
    def own(self) -> Ownership | None:
        """The rules' state of the running process (``glue.core``), to read."""
        return None if self.glue is None else self.glue.core

    @property
    def _table(self) -> PlacementTable | None:
        """The placement table this node computed last (of its view, or of its stable view
        under exclusive ownership)."""
        return self._placement_table

    @_table.setter
    def _table(self, table: PlacementTable | None) -> None:
        # A new table: the invariants compare it after this step (``OneLeaderPerView``).
        self._placement_table = table
        SwimNode.tables_set += 1
        self.sim.touched.append(self)

    def _table_of(self, view, pins: dict[int, str] | None = None) -> PlacementTable:
        self._table = self.placement.table(dict(view), self._table, pins)
        return self._table

    def crash(self) -> None:
        if self.own is not None and self._on_ownership is not None:
            # A dead process processes nothing; one that was frozen stopped earlier, when its
            # lease ran out (its workers check the lease before each unit of work).
            end = min(self.sim.now, self.own.valid_until)
            for p, o in self.own.owned.items():
                self._on_ownership(self, Ended(p, o.epoch, end))
        self.glue = None
        super().crash()
        self.core = None
        self.view = {}
        self._timer_at = None

    def leave(self) -> None:
        """Graceful leave: gossip it, stop owning now, exit once the news went out."""
        if not self.up or self.leaving:
            return
        self.leaving = True
        if self.glue is not None:
            self.glue.leave(self.sim.now)  # the membership leave follows once all is handed off
        else:
            assert self.core is not None  # up: the process runs its core
            self.core.leave(self.sim.now)
        self._flush()

    def loop_lag(self, lag_s: float) -> None:
        assert self.core is not None  # the engine reports lag to a running process only
        self.core.report_loop_lag(lag_s, self.sim.now)

    def set_weight(self, weight: float) -> None:
        """Gossip the new weight (a new incarnation of our metadata), as ``Node`` does."""
        super().set_weight(weight)
        if self.core is None or not self.up:
            return
        self.core.update_meta(Meta(weight=weight), self.sim.now)
        self.view[self.node_id] = weight
        self._view_version += 1
        if self.glue is not None:
            self.glue.view_changed()
        self._flush()

    def set_loads(self, codes: bytes, at_s: int) -> None:
        """The load figures this member knows (``MemberOwnership.set_loads``): what its stable
        views commit for a rebalance (``simulations.rebalancing``)."""
        if self.glue is None or not self.up or self.core is None:
            return
        self.glue.set_loads(codes, at_s, self.sim.now)
        self._flush()

    def set_pins(self, pins: bytes, base: bytes, loads_at: int) -> None:
        """Pins planned from a stable view (``MemberOwnership.set_pins``; ``simulations.rebalancing``)."""
        if self.glue is None or not self.up or self.core is None:
            return
        self.glue.set_pins(pins, base, loads_at, self.sim.now)
        self._flush()

    # ------------------------------------------------------------------ driving the core

    def receive(self, data: bytes, src: tuple[str, int]) -> None:
        glue = self.glue
        if glue is not None:
            if data[:2] == wire.MAGIC:
                glue.receive_datagram(data, self.sim.now)
                self._flush()
                return
        assert self.core is not None  # the engine delivers to a running process only
        self.core.receive_datagram(data, src, self.sim.now)
        self._flush()

    def _timer(self, t: float) -> None:
        if self._timer_at != t:
            return  # superseded by an earlier timer
        self._timer_at = None
        core = self.core
        assert core is not None  # a crash drops the process's timers (and clears _timer_at)
        if self.own is None and not self.lag_s and not self.leaving:
            due = core.get_timer()
            if due is not None and due > self.sim.now:
                # A stale wake-up: what armed it was answered (most often a probe acked before
                # its timeout; a quarter of the timers of a 256-node loss run). Nothing is due,
                # so handle_timer and the flush would change nothing: re-arm and return.
                self._timer_at = due
                self.sim.node_at(self, due, self._timer, due)
                return
        if self.lag_s:
            core.report_loop_lag(self.lag_s, self.sim.now)
        core.handle_timer(self.sim.now)
        if self.glue is not None:
            self.glue.handle_timer(self.sim.now)
        self._flush()

    def _persist(self, state: WitnessState) -> bool:
        """Kept before anything is sent, as ``--state-dir`` does (``ExclusiveRunner``)."""
        assert self.durable is not None
        self.durable[self.node_id] = state
        return True

    def _releases_done(self, released: list[tuple[int, int]]) -> None:
        glue = self.glue
        if glue is None:
            return
        own = glue.core
        done = [(p, {"checkpoint": epoch}) for p, epoch in released if p in own.owned and own.owned[p].epoch == epoch]
        if done:
            glue.releases_done(done, self.sim.now)
            self._flush()

    def _event(self, ev) -> None:
        """One event of the membership core: the placement view, the ownership core, metrics."""
        if self.glue is not None:
            self.glue.event(ev, self.sim.now)
        if isinstance(ev, MemberEvent):
            m = ev.member
            view = self.view
            # Only a change of the live set or a weight is a new view (alive <-> suspect
            # and incarnation bumps are not), so placement is not recomputed for nothing.
            if self.rejoin_files and m.node_id != self.node_id:
                # The members file: rewritten while others are live, never emptied (``note``).
                if m.status in ("alive", "suspect"):
                    self._live_addrs[m.node_id] = m.addr
                else:
                    self._live_addrs.pop(m.node_id, None)
                if self._live_addrs:
                    self._known = list(self._live_addrs.values())
            if m.status in ("alive", "suspect"):
                if view.get(m.node_id) != m.meta.weight:
                    view[m.node_id] = m.meta.weight
                    self._view_version += 1
            elif view.pop(m.node_id, None) is not None:
                self._view_version += 1
            self.joined = True
            self._on_event(self, ev)

    def _flush(self) -> None:
        """After every input: the shared drain (``membership.driver``), then the ownership core,
        the exit after a leave, and the timer (earliest of both cores, ``lag_s`` late)."""
        core, sim = self.core, self.sim
        assert core is not None  # flushed after an input to a running process only
        sim.touched.append(self)
        drain(core, self._send, self._event)
        glue = self.glue
        if glue is not None:
            self._drive_ownership(glue)
            if self.core is None:
                return
        if self.leaving and core.leave_broadcast_done:
            # Stop a moment later, as a real process would after flushing its sockets.
            sim.node_at(self, sim.now + 0.5, self.crash)
            self.leaving = False
            self.view = {}
            return
        t = core.get_timer() if glue is None else glue.get_timer(core.get_timer())
        if t is not None:
            t = max(t, sim.now) + self.lag_s
            if self._timer_at is None or t < self._timer_at:
                self._timer_at = t
                sim.node_at(self, t, self._timer, t)

    def _drive_ownership(self, glue: MemberOwnership) -> None:
        """Feed the ownership core what the membership core changed; carry out its outputs."""
        sim = self.sim
        now = sim.now
        own = glue.core
        glue.feed_view(now)
        released: list[tuple[int, int]] = []
        for action in glue.actions():
            if isinstance(action, Release):
                o = own.owned.get(action.partition)  # None: it ended in the same update (a jump)
                if o is not None:
                    released.append((action.partition, o.epoch))
            else:
                self._owned_version += 1
            if self._on_ownership is not None:
                self._on_ownership(self, action)
        if released:  # the simulated application drains for drain_s, then reports it is done
            sim.node_at(self, now + self.drain_s, self._releases_done, released)
        for data, addr in glue.datagrams_to_send(now):
            sim.send(self, data, addr)
        if self.leaving and glue.membership_leave_due():
            core = self.core
            assert core is not None  # a leaving process runs its core until its leave went out
            core.leave(now)
            for data, addr in core.datagrams_to_send():
                sim.send(self, data, addr)

    # ------------------------------------------------------------------ observing

    def leads(self) -> np.ndarray:
        if not self.up or not self.joined or self.core is None or self.core.status != "alive":
            return _EMPTY
        if self.own is not None:  # exclusive ownership: what it owns (releasing included)
            if self._table_version != self._owned_version:
                self._table_version = self._owned_version
                self._leads = np.fromiter(sorted(self.own.owned), dtype=np.int64, count=len(self.own.owned))
            return self._leads
        if self._table_version != self._view_version:
            self._table = self.placement.table(self.view, self._table)
            self._table_version = self._view_version
            self._leads = np.asarray(self._table.owned_by(self.node_id, leader_only=True), dtype=np.int64)
        return self._leads

    def live_view(self) -> frozenset[str] | None:
        return frozenset(self.view) if self.up else None

    def view_token(self) -> object:
        return self.core.view_checksum if self.core is not None else None

    def self_status(self) -> str | None:
        return None if self.core is None else self.core.status
