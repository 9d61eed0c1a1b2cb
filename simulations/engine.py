"""Discrete-event engine: simulated clock, network and node faults around N node models.

Theory of operation
===================

One ``Simulation`` is one run. Time is a float of simulated seconds; nothing reads a real
clock. Work is a heap of ``(time, seq, fn, args)``: ``seq`` is a global counter, so events due
at the same instant run in the order they were scheduled and a run never depends on heap
tie-breaking. All randomness comes from one ``random.Random(seed)``: the network, the scenario
and every node process get their own ``random.Random`` seeded from it in a fixed order, so the
same seed reproduces the same run, event for event (TigerBeetle's VOPR, FoundationDB's
simulation).

Nodes (``simulations.nodes``, ``simulations.leases``) are driven through the engine only:

* ``send(src, data, dst_addr)`` carries real datagram bytes (the membership codec's output)
  through the network model: per-link delay, loss, blocked links (full or asymmetric
  partitions), then schedules delivery to whichever process listens at ``dst_addr`` then.
* ``node_at(node, t, fn, *args)`` schedules work for a node's *process*. Work for a crashed or
  replaced process is dropped (its ``proc`` number no longer matches). Work that falls inside
  a stall (the process's event loop is frozen) waits until the stall ends, in its original
  order, and the process is told how late its loop woke up.

Invariants are functions ``f(sim) -> str | None`` checked after every step; a message is a
violation and raises ``InvariantViolation`` naming the invariant (the function's ``__name__``),
the seed and the time, so the failure is reproduced with ``placement simulate ... --seed K``.
They stay cheap by looking only at what the step changed: every node model appends itself to
``sim.touched`` whenever its state changes (``simulations.invariants`` holds the checks of the
SWIM node models). Checks read state and never draw randomness or schedule work, so a run is the
same with or without them.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["InvariantViolation", "LinkModel", "Network", "Simulation", "OWNERSHIP_FIRST_BYTE", "TRAFFIC_FIELDS"]

#: The first byte of an ownership datagram (``ownership.wire.MAGIC``: ``0xc1``, never used in
#: msgpack; membership datagrams start with ``b"SW"``). The engine counts those apart from the
#: gossip without importing the ownership package; a test checks the two agree.
OWNERSHIP_FIRST_BYTE = 0xC1

#: Per-node traffic counters (attributes of every node model, ``simulations.nodes.Node``), kept
#: by ``Simulation.send`` (sent: every datagram a process puts on the wire, also to an address
#: nobody listens at) and ``Simulation._deliver`` (received: every datagram that reaches a
#: running process, before a stall delays its handling). ``own_*``: the ownership datagrams
#: among them (``OWNERSHIP_FIRST_BYTE``); gossip is the difference.
TRAFFIC_FIELDS = ("sent", "sent_bytes", "own_sent", "own_sent_bytes",
                  "received", "received_bytes", "own_received", "own_received_bytes")


class InvariantViolation(AssertionError):
    """An invariant failed. The message names the invariant, the seed and the simulated time
    (to reproduce it) and what was wrong (the checks name the nodes and partitions)."""

    def __init__(self, seed: int, now: float, what: str, invariant: str = "simulation") -> None:
        super().__init__(f"invariant {invariant!r} violated at t={now:.6f}s "
                         f"(reproduce with --seed {seed}): {what}")
        self.seed = seed
        self.now = now
        self.what = what
        self.invariant = invariant


@dataclass
class LinkModel:
    """Delay of one datagram: ``base_s`` + exponential jitter with mean ``jitter_s``; ``loss``."""

    base_s: float = 0.0005
    jitter_s: float = 0.0005
    loss: float = 0.0

    def delay(self, rng: random.Random) -> float:
        if self.jitter_s <= 0:
            return self.base_s
        # rng.expovariate(1 / jitter_s), spelled out (the same draw and arithmetic as CPython's)
        # to save a call per datagram.
        return self.base_s + -math.log(1.0 - rng.random()) / (1.0 / self.jitter_s)


@dataclass
class Network:
    """The simulated network: a default link, per-link overrides and blocked directed links."""

    default: LinkModel = field(default_factory=LinkModel)
    #: (src_id, dst_id) -> LinkModel overriding the default for that direction.
    links: dict[tuple[str, str], LinkModel] = field(default_factory=dict)
    #: Directed (src_id, dst_id) pairs that drop everything (partitions).
    blocked: set[tuple[str, str]] = field(default_factory=set)

    def cut(self, side_a: Iterable[str], side_b: Iterable[str], *, both_ways: bool = True) -> None:
        """Block a -> b for every a in side_a, b in side_b (and b -> a unless asymmetric)."""
        side_b = list(side_b)
        for a in side_a:
            for b in side_b:
                self.blocked.add((a, b))
                if both_ways:
                    self.blocked.add((b, a))

    def heal(self) -> None:
        self.blocked.clear()

    def link(self, src: str, dst: str) -> LinkModel:
        return self.links.get((src, dst), self.default) if self.links else self.default


class Simulation:
    """The clock, the event heap, the network, the nodes and the invariants of one run."""

    def __init__(self, seed: int, *, network: Network | None = None, mtu_bytes: int = 1400) -> None:
        self.seed = seed
        self.now = 0.0
        self._rng = random.Random(seed)
        self.net_rng = random.Random(self._rng.getrandbits(64))
        self.scenario_rng = random.Random(self._rng.getrandbits(64))
        self._proc_rng = random.Random(self._rng.getrandbits(64))
        self.network = network or Network()
        self.mtu_bytes = mtu_bytes
        self.nodes: dict[str, Any] = {}
        self.by_addr: dict[tuple[str, int], Any] = {}
        self.invariants: list[Callable[[Simulation], str | None]] = []
        self._heap: list[tuple[float, int, Callable[..., None], tuple]] = []
        self._seq = itertools.count()
        self.steps = 0
        #: The node whose process ran in the current step (None for network/scenario steps).
        self.current: Any = None
        #: Nodes whose state changed since the invariants last ran (a node may appear twice);
        #: invariants look only at these, so checking after every step stays cheap.
        self.touched: list[Any] = []
        self.datagrams = 0
        self.datagram_bytes = 0
        self.max_datagram = 0
        #: Called as on_send(sim, src_node, dst_node_or_None, nbytes) for every datagram sent.
        self.on_send: Callable[..., None] | None = None

    # ------------------------------------------------------------------ randomness

    def process_rng(self) -> random.Random:
        """A fresh RNG for one node process (derived from the run's seed, in creation order)."""
        return random.Random(self._proc_rng.getrandbits(64))

    # ------------------------------------------------------------------ scheduling

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` at simulated time ``t`` (never in the past)."""
        heapq.heappush(self._heap, (max(t, self.now), next(self._seq), fn, args))

    def node_at(self, node: Any, t: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` in ``node``'s current process at ``t`` (dropped if it died)."""
        heapq.heappush(self._heap, (max(t, self.now), next(self._seq), self._run_in_process,
                                    (node, node.proc, fn, args)))

    def _run_in_process(self, node: Any, proc: int, fn: Callable[..., None], args: tuple) -> None:
        if node.proc != proc or not node.up:
            return
        if self.now < node.stalled_until:
            # The process is frozen: the work waits (FIFO: seq grows) and sees the lag later.
            self.at(node.stalled_until, self._run_in_process, node, proc, fn, args)
            return
        if node.pending_lag_s:
            lag, node.pending_lag_s = node.pending_lag_s, 0.0
            node.loop_lag(lag)
        self.current = node
        fn(*args)

    def run_until(self, t: float, tick: Callable[[float], None] | None = None) -> None:
        """Process every event due up to ``t``; invariants are checked after each one."""
        heap = self._heap
        pop = heapq.heappop
        invariants = self.invariants
        touched = self.touched
        while heap and heap[0][0] <= t:
            when, _, fn, args = pop(heap)
            if when < self.now:
                self.fail(f"time went backwards: event at {when} after {self.now}", "monotonic time")
            self.now = when
            self.current = None
            fn(*args)
            self.steps += 1
            for check in invariants:
                what = check(self)
                if what is not None:
                    self.fail(what, check)
            if touched:
                touched.clear()
        self.now = max(self.now, t)

    def check_invariants(self) -> None:
        """Check the invariants now, as after a step: for changes made outside a step (a test
        harness acting on a node directly)."""
        for check in self.invariants:
            what = check(self)
            if what is not None:
                self.fail(what, check)
        self.touched.clear()

    def fail(self, what: str, invariant: Any = None) -> None:
        """Raise ``InvariantViolation``; ``invariant`` is the failed check (its ``__name__``
        names it) or the name of one of the engine's own checks."""
        if invariant is None or isinstance(invariant, str):
            name = invariant or "simulation"
        else:
            name = getattr(invariant, "__name__", type(invariant).__name__)
        raise InvariantViolation(self.seed, self.now, what, name)

    # ------------------------------------------------------------------ network

    def register(self, node: Any) -> None:
        self.nodes[node.node_id] = node
        if getattr(node, "addr", None) is not None:
            self.by_addr[node.addr] = node

    def send(self, src: Any, data: bytes, dst_addr: tuple[str, int]) -> None:
        """Put one datagram (real bytes) on the wire from ``src`` to ``dst_addr``."""
        size = len(data)
        self.datagrams += 1
        self.datagram_bytes += size
        src.sent += 1
        src.sent_bytes += size
        if data[0] == OWNERSHIP_FIRST_BYTE:
            src.own_sent += 1
            src.own_sent_bytes += size
        if size > self.max_datagram:
            self.max_datagram = size
            if size > self.mtu_bytes:
                self.fail(f"{src.node_id} sent a {size}-byte datagram (mtu {self.mtu_bytes})", "datagram within mtu")
        dst = self.by_addr.get(dst_addr)
        if self.on_send is not None:
            self.on_send(self, src, dst, size)
        if dst is None:
            return
        net = self.network
        if net.blocked and (src.node_id, dst.node_id) in net.blocked:
            return
        link = net.links.get((src.node_id, dst.node_id), net.default) if net.links else net.default
        if link.loss and self.net_rng.random() < link.loss:
            return
        # link.delay(self.net_rng), inlined (the same draw and arithmetic; once per datagram)
        delay = link.base_s + -math.log(1.0 - self.net_rng.random()) / (1.0 / link.jitter_s) \
            if link.jitter_s > 0 else link.base_s
        arrive = self.now + delay + dst.lag_s  # >= now
        # Delivered to whichever process listens at the address on arrival (a restarted
        # process with the same address gets datagrams meant for its predecessor, as with UDP).
        heapq.heappush(self._heap, (arrive, next(self._seq), self._deliver, (dst, data, src.addr)))

    def _deliver(self, dst: Any, data: bytes, src_addr: tuple[str, int]) -> None:
        if not dst.up:
            return
        dst.received += 1
        dst.received_bytes += len(data)
        if data[0] == OWNERSHIP_FIRST_BYTE:
            dst.own_received += 1
            dst.own_received_bytes += len(data)
        if self.now < dst.stalled_until or dst.pending_lag_s:
            self._run_in_process(dst, dst.proc, dst.receive, (data, src_addr))
            return
        self.current = dst  # the common case of _run_in_process, inlined (once per datagram)
        dst.receive(data, src_addr)
