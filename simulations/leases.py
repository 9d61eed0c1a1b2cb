"""Lease-based baselines (the designs in ../shared/seeds), in the same harness and metrics.

The store (Azure blobs, Redis) is modelled as one linearisable service: a request leaves the
node, is applied atomically at ``send + latency`` (exponential, mean ``store_latency_s``) and
its answer reaches the node ``latency`` later. A lost request (network loss rate) is retried
after ``retry_timeout_s``. Answers go through the node's process, so a stalled or slow node
learns late and renews late - which is exactly where these designs hurt. Network partitions
between nodes do not affect the store (every node reaches it): the lease designs pay for a
central store with their latency, not with split-brain across a partition.

A node *believes it leads* the partitions whose lease it acquired and has not yet learned it
lost; it learns at its next renewal. That window is the dual ownership the seeds describe
(DurableTask: "two workers may own a partition for up to 10 s").

Models (parameters from the seeds):

``eventhubs``   EventProcessorHost (seed 001): every ``renew_s`` = 10 s a host renews its leases
                (30 s), lists all leases, grabs expired ones up to its fair share
                ceil(P / hosts) (hosts = owners of unexpired leases + itself), and when it grabbed
                none steals *one* lease from the biggest owner if ``biggest - mine >= 2``.
``durabletask`` DurableTask.AzureStorage (seed 004): same loop and lease times; takes expired
                leases up to its share and steals one lease per cycle from any worker above
                floor(P / workers) while it has fewer than that ("steal to balance").
``redis-race``  the Redis lease race of seed 000: partitions are challenged once per normal
                lease time (60 s); on a challenge every node waits ``(k + 0.5) * d`` (``(k - 1)
                * d`` if it runs the partition; k = partitions it runs, d = 0.25 s) and then races
                a SETNX; a processing loser shuts down and hands over; a winner whose previous
                owner never answers starts after the maximum shutdown time (10 s).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from .nodes import Node

__all__ = ["LeaseStore", "LeaseSystem", "EventHubsNode", "DurableTaskNode", "RedisRaceNode", "SYSTEMS"]


class _Lease:
    __slots__ = ("expires", "owner", "token")

    def __init__(self) -> None:
        self.owner: str | None = None
        self.expires = float("-inf")
        self.token = 0


class LeaseStore:
    """A linearisable lease table with latency. Operations are plain methods applied at once."""

    def __init__(self, cluster, partitions: int, latency_s: float, retry_timeout_s: float = 1.0) -> None:
        self.cluster = cluster
        self.sim = cluster.sim
        self.leases = [_Lease() for _ in range(partitions)]
        self.latency_s = latency_s
        self.retry_timeout_s = retry_timeout_s
        self._tokens = 0
        self.ops = 0
        self.kv: dict[Any, Any] = {}  # Redis-style keys for the race model

    def _latency(self) -> float:
        sim = self.sim
        lat = sim.net_rng.expovariate(1.0 / self.latency_s)
        loss = sim.network.default.loss
        while loss and sim.net_rng.random() < loss:
            lat += self.retry_timeout_s
        return lat

    def call(self, node: Node, op: Callable[[], Any], reply: Callable[[Any], None]) -> None:
        """Apply ``op()`` at the store one latency from now; deliver its result one later."""
        sim = self.sim

        def apply() -> None:
            self.ops += 1
            result = op()
            sim.node_at(node, sim.now + self._latency(), reply, result)

        sim.at(sim.now + self._latency(), apply)

    def new_token(self) -> int:
        self._tokens += 1
        return self._tokens

    # ---------------------------------------------------------------- blob-lease operations

    def renew(self, owner: str, held: dict[int, int], duration_s: float) -> dict[int, bool]:
        now = self.sim.now
        out = {}
        for p, token in held.items():
            lease = self.leases[p]
            ok = lease.token == token and lease.owner == owner
            if ok:
                lease.expires = now + duration_s
            out[p] = ok
        return out

    def snapshot(self) -> list[tuple[str | None, bool, int]]:
        """(owner, expired, token) of every lease, as a List Blobs would return."""
        now = self.sim.now
        return [(lease.owner, lease.expires <= now, lease.token) for lease in self.leases]

    def acquire(self, owner: str, partitions: list[int], duration_s: float) -> dict[int, int]:
        """Acquire expired leases; returns {partition: token} for those acquired."""
        now = self.sim.now
        got = {}
        for p in partitions:
            lease = self.leases[p]
            if lease.expires <= now:
                lease.owner, lease.expires, lease.token = owner, now + duration_s, self.new_token()
                got[p] = lease.token
        return got

    def steal(self, owner: str, p: int, seen_token: int, duration_s: float) -> int | None:
        """ChangeLease with the token read earlier: succeeds if nobody changed it since."""
        lease = self.leases[p]
        if lease.token != seen_token:
            return None
        lease.owner, lease.expires, lease.token = owner, self.sim.now + duration_s, self.new_token()
        return lease.token

    def release(self, owner: str, held: dict[int, int]) -> None:
        for p, token in held.items():
            lease = self.leases[p]
            if lease.token == token:
                lease.owner, lease.expires = None, float("-inf")


class LeaseNode(Node):
    """A worker whose control loop is a generator of store operations."""

    lease_s = 30.0
    renew_s = 10.0

    def __init__(self, sim, node_id: str, index: int, weight: float, store: LeaseStore) -> None:
        super().__init__(sim, node_id, index, weight)
        self.store = store
        self.partitions = len(store.leases)
        self.held: dict[int, int] = {}  # partition -> lease token: what we believe we own
        self.rng: random.Random | None = None  # the process's own (from start on)
        self.cycles = 0

    def start(self) -> None:
        super().start()
        self.held = {}
        self.rng = rng = self.sim.process_rng()
        # Hosts started together do not loop in lock-step.
        self.sim.node_at(self, self.sim.now + rng.random() * self.renew_s, self._cycle)

    def crash(self) -> None:
        super().crash()
        self.held = {}

    def leave(self) -> None:
        """Graceful close: stop processing, release every lease, exit."""
        if not self.up or self.leaving:
            return
        self.leaving = True
        held, self.held = self.held, {}
        self.store.call(self, lambda: self.store.release(self.node_id, held), lambda _: self.crash())

    def leads(self) -> np.ndarray:
        if not self.up or self.leaving:
            return np.zeros(0, dtype=np.int64)
        return np.fromiter(self.held, dtype=np.int64, count=len(self.held))

    def _cycle(self) -> None:
        if self.leaving:
            return
        self.cycles += 1
        self._drive(self.loop(), None)
        # The next cycle starts renew_s after this one started (a late process starts late).
        self.sim.node_at(self, self.sim.now + self.renew_s, self._cycle)

    def _drive(self, gen: Generator[Callable[[], Any], Any, None], value: Any) -> None:
        try:
            op = gen.send(value)
        except StopIteration:
            return
        self.store.call(self, op, lambda result: self._drive(gen, result))

    def loop(self) -> Generator[Callable[[], Any], Any, None]:
        """One pass: renew, list, grab expired up to the fair share, else maybe steal one."""
        store, me = self.store, self.node_id
        if self.held:
            held = dict(self.held)
            renewed = yield lambda: store.renew(me, held, self.lease_s)
            for p, ok in renewed.items():
                if not ok:
                    self.held.pop(p, None)  # lost (stolen or expired and taken): stop at once
        leases = yield store.snapshot
        live = [(p, owner, tok) for p, (owner, expired, tok) in enumerate(leases) if not expired]
        counts: dict[str, int] = {}
        for _, owner, _ in live:
            counts[owner] = counts.get(owner, 0) + 1
        counts.setdefault(me, 0)
        mine = len(self.held)
        hosts = len(counts)
        expired = [p for p, (owner, exp, _) in enumerate(leases) if exp]
        want = self.fair_share(hosts) - mine
        if want > 0 and expired:
            assert self.rng is not None  # started: the loop runs in a started process only
            self.rng.shuffle(expired)
            take = expired[:want]
            got = yield lambda: store.acquire(me, take, self.lease_s)
            self.held.update(got)
            return
        victim = self.steal_from(counts, mine, hosts)
        if victim is not None:
            theirs = [(p, tok) for p, owner, tok in live if owner == victim]
            assert self.rng is not None  # started: the loop runs in a started process only
            p, tok = self.rng.choice(theirs)
            token = yield lambda: store.steal(me, p, tok, self.lease_s)
            if token is not None:
                self.held[p] = token

    def fair_share(self, hosts: int) -> int:
        return math.ceil(self.partitions / hosts)

    def steal_from(self, counts: dict[str, int], mine: int, hosts: int) -> str | None:
        raise NotImplementedError


class EventHubsNode(LeaseNode):
    """EventProcessorHost: steal one lease from the biggest owner when biggest - mine >= 2."""

    def steal_from(self, counts: dict[str, int], mine: int, hosts: int) -> str | None:
        others = [(c, o) for o, c in counts.items() if o != self.node_id]
        if not others:
            return None
        biggest, owner = max(others, key=lambda x: (x[0], x[1]))
        return owner if biggest - mine >= 2 else None


class DurableTaskNode(LeaseNode):
    """DurableTask: below floor(P/hosts), steal one lease from the biggest worker above it."""

    def steal_from(self, counts: dict[str, int], mine: int, hosts: int) -> str | None:
        low = self.partitions // hosts
        if mine >= low:
            return None
        over = [(c, o) for o, c in counts.items() if c > low and o != self.node_id]
        return max(over)[1] if over else None


class RedisRaceNode(Node):
    """The Redis lease race of seed 000 (see the module docstring)."""

    normal_lease_s = 60.0
    max_lease_s = 180.0
    max_shutdown_s = 10.0
    min_grab_s = 30.0
    held_delay_s = 0.25
    tick_s = 1.0

    def __init__(self, sim, node_id: str, index: int, weight: float, store: LeaseStore) -> None:
        super().__init__(sim, node_id, index, weight)
        self.store = store
        self.partitions = len(store.leases)
        self.held: set[int] = set()
        self.next_challenge: list[float] = []
        self.rng: random.Random | None = None  # the process's own (from start on)

    def start(self) -> None:
        super().start()
        self.held = set()
        self.rng = rng = self.sim.process_rng()
        now = self.sim.now
        # Challenges spread over one normal lease time (the author's "once every normal lease
        # time"); aligned challenges make the least-loaded node win every race at once.
        self.next_challenge = [now + rng.random() * self.normal_lease_s for _ in range(self.partitions)]
        self.sim.node_at(self, now + rng.random() * self.tick_s, self._tick)

    def crash(self) -> None:
        super().crash()
        self.held = set()

    def leave(self) -> None:
        if not self.up or self.leaving:
            return
        self.leaving = True
        held, self.held = sorted(self.held), set()
        kv = self.store.kv

        def release() -> None:
            for p in held:
                if kv.get(("alloc", p)) == self.node_id:
                    del kv[("alloc", p)]
                    self._publish("released", p)
        self.store.call(self, release, lambda _: self.crash())

    def leads(self) -> np.ndarray:
        if not self.up or self.leaving:
            return np.zeros(0, dtype=np.int64)
        return np.fromiter(self.held, dtype=np.int64, count=len(self.held))

    # ---------------------------------------------------------------- pub/sub through the store

    def _publish(self, kind: str, p: int) -> None:
        """At the store (already applied): notify every running subscriber after a latency."""
        sim = self.sim
        for node in self.store.cluster.nodes.values():
            if node.up:
                sim.node_at(node, sim.now + self.store._latency(), node._notified, kind, p)

    def _tick(self) -> None:
        if self.leaving:
            return
        now = self.sim.now
        kv = self.store.kv
        for p in range(self.partitions):
            if p in self.held or self.next_challenge[p] > now:
                continue
            self.next_challenge[p] = now + self.normal_lease_s

            def challenge(p: int = p) -> None:
                grab = kv.get(("grab", p))
                t = self.sim.now
                if grab is not None and t - grab[1] <= self.max_lease_s:
                    return  # a race for p is in progress
                if grab is not None:  # a winner died mid-handover: clean up (step 1b)
                    kv.pop(("grab", p), None)
                    kv.pop(("alloc", p), None)
                self._publish("grab", p)
            self.store.call(self, challenge, lambda _: None)
        self.sim.node_at(self, now + self.tick_s, self._tick)

    def _notified(self, kind: str, p: int) -> None:
        if self.leaving:
            return
        if kind == "released":
            waiting = getattr(self, "_waiting", {})
            cont = waiting.pop(p, None)
            if cont is not None:
                cont()
            return
        # kind == "grab": reset our own challenge timer, wait by load, then race.
        now = self.sim.now
        assert self.rng is not None  # notified while running only (_publish)
        self.next_challenge[p] = now + self.normal_lease_s * (1.0 + 0.1 * self.rng.random())
        k = len(self.held)
        # The seed gives the owner's wait as "k * d minus half of d (so basically (k - 1) * d)";
        # we take (k - 1) * d: with (k - 0.5) * d an owner of k ties with a node of k - 1.
        delay = ((k - 1) if p in self.held else (k + 0.5)) * self.held_delay_s
        self.sim.node_at(self, now + max(0.0, delay), self._race, p)

    def _race(self, p: int) -> None:
        kv, me, store = self.store.kv, self.node_id, self.store

        def setnx() -> tuple[bool, str | None]:
            key = ("grab", p)
            if key in kv:  # the race was already decided (possibly in our favour)
                return kv[key][0] == me, kv.get(("alloc", p))
            kv[key] = (me, self.sim.now)
            return True, kv.get(("alloc", p))

        store.call(self, setnx, lambda result: self._raced(p, *result))

    def _raced(self, p: int, won: bool, allocated_to: str | None) -> None:
        kv, me, store = self.store.kv, self.node_id, self.store
        if not won:
            if p in self.held:  # lost the race for a partition we run: shut down, hand over
                self.held.discard(p)

                def handover() -> None:
                    if kv.get(("alloc", p)) == me:
                        del kv[("alloc", p)]
                    self._publish("released", p)
                store.call(self, handover, lambda _: None)
            return
        if p in self.held:
            self._start(p)
            return
        if allocated_to is None or allocated_to == me:
            self._start(p)
            return
        # Someone else runs it: wait for its "released", at most max_shutdown_s.
        waiting = self.__dict__.setdefault("_waiting", {})
        done = [False]

        def go() -> None:
            if not done[0]:
                done[0] = True
                waiting.pop(p, None)
                self._start(p)
        waiting[p] = go
        self.sim.node_at(self, self.sim.now + self.max_shutdown_s, go)

    def _start(self, p: int) -> None:
        kv, me, store = self.store.kv, self.node_id, self.store
        self.held.add(p)

        def allocate() -> None:
            kv[("alloc", p)] = me
        store.call(self, allocate, lambda _: None)

        def clear_grab() -> None:
            if kv.get(("grab", p), (None,))[0] == me:
                del kv[("grab", p)]
        self.sim.node_at(self, self.sim.now + self.min_grab_s,
                         lambda: store.call(self, clear_grab, lambda _: None))


class LeaseSystem:
    """A lease-based design: nodes of ``node_cls`` sharing one ``LeaseStore``."""

    def __init__(self, name: str, node_cls: type, store_latency_s: float = 0.005,
                 settle_cycles: int = 8, min_warmup_s: float = 0.0) -> None:
        self.name = name
        self.min_warmup_s = min_warmup_s
        self.node_cls = node_cls
        self.store_latency_s = store_latency_s
        self.settle_cycles = settle_cycles
        self.store: LeaseStore | None = None
        self.warmup_max_s = 900.0
        self._stable_since: tuple[Any, float] | None = None

    def attach(self, cluster) -> None:
        self.store = LeaseStore(cluster, cluster.placement.partitions, self.store_latency_s)

    def make_node(self, cluster, node_id: str, index: int, weight: float) -> Node:
        return self.node_cls(cluster.sim, node_id, index, weight, self.store)

    def settled(self, cluster) -> bool:
        """Every partition has exactly one believer, unchanged for ``settle_cycles`` x 10 s."""
        owners = np.full(cluster.placement.partitions, -1)
        total = 0
        for n in cluster.nodes.values():
            a = n.leads()
            owners[a] = n.index
            total += len(a)
        state = (total == cluster.placement.partitions and (owners >= 0).all(), owners.tobytes())
        now = cluster.sim.now
        if not state[0] or now < self.min_warmup_s:
            self._stable_since = None
            return False
        if self._stable_since is None or self._stable_since[0] != state[1]:
            self._stable_since = (state[1], now)
            return False
        return now - self._stable_since[1] >= self.settle_cycles * 10.0


SYSTEMS: dict[str, Callable[[], LeaseSystem]] = {
    "eventhubs": lambda: LeaseSystem("eventhubs", EventHubsNode),
    "durabletask": lambda: LeaseSystem("durabletask", DurableTaskNode),
    # The race never stops moving partitions (see docs/simulations.md): settled = every
    # partition has exactly one owner, after two normal lease times.
    "redis-race": lambda: LeaseSystem("redis-race", RedisRaceNode, settle_cycles=0, min_warmup_s=120.0),
}
