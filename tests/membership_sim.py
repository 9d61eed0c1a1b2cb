"""Deterministic in-memory network + fake clock for driving many ``Swim`` cores.

A discrete-event loop: a heap of datagram deliveries and core timers, processed in time order.
Everything random (latency jitter, loss, the cores' RNGs) derives from one seed, so a run is
reproduced exactly. Used by the membership tests and ``benchmarks/bench_membership.py``.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field
from typing import Callable, Iterable

from membership import MembershipConfig, MemberEvent, Meta, Swim
from membership.messages import Addr, Event


@dataclass
class SimNode:
    node_id: str
    addr: Addr
    core: Swim
    events: list[Event] = field(default_factory=list)
    up: bool = True


class SimNetwork:
    def __init__(self, seed: int = 0, *, latency_s: float = 0.001, jitter_s: float = 0.0005,
                 loss: float = 0.0, config: MembershipConfig | None = None,
                 check_invariants: bool = False) -> None:
        self.now = 0.0
        self.seed = seed
        self.rng = random.Random(seed)
        self.latency_s = latency_s
        self.jitter_s = jitter_s
        self.loss = loss
        self.config = config or MembershipConfig()
        #: Call ``core.check_invariants()`` after every step of a core (O(N) each: small runs).
        self.check_invariants = check_invariants
        self.nodes: dict[str, SimNode] = {}
        self.by_addr: dict[Addr, SimNode] = {}
        self.blocked: set[tuple[Addr, Addr]] = set()
        #: node_id -> extra seconds before that node handles anything (a CPU-starved process):
        #: datagrams reach it late, and its driver reports that much event-loop lag.
        self.slow: dict[str, float] = {}
        #: node_id -> simulated time until which the node is frozen (a stalled process: GC,
        #: swapping, CPU starvation). Its datagrams queue up and are handled when it thaws,
        #: before its overdue timers, as asyncio does after a stall.
        self.frozen_until: dict[str, float] = {}
        self.max_datagram = 0
        self.datagrams = 0
        #: Optional hook called with (now, src, dst, data) for every datagram sent.
        self.on_send: Callable[[float, Addr, Addr, bytes], None] | None = None
        self._heap: list[tuple] = []
        self._counter = itertools.count()
        self._timer_at: dict[str, float | None] = {}
        self._stalled_at: dict[str, float] = {}
        self._ports = itertools.count(7000)

    # --- building the cluster ---

    def add(self, node_id: str, *, seeds: Iterable[str] = (), config: MembershipConfig | None = None,
            meta: Meta | None = None, incarnation: int = 0, addr: Addr | None = None) -> SimNode:
        """Start a core (replacing a crashed one with the same id: a restart) and join seeds."""
        old = self.nodes.get(node_id)
        if addr is None:
            addr = old.addr if old is not None else ("10.0.0.1", next(self._ports))
        core = Swim(config or self.config, node_id, addr, meta=meta,
                    rng=random.Random(f"{self.seed}/{node_id}/{self.now}"), now=self.now,
                    incarnation=incarnation)
        node = SimNode(node_id, addr, core)
        self.nodes[node_id] = node
        self.by_addr[addr] = node
        core.join([self.nodes[s].addr for s in seeds], self.now)
        self._after(node)
        return node

    def crash(self, node_id: str) -> None:
        """Stop a node abruptly: it neither sends, receives nor runs timers any more."""
        self.nodes[node_id].up = False

    def freeze(self, node_id: str, duration_s: float) -> None:
        """Stall a node for ``duration_s`` from now (see ``frozen_until``)."""
        self.frozen_until[node_id] = self.now + duration_s
        self._stalled_at[node_id] = self.now

    def partition(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        for a in side_a:
            for b in side_b:
                self.blocked.add((self.nodes[a].addr, self.nodes[b].addr))
                self.blocked.add((self.nodes[b].addr, self.nodes[a].addr))

    def heal(self) -> None:
        self.blocked.clear()

    def call(self, node_id: str, fn: Callable[[Swim, float], object]) -> None:
        """Run ``fn(core, now)`` on a node (e.g. ``lambda c, now: c.leave(now)``) and flush it."""
        node = self.nodes[node_id]
        fn(node.core, self.now)
        self._after(node)

    def inject(self, node_id: str, data: bytes, src: Addr = ("10.9.9.9", 9999)) -> None:
        """Deliver raw bytes to a node right now (for bad-input tests)."""
        node = self.nodes[node_id]
        node.core.receive_datagram(data, src, self.now)
        self._after(node)

    # --- running ---

    def run_until(self, t: float) -> None:
        while self._heap and self._heap[0][0] <= t:
            self._step()
        self.now = max(self.now, t)

    def run_for(self, dt: float) -> None:
        self.run_until(self.now + dt)

    def run_until_true(self, pred: Callable[[], bool], timeout_s: float, check_every_s: float = 0.05) -> bool:
        """Advance simulated time until ``pred()`` holds (True) or ``timeout_s`` passes (False)."""
        deadline = self.now + timeout_s
        while self.now < deadline:
            if pred():
                return True
            self.run_until(min(deadline, self.now + check_every_s))
        return pred()

    def _step(self) -> None:
        t, _, kind, payload = heapq.heappop(self._heap)
        self.now = max(self.now, t)
        if kind == "timer":
            node_id, core = payload
            node = self.nodes.get(node_id)
            if node is None or node.core is not core or not node.up or self._timer_at.get(node_id) != t:
                return
            thaw = self.frozen_until.get(node_id, 0.0)
            if self.now < thaw:  # overdue timers run just after the queued datagrams
                self._timer_at[node_id] = thaw + 1e-6
                heapq.heappush(self._heap, (thaw + 1e-6, next(self._counter), "timer", payload))
                return
            self._timer_at[node_id] = None
            if node_id in self._stalled_at:  # the driver's lag monitor notices the stall
                core.report_loop_lag(self.now - self._stalled_at.pop(node_id), self.now)
            if node_id in self.slow:
                core.report_loop_lag(self.slow[node_id], self.now)
            core.handle_timer(self.now)
            self._after(node)
        else:
            data, src, dst = payload
            node = self.by_addr.get(dst)
            if node is None or not node.up:
                return
            thaw = self.frozen_until.get(node.node_id, 0.0)
            if self.now < thaw:
                heapq.heappush(self._heap, (thaw, next(self._counter), "dgram", payload))
                return
            node.core.receive_datagram(data, src, self.now)
            self._after(node)

    def _after(self, node: SimNode) -> None:
        if not node.up:
            node.core.datagrams_to_send()
            return
        for data, dst in node.core.datagrams_to_send():
            self.datagrams += 1
            self.max_datagram = max(self.max_datagram, len(data))
            if self.on_send is not None:
                self.on_send(self.now, node.addr, dst, data)
            if (node.addr, dst) in self.blocked or (self.loss and self.rng.random() < self.loss):
                continue
            delay = self.latency_s + self.rng.random() * self.jitter_s
            receiver = self.by_addr.get(dst)
            if receiver is not None:
                delay += self.slow.get(receiver.node_id, 0.0)
            heapq.heappush(self._heap, (self.now + delay, next(self._counter), "dgram", (data, node.addr, dst)))
        node.events.extend(node.core.events())
        if self.check_invariants:
            node.core.check_invariants()
        t = node.core.get_timer()
        if t is not None:
            t = max(t, self.now)
            if t != self._timer_at.get(node.node_id):
                self._timer_at[node.node_id] = t
                heapq.heappush(self._heap, (t, next(self._counter), "timer", (node.node_id, node.core)))

    # --- observing ---

    def status(self, observer: str, subject: str) -> str | None:
        info = self.nodes[observer].core.member(subject)
        return None if info is None else info.status

    def up_nodes(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.up]

    def converged(self, ids: Iterable[str] | None = None) -> bool:
        """Every up node (or each of ``ids``) sees exactly the up nodes as live, and nobody else."""
        ids = list(ids) if ids is not None else [n.node_id for n in self.up_nodes()]
        want = set(ids)
        return all({m.node_id for m in self.nodes[i].core.live_members()} == want for i in ids)

    def event_kinds(self, node_id: str, subject: str) -> list[str]:
        return [e.kind for e in self.nodes[node_id].events
                if isinstance(e, MemberEvent) and e.member.node_id == subject]


def build_cluster(n: int, seed: int = 0, config: MembershipConfig | None = None,
                  settle_s: float = 10.0, **net_kwargs) -> SimNetwork:
    """n nodes 'n0'..'n{n-1}', each joining through n0, then run until converged; the cores'
    invariants are checked after every step unless ``check_invariants=False``."""
    net_kwargs.setdefault("check_invariants", True)
    net = SimNetwork(seed, config=config, **net_kwargs)
    net.add("n0")
    for i in range(1, n):
        net.add(f"n{i}", seeds=["n0"])
    assert net.run_until_true(net.converged, settle_s), "cluster did not converge"
    return net


def forge(config: MembershipConfig, sender: str, messages, *, seq: int = 1, epoch: int = 1) -> bytes:
    """A valid datagram from ``sender`` carrying ``messages`` (as another member would send)."""
    from membership.wire import Codec, Keyring

    codec = Codec(cluster=config.cluster_name, settings=config.cluster_settings, sender=sender,
                  epoch=epoch, keyring=Keyring(config.keys), mtu_bytes=config.mtu_bytes,
                  max_receive_bytes=config.max_receive_bytes)
    codec._seq = seq - 1
    return codec.seal([codec.encode_message(m) for m in messages])


def decode(config: MembershipConfig, data: bytes):
    """The messages of a datagram (for tests that look at traffic)."""
    from membership.wire import Codec, Keyring

    codec = Codec(cluster=config.cluster_name, settings=config.cluster_settings, sender="?",
                  epoch=0, keyring=Keyring(config.keys), mtu_bytes=config.mtu_bytes,
                  max_receive_bytes=config.max_receive_bytes)
    return codec.open(data).messages
