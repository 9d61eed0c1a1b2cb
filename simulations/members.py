"""The membership core alone on the simulator: a small deterministic harness for its tests.

``MembershipSim`` runs N ``Swim`` processes on the engine every other simulation uses
(``simulations.engine``: one clock, one event heap, the network model, process stalls, the
per-step invariants), without placement or metrics, and lets a test act on them directly:
start or restart a process with any config, metadata, incarnation or address; crash, freeze or
slow it; cut or heal links; set packet loss; call the core's API or hand it raw bytes; then run
simulated time forward until a condition holds. ``tests/test_membership_*.py`` and
``benchmarks/bench_membership.py`` use it.

``MemberNode`` drives its core as the asyncio driver (``membership.aio``) does: the shared
drain (``membership.driver``) after every input, then one timer re-armed whenever
``get_timer()`` changes (a superseded one is ignored when it fires). Its ``lag_s`` (``slow``)
delays every datagram it receives and is reported as event-loop lag at each of its timers; its
timers are not delayed (``SwimNode`` delays them too). A frozen process (``freeze``) handles what
arrived, in order, when it thaws, and first reports how late its loop woke up.

Every core's own index check (``Swim.check_invariants``) and the self-view invariant run after
every step, and after every direct action of a test, unless ``check_invariants=False``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

from membership import MemberEvent, MembershipConfig, Meta, Swim
from membership.driver import drain
from membership.messages import Addr, Event

from . import invariants
from .engine import LinkModel, Network, Simulation
from .nodes import Node

__all__ = ["MemberNode", "MembershipSim", "build_cluster"]


class MemberNode(Node):
    """A process running only the membership core (see the module docstring)."""

    has_view = True
    addr: Addr  # always set (given at creation, changed by a restart at another address)
    #: The core of the current process, or of the last one once crashed (readable, for the test).
    #: Set by ``start``, which ``MembershipSim.add`` calls on every node it creates: a node a
    #: test can reach always has one.
    core: Swim

    def __init__(self, net: MembershipSim, node_id: str, index: int, addr: Addr) -> None:
        super().__init__(net.sim, node_id, index, 1.0)
        self.net = net
        self.addr = addr
        #: Every event of the current process's core, in order (a restart starts a new list).
        self.events: list[Event] = []
        self._timer_at: float | None = None

    # Not Node.start's signature: a test starts a membership process with its own config, metadata,
    # incarnation and seeds, and only through MembershipSim.add (never the generic Node.start()).
    def start(  # type: ignore[override]
            self, config: MembershipConfig, meta: Meta | None, incarnation: int, seeds: list[Addr]) -> None:
        super().start()
        now = self.sim.now
        self.core = Swim(config, self.node_id, self.addr, meta=meta, rng=self.sim.process_rng(), now=now,
                         incarnation=incarnation)
        self.events = []
        self._timer_at = None
        self.core.join(seeds, now)
        self._flush()

    def crash(self) -> None:
        """The process stops; its core stays readable (its last state, for the test)."""
        super().crash()
        self._timer_at = None

    def leave(self) -> None:
        """Announce the leave; the process runs on until crashed (as a test decides)."""
        self.core.leave(self.sim.now)
        self._flush()

    def loop_lag(self, lag_s: float) -> None:
        self.core.report_loop_lag(lag_s, self.sim.now)

    def receive(self, data: bytes, src: Addr) -> None:
        self.core.receive_datagram(data, src, self.sim.now)
        self._flush()

    def live_view(self) -> frozenset[str] | None:
        return frozenset(m.node_id for m in self.core.live_members()) if self.up else None

    def view_token(self) -> object:
        return self.core.view_checksum if self.core is not None else None

    def _timer(self, t: float) -> None:
        if self._timer_at != t:
            return  # superseded
        self._timer_at = None
        if self.lag_s:
            self.core.report_loop_lag(self.lag_s, self.sim.now)
        self.core.handle_timer(self.sim.now)
        self._flush()

    def _send(self, data: bytes, dst: Addr) -> None:
        on_send = self.net.on_send
        if on_send is not None:
            on_send(self.sim.now, self.addr, dst, data)
        self.sim.send(self, data, dst)

    def _flush(self) -> None:
        sim = self.sim
        sim.touched.append(self)
        drain(self.core, self._send, self.events.append)
        t = self.core.get_timer()
        if t is not None:
            t = max(t, sim.now)
            if t != self._timer_at:
                self._timer_at = t
                sim.node_at(self, t, self._timer, t)


class MembershipSim:
    """N membership cores on one simulated network, for tests (see the module docstring).

    Nodes are named by the test; each gets the address ``("10.0.0.1", 7000 + k)`` unless given
    one. ``latency_s`` + exponential jitter of mean ``jitter_s`` is every datagram's delay."""

    def __init__(self, seed: int = 0, *, latency_s: float = 0.001, jitter_s: float = 0.0005,
                 loss: float = 0.0, config: MembershipConfig | None = None,
                 check_invariants: bool = True) -> None:
        self.seed = seed
        self.config = config or MembershipConfig()
        self.sim = Simulation(seed, network=Network(LinkModel(latency_s, jitter_s, loss)),
                              mtu_bytes=self.config.mtu_bytes)
        if check_invariants:
            self.sim.invariants += [invariants.SelfView(), invariants.swim_core_indexes]
        self.nodes: dict[str, MemberNode] = {}
        #: Called as on_send(now, src_addr, dst_addr, data) for every datagram a node sends
        #: (before loss and cut links).
        self.on_send: Callable[[float, Addr, Addr, bytes], None] | None = None
        self._ports = itertools.count(7000)

    # --- building the cluster ---

    @property
    def now(self) -> float:
        return self.sim.now

    @property
    def loss(self) -> float:
        return self.sim.network.default.loss

    @loss.setter
    def loss(self, value: float) -> None:
        self.sim.network.default.loss = value

    @property
    def datagrams(self) -> int:
        return self.sim.datagrams

    @property
    def max_datagram(self) -> int:
        return self.sim.max_datagram

    def add(self, node_id: str, *, seeds: Iterable[str] = (), config: MembershipConfig | None = None,
            meta: Meta | None = None, incarnation: int = 0, addr: Addr | None = None) -> MemberNode:
        """Start a process (a restart, if ``node_id`` ran before: crashed first if it still
        runs, same address unless ``addr``) and join through the ``seeds`` (node ids)."""
        sim = self.sim
        node = self.nodes.get(node_id)
        if node is None:
            node = MemberNode(self, node_id, len(self.nodes), addr or ("10.0.0.1", next(self._ports)))
            self.nodes[node_id] = node
        else:
            if node.up:
                node.crash()
            old = node.addr
            if addr is not None and addr != old:
                if sim.by_addr.get(old) is node:
                    del sim.by_addr[old]  # nobody listens at the old address any more
                node.addr = addr
        sim.register(node)
        config = config or self.config
        sim.mtu_bytes = max(sim.mtu_bytes, config.mtu_bytes)
        node.start(config, meta, incarnation, [self.nodes[s].addr for s in seeds])
        sim.check_invariants()
        return node

    def crash(self, node_id: str) -> None:
        """Stop a node abruptly: it neither sends, receives nor runs timers any more."""
        self.nodes[node_id].crash()

    def freeze(self, node_id: str, duration_s: float) -> None:
        """Stall a node's event loop for ``duration_s`` from now (GC, swapping, a paused VM)."""
        self.nodes[node_id].stall(duration_s)

    def slow(self, node_id: str, lag_s: float) -> None:
        """From now on the node handles every datagram ``lag_s`` late (a CPU-starved process)
        and its loop reports that much lag at each timer."""
        self.nodes[node_id].lag_s = lag_s

    def partition(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        """Cut every link between the two sides, both ways."""
        self.sim.network.cut(side_a, side_b)

    def heal(self) -> None:
        self.sim.network.heal()

    def call(self, node_id: str, fn: Callable[[Swim, float], object]) -> None:
        """Run ``fn(core, now)`` on a node (e.g. ``lambda c, now: c.leave(now)``) and flush it."""
        node = self.nodes[node_id]
        fn(node.core, self.now)
        node._flush()
        self.sim.check_invariants()

    def inject(self, node_id: str, data: bytes, src: Addr = ("10.9.9.9", 9999)) -> None:
        """Deliver raw bytes to a node right now (for bad-input tests)."""
        self.nodes[node_id].receive(data, src)
        self.sim.check_invariants()

    # --- running ---

    def run_until(self, t: float) -> None:
        self.sim.run_until(t)

    def run_for(self, dt: float) -> None:
        self.sim.run_until(self.now + dt)

    def run_until_true(self, pred: Callable[[], bool], timeout_s: float, check_every_s: float = 0.05) -> bool:
        """Advance simulated time until ``pred()`` holds (True) or ``timeout_s`` passes (False)."""
        deadline = self.now + timeout_s
        while self.now < deadline:
            if pred():
                return True
            self.run_until(min(deadline, self.now + check_every_s))
        return pred()

    # --- observing ---

    def status(self, observer: str, subject: str) -> str | None:
        info = self.nodes[observer].core.member(subject)
        return None if info is None else info.status

    def up_nodes(self) -> list[MemberNode]:
        return [n for n in self.nodes.values() if n.up]

    def converged(self, ids: Iterable[str] | None = None) -> bool:
        """Every up node (or each of ``ids``) sees exactly the up nodes as live, and nobody else."""
        ids = list(ids) if ids is not None else [n.node_id for n in self.up_nodes()]
        want = frozenset(ids)
        return all(self.nodes[i].live_view() == want for i in ids)

    def event_kinds(self, node_id: str, subject: str) -> list[str]:
        return [e.kind for e in self.nodes[node_id].events
                if isinstance(e, MemberEvent) and e.member.node_id == subject]


def build_cluster(n: int, seed: int = 0, config: MembershipConfig | None = None,
                  settle_s: float = 10.0, **kwargs) -> MembershipSim:
    """n nodes 'n0'..'n{n-1}', each joining through n0, then run until converged."""
    net = MembershipSim(seed, config=config, **kwargs)
    net.add("n0")
    for i in range(1, n):
        net.add(f"n{i}", seeds=["n0"])
    assert net.run_until_true(net.converged, settle_s), "cluster did not converge"
    return net
