"""A cluster under simulation: nodes of one *system*, the faults scenarios apply, the metrics.

A *system* says how a node works: ``SwimSystem`` (the real membership core + rendezvous
placement, with or without Lifeguard) or one of the lease-based baselines in
``simulations.leases``. Everything else - the engine, the network, the fault actions, the
metrics - is shared, so the designs are compared under the same scenario and seed.

Fault actions (all take effect at the current simulated time; scenarios schedule them with
``cluster.sim.at``): ``join``, ``crash``, ``restart``, ``leave``, ``stall``, ``slow``,
``partition``, ``heal``, ``set_loss``, ``set_weight(s)``.
"""

from __future__ import annotations

import dataclasses
import random
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from membership import MembershipConfig
from ownership import ExclusiveConfig
from ownership.lease import WitnessState
from placement import PlacementTable

from . import invariants
from .engine import Network, Simulation
from .metrics import Recorder
from .nodes import Node, PlacementSettings, SwimNode

__all__ = ["Cluster", "SwimSystem", "SettleError"]


class SettleError(RuntimeError):
    """The cluster did not reach a steady state during warm-up."""


class SwimSystem:
    """Nodes run ``membership.Swim`` (real core and codec) and place from their own view."""

    warmup_max_s = 120.0

    def __init__(self, config: MembershipConfig | None = None, name: str = "swim",
                 exclusive: ExclusiveConfig | None = None, drain_s: float = 2.0) -> None:
        self.config = config or MembershipConfig()
        self.name = name
        #: Exclusive ownership rules (None: availability first, each node leads what its own
        #: table says). The simulated application takes ``drain_s`` to release a partition.
        self.exclusive = exclusive
        self.drain_s = drain_s
        #: Each node's clock is off by a uniform draw from +-clock_skew_s (its own RNG stream,
        #: so other draws are unchanged); it only shifts the probe schedule's periods.
        self.clock_skew_s = 0.0
        self._skew_rng: random.Random | None = None
        #: Each witness's promises (``ownership.lease.WitnessState``) as its processes persisted
        #: them, by node id: kept across crashes and given to the restarted process, as
        #: ``--state-dir`` does. None (the default): a restarted process forgets them.
        self.durable: dict[str, WitnessState] | None = None
        #: With ``durable``: a restored record yields to another incarnation, as a node's default
        #: record (no ``--state-dir``: ``ownership.views.StableViews._yield_restored``).
        self.durable_yields = False
        #: Restarted processes rejoin through the members they knew (the node's members file)
        #: and may found (rule 11), as a node restarted without ``--join``; False: through
        #: running members, as with ``--join``.
        self.rejoin_files = False

    def attach(self, cluster: Cluster) -> None:
        self.config = dataclasses.replace(self.config, cluster_settings=cluster.placement.fingerprint())
        cluster.sim.mtu_bytes = self.config.mtu_bytes
        checks = cluster.sim.invariants
        checks += [invariants.SelfView(), invariants.OneLeaderPerView()]
        if self.exclusive is not None:
            checks.append(invariants.NoDualOwnership(cluster))
            checks.append(invariants.EpochsRise(cluster))
        if cluster.check_cores:  # O(members) per step: see docs/simulations.md, "Invariants"
            checks.append(invariants.swim_core_indexes)
            if self.exclusive is not None:
                checks.append(invariants.PartitionMoves())  # O(partitions known) per step

    def make_node(self, cluster: Cluster, node_id: str, index: int, weight: float) -> Node:
        offset = 0.0
        if self.clock_skew_s:
            if self._skew_rng is None:
                self._skew_rng = random.Random(f"{cluster.sim.seed}/clocks")
            offset = self._skew_rng.uniform(-self.clock_skew_s, self.clock_skew_s)
        return SwimNode(cluster.sim, node_id, index, weight, config=self.config,
                        placement=cluster.placement, seeds=lambda: cluster.seed_addrs(node_id),
                        on_event=cluster.metrics.member_event, clock_offset_s=offset,
                        exclusive=self.exclusive, drain_s=self.drain_s,
                        on_ownership=cluster.metrics.ownership, durable=self.durable,
                        durable_yields=self.durable_yields, rejoin_files=self.rejoin_files)

    def settled(self, cluster: Cluster) -> bool:
        members = [n for n in cluster.nodes.values() if n.up and not n.leaving]
        want = frozenset(n.node_id for n in members)
        if not all(n.live_view() == want for n in members):
            return False
        if self.exclusive is None:
            return True
        # Exclusive ownership: every partition owned, none in flight.
        owned = 0
        for n in members:
            assert isinstance(n, SwimNode)  # this system makes every node (make_node)
            own = n.own
            if (own is None or own.waiting or any(o.releasing for o in own.owned.values())
                    or frozenset(own.lease.stable) != want):
                return False  # (placement follows the stable view: it must be the whole cluster)
            owned += len(own.owned)
        return owned == cluster.placement.partitions


