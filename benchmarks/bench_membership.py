"""Membership at N members, in-process: failure detection time, dissemination time, load.

Runs N ``Swim`` cores on the simulator's engine through ``simulations.members.MembershipSim``
(1 ms + exponential jitter of mean 0.5 ms, no loss), all with the default ``MembershipConfig``
unless ``--no-lifeguard``. Simulated seconds, not wall-clock; the numbers measure the protocol,
not Python's speed. The cores' own per-step invariant checks (O(N) each) are off unless
``--check-invariants``: at N=256 they would take most of the wall time.

    python benchmarks/bench_membership.py [--n 256] [--kills 8] [--updates 8] [--seed 1]
    python benchmarks/bench_membership.py --udp [--n 256]   # real sockets: CPU of N members

Reports:
* detection: per kill, the time until the killed member is dead in *every* other view
  (p50/p99 over kills) and the time until each single observer sees it dead (p50/p99 over
  all observer/kill pairs);
* dissemination: time until a metadata update is seen by every member (p50/p99 over updates);
* load: datagrams sent per member per second while idle and during the failure trials;
* false positives: deaths declared for members that were alive (should be 0).

``--udp`` instead starts N asyncio members on loopback in this one process, waits until they
converge, and reports the CPU time the process uses per second while the cluster idles.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from membership import DEAD, MemberEvent, MembershipConfig, Meta
from simulations.members import MemberNode, MembershipSim


def incarnation(node: MemberNode, subject: str) -> int:
    """The incarnation of ``subject`` in ``node``'s view (every node knows every member here)."""
    info = node.core.member(subject)
    assert info is not None, f"{node.node_id} does not know {subject}"
    return info.incarnation


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