class Cluster:
    """N nodes of one system on one simulated network, with fault actions and metrics."""

    def __init__(self, system, *, seed: int, partitions: int = 1024, replicas: int = 1,
                 network: Network | None = None, sample_interval_s: float = 0.5,
                 check_cores: bool = True) -> None:
        self.sim = Simulation(seed, network=network)
        #: The system's invariants (``simulations.invariants``) are checked after every step;
        #: this adds the costly one, every touched membership core's own index check.
        self.check_cores = check_cores
        self.placement = PlacementSettings(partitions, replicas)
        self.system = system
        self.nodes: dict[str, Node] = {}
        self.metrics = Recorder(self, sample_interval_s)
        self._ideal: PlacementTable | None = None
        system.attach(self)

    # ------------------------------------------------------------------ building

    @staticmethod
    def node_id(index: int) -> str:
        """The id of the node added ``index``-th (0 first)."""
        return f"n{index:03d}"

    def add_node(self, weight: float = 1.0, node_id: str | None = None) -> Node:
        index = len(self.nodes)
        node_id = node_id or self.node_id(index)
        node = self.system.make_node(self, node_id, index, weight)
        self.nodes[node_id] = node
        self.sim.register(node)
        return node

    def seed_addrs(self, node_id: str) -> list[tuple[str, int]]:
        """Up to three running members other than ``node_id`` (lowest ids first)."""
        out = []
        for n in self.nodes.values():
            if n.up and not n.leaving and n.node_id != node_id and n.addr is not None:
                out.append(n.addr)
                if len(out) == 3:
                    break
        return out

    def bootstrap(self, n: int, weights: Iterable[float] | None = None) -> None:
        """Start ``n`` nodes within the first second, then run until the system settles."""
        weights = list(weights) if weights is not None else [1.0] * n
        rng = self.sim.scenario_rng
        first = self.add_node(weights[0])
        first.start()
        for w in weights[1:]:
            node = self.add_node(w)
            self.sim.at(rng.random(), node.start)
        deadline = self.system.warmup_max_s
        while not (self.sim.now >= 1.0 and self.system.settled(self)):
            if self.sim.now >= deadline:
                raise SettleError(f"{self.system.name}: {n} nodes did not settle within {deadline:.0f} s "
                                  f"(seed {self.sim.seed})")
            self.sim.run_until(self.sim.now + 0.5)
        self._ideal = PlacementTable.build(self._truth(), self.placement.partitions, self.placement.replicas,
                                           self.placement.seed)

    def run(self, duration_s: float, progress: Callable[[float, float], None] | None = None) -> dict[str, Any]:
        """Measure for ``duration_s`` simulated seconds from now; return the metrics."""
        wall0 = time.perf_counter()
        self.metrics.begin()
        t0 = self.sim.now
        step = max(1.0, duration_s / 100)
        t = t0
        while t < t0 + duration_s:
            t = min(t0 + duration_s, t + step)
            self.sim.run_until(t)
            if progress is not None:
                progress(t - t0, duration_s)
        result = self.metrics.result()
        result["wall_s"] = round(time.perf_counter() - wall0, 3)
        result["steps"] = self.sim.steps
        return result

    # ------------------------------------------------------------------ truth and optimum

    def _truth(self) -> dict[str, float]:
        return {n.node_id: n.weight for n in self.nodes.values() if n.up and not n.leaving}

    def _membership_changed(self) -> None:
        if self._ideal is None:
            return
        new = self._ideal.with_members(self._truth())
        self.metrics.note_optimal(len(self._ideal.moved(new, leaders=True)))
        self._ideal = new

    # ------------------------------------------------------------------ fault actions

    def join(self, count: int = 1, weight: float = 1.0) -> list[str]:
        """Start ``count`` brand-new nodes."""
        ids = []
        for _ in range(count):
            node = self.add_node(weight)
            node.start()
            ids.append(node.node_id)
        self.metrics.action("join", ids)
        self._membership_changed()
        return ids

    def crash(self, node_ids: Iterable[str]) -> None:
        ids = [i for i in node_ids if self.nodes[i].up]
        for i in ids:
            self.nodes[i].crash()
        self.metrics.action("crash", ids)
        self._membership_changed()

    def restart(self, node_ids: Iterable[str]) -> None:
        """Start a new process with the same id and address (crashing the old one if needed)."""
        ids = list(node_ids)
        for i in ids:
            node = self.nodes[i]
            if node.up:
                node.crash()
            node.start()
        self.metrics.action("restart", ids)
        self._membership_changed()

    def leave(self, node_ids: Iterable[str]) -> None:
        ids = [i for i in node_ids if self.nodes[i].up]
        for i in ids:
            self.nodes[i].leave()
        self.metrics.action("leave", ids)
        self._membership_changed()

    def set_weight(self, node_ids: Iterable[str], weight: float) -> None:
        ids = [i for i in node_ids if self.nodes[i].up]
        for i in ids:
            self.nodes[i].set_weight(weight)
        self.metrics.action(f"weight={weight:g}", ids)
        self._membership_changed()

    def set_weights(self, weights: dict[str, float]) -> None:
        """Several nodes' weights at once, one action (a rebalance: each node sets its own)."""
        ids = [i for i in sorted(weights) if self.nodes[i].up]
        for i in ids:
            self.nodes[i].set_weight(weights[i])
        self.metrics.action("weights", ids)
        self._membership_changed()

    def stall(self, node_ids: Iterable[str], seconds: float) -> None:
        ids = [i for i in node_ids if self.nodes[i].up]
        for i in ids:
            self.nodes[i].stall(seconds)
        self.metrics.action("stall", ids, membership_change=False)

    def slow(self, node_ids: Iterable[str], lag_s: float) -> None:
        """Every datagram and timer of these nodes is handled ``lag_s`` late from now on."""
        ids = list(node_ids)
        for i in ids:
            self.nodes[i].lag_s = lag_s
        self.metrics.action("slow", ids, membership_change=False)

    def partition(self, side_a: Iterable[str], side_b: Iterable[str], *, both_ways: bool = True) -> None:
        side_a, side_b = list(side_a), list(side_b)
        self.sim.network.cut(side_a, side_b, both_ways=both_ways)
        self.metrics.action("partition", side_a + side_b if both_ways else side_a)

    def heal(self) -> None:
        self.sim.network.heal()
        self.metrics.action("heal", [])

    def set_loss(self, loss: float) -> None:
        self.sim.network.default.loss = loss
        self.metrics.action(f"loss={loss:g}", [], membership_change=False)


def progress_bar(prefix: str) -> Callable[[float, float], None]:
    """A one-line progress display on stderr (simulated seconds done / total, wall time)."""
    wall0 = time.perf_counter()

    def show(done: float, total: float) -> None:
        frac = done / total if total else 1.0
        bar = "#" * int(30 * frac)
        sys.stderr.write(f"\r{prefix} [{bar:<30}] {done:7.0f}/{total:.0f} s simulated, "
                         f"{time.perf_counter() - wall0:6.1f} s wall")
        if frac >= 1.0:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show