async def udp_cpu(n: int, idle_s: float = 20.0) -> None:
    from membership.aio import start_member

    loop = asyncio.get_running_loop()
    first = await start_member(MembershipConfig(), "u0")
    members = [first]
    for i in range(1, n):
        members.append(await start_member(MembershipConfig(), f"u{i}", seeds=[first.bound]))
    start = loop.time()
    while not all(len(m.live_members()) == n for m in members):
        if loop.time() - start > 120:
            raise SystemExit("real-UDP cluster did not converge in 120 s")
        await asyncio.sleep(0.5)
    print(f"N={n} real UDP members converged after {loop.time() - start:.1f} s")
    await asyncio.sleep(10.0)  # join gossip dies down
    cpu0, t0 = time.process_time(), loop.time()
    sent0 = sum(m.core.stats["datagrams_out"] for m in members)
    await asyncio.sleep(idle_s)
    cpu, dt = time.process_time() - cpu0, loop.time() - t0
    sent = sum(m.core.stats["datagrams_out"] for m in members) - sent0
    suspicions = sum(m.core.stats["suspicions"] for m in members)
    unhealthy = sum(1 for m in members if m.core.local_health > 0)
    print(f"idle: {100 * cpu / dt:.1f}% of one core for {n} members, "
          f"{sent / dt / n:.2f} datagrams/s per member, suspicions so far {suspicions}, "
          f"members with local health > 0 (slowed probing after the join burst): {unhealthy}")
    for m in members:
        m.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--kills", type=int, default=8)
    ap.add_argument("--updates", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-lifeguard", action="store_true")
    ap.add_argument("--udp", action="store_true")
    ap.add_argument("--check-invariants", action="store_true", help="every core's own check after every step")
    ap.add_argument("--probe-interval-s", type=float, default=MembershipConfig.probe_interval_s)
    ap.add_argument("--probe-timeout-s", type=float, default=MembershipConfig.probe_timeout_s)
    args = ap.parse_args()
    if args.udp:
        asyncio.run(udp_cpu(args.n))
        return
    wall = time.perf_counter()
    cfg = MembershipConfig(lifeguard=not args.no_lifeguard, probe_interval_s=args.probe_interval_s,
                           probe_timeout_s=args.probe_timeout_s)
    rng = random.Random(args.seed)
    net = MembershipSim(args.seed, config=cfg, check_invariants=args.check_invariants)
    net.add("n0")
    for i in range(1, args.n):
        net.add(f"n{i}", seeds=["n0"])
    assert net.run_until_true(net.converged, 60.0), "no convergence"
    print(f"N={args.n} lifeguard={cfg.lifeguard} probe {cfg.probe_interval_s}/{cfg.probe_timeout_s} s: "
          f"converged after {net.now:.2f} s simulated")
    net.run_for(30.0)  # let the join gossip die down

    d0, t0 = net.datagrams, net.now
    pp0 = sum(n.core.stats["push_pull_sent"] for n in net.nodes.values())
    net.run_for(30.0)
    idle_rate = (net.datagrams - d0) / (net.now - t0) / args.n
    push_pulls_idle = sum(n.core.stats["push_pull_sent"] for n in net.nodes.values()) - pp0

    everywhere, per_observer, first_suspect = [], [], []
    d0, t0 = net.datagrams, net.now
    for _ in range(args.kills):
        victim = rng.choice([n.node_id for n in net.up_nodes()])
        killed_at = net.now
        net.crash(victim)
        observers = [n for n in net.up_nodes()]
        ok = net.run_until_true(lambda: all(net.status(o.node_id, victim) == DEAD for o in observers), 60.0, 0.01)
        assert ok, f"{victim} not declared dead everywhere"
        everywhere.append(net.now - killed_at)
        first_suspect.append(min(e.at for o in observers for e in o.events if isinstance(e, MemberEvent)
                                 and e.kind == "suspect" and e.member.node_id == victim
                                 and e.at >= killed_at) - killed_at)
        for o in observers:
            at = [e.at for e in o.events if isinstance(e, MemberEvent) and e.kind == "dead"
                  and e.member.node_id == victim]
            per_observer.append(at[-1] - killed_at)
        net.run_for(15.0)
    fail_rate = (net.datagrams - d0) / (net.now - t0) / len(net.up_nodes())

    spread = []
    for i in range(args.updates):
        who = rng.choice(net.up_nodes()).node_id
        start = net.now
        net.call(who, lambda c, now: c.update_meta(Meta(weight=1.0 + i), now))
        inc = net.nodes[who].core.incarnation
        ok = net.run_until_true(lambda: all(incarnation(n, who) >= inc for n in net.up_nodes()), 30.0, 0.01)
        assert ok, "update did not spread"
        spread.append(net.now - start)
        net.run_for(5.0)

    false_deaths = sum(1 for n in net.up_nodes() for e in n.events
                       if isinstance(e, MemberEvent) and e.kind == "dead" and net.nodes[e.member.node_id].up)
    print(f"detection, dead in every view: p50 {pct(everywhere, 50):.2f} s  p99 {pct(everywhere, 99):.2f} s"
          f"  max {max(everywhere):.2f} s  ({args.kills} kills)")
    print(f"first suspicion anywhere:      p50 {pct(first_suspect, 50):.2f} s  p99 {pct(first_suspect, 99):.2f} s")
    print(f"detection, per observer:       p50 {pct(per_observer, 50):.2f} s  p99 {pct(per_observer, 99):.2f} s")
    print(f"update reaches everyone:       p50 {pct(spread, 50):.2f} s  p99 {pct(spread, 99):.2f} s"
          f"  ({args.updates} updates; resolution 0.01 s)")
    print(f"datagrams sent per member/s:   idle {idle_rate:.2f}  during failure trials {fail_rate:.2f}")
    print(f"full-state push-pulls in the 30 s idle window: {push_pulls_idle}")
    print(f"false deaths of live members:  {false_deaths}")
    print(f"largest datagram {net.max_datagram} B (mtu {cfg.mtu_bytes})"
          f"  wall {time.perf_counter() - wall:.1f} s")


if __name__ == "__main__":
    main()
