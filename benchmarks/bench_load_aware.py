"""Load-aware placement on real processes (issue 33 item 5).

    python benchmarks/bench_load_aware.py [--nodes 5] [--partitions 256] [--rate 150] [--every 20] [--duration 150]
        [--balance-by pins|weights]

Boots ``--nodes`` ``python -m placement.service.work_sink`` processes on loopback with
``--load-aware EVERY`` (``tests/host_cluster.py``'s launcher), then sends ``--rate`` single-item
``POST /v1/work`` batches a second through one ``PlacementClient``, their keys drawn so that each
partition gets the share of the load the simulator's ``load-skew`` model gives it (lognormal
sigma 0.5, 5 % of the partitions hot at 10x; ``simulations.load_model``, static: no drift here).
Each sink counts the items it accepts per partition (``GET /v1/load``); the nodes gather those
figures, a stable view commits them, and every node plans from it: with ``--balance-by pins``
(the default) a later view pins the partitions the plan moves, with ``weights`` every node sets
its own weight to the plan (README, ``--load-aware``).

Every 5 s it reads the placement (``GET /v1/placement`` of the first node) and prints the
members' weights, the pins and max/mean load: the offered load of the partitions each member leads, over
the mean (exact: the offered shares are known here), beside the same for equal weights (static).
Goal (issue 33): max/mean <= 1.2 after two steps; 0 items accepted twice is not checked here
(``bench_restarts.py`` does that; these are ordinary handoffs).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_restarts import SinkCluster, _wait_up

from placement.client import PlacementClient, RetryPolicy
from placement.snapshot import PlacementSnapshot
from placement.table import PlacementTable
from simulations.load_model import LoadModel

from host_cluster import Loopback


class LoadAwareCluster(SinkCluster):
    def __init__(self, hosts: Loopback, partitions: int, every_s: float, by: str = "pins") -> None:
        super().__init__(hosts, partitions)
        self.every_s = every_s
        self.by = by

    def start(self, name: str) -> None:
        args = ["--id", name, "--gossip", self.hosts.gossip(name), "--http", self.hosts.http(name),
                "--partitions", str(self.partitions), "--journal", str(self.journal(name)),
                "--load-aware", str(self.every_s), "--balance-by", self.by]
        if name != self.names[0]:
            args += ["--join", self.hosts.gossip(self.names[0])]
        else:
            args += ["--new-cluster"]
        self.hosts.start(name, args, module="placement.service.work_sink")


def max_over_mean(table: PlacementTable, offered: np.ndarray) -> float:
    loads = dict.fromkeys(table.members, 0.0)
    for p in range(table.partitions):
        loads[table.owner(p)] += float(offered[p])
    active = [v for m, v in loads.items() if table.members[m] > 0]
    return max(active) / (sum(active) / len(active))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=256)
    ap.add_argument("--rate", type=float, default=150.0, help="requests a second")
    ap.add_argument("--every", type=float, default=20.0, help="--load-aware SECONDS of every node")
    ap.add_argument("--duration", type=float, default=150.0, help="seconds of load")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--balance-by", choices=("pins", "weights"), default="pins")
    args = ap.parse_args(argv)

    offered = LoadModel(args.partitions, args.seed).rates(0.0)
    offered = offered / offered.sum()
    hosts = Loopback(args.nodes)
    cluster = LoadAwareCluster(hosts, args.partitions, args.every, args.balance_by)
    names = cluster.names
    print(f"{args.nodes} work sinks (P={args.partitions}, --load-aware {args.every:g} --balance-by {args.balance_by}), "
          f"{args.rate:g} requests/s "
          f"skewed as load-skew (seed {args.seed}); logs in {hosts.logdir}", flush=True)
    try:
        for name in names:
            cluster.start(name)
            if name == names[0]:
                _wait_up(cluster.url(name))  # the seed answers before the others join it
        print(f"booted and settled in {cluster.settle():.1f} s", flush=True)
        url0 = cluster.url(names[0])
        first = PlacementSnapshot.from_json(httpx.get(f"{url0}/v1/placement", timeout=5).content).table
        static = max_over_mean(PlacementTable.build(dict.fromkeys(names, 1.0), args.partitions), offered)
        # Keys for each partition, so that requests land on partitions in proportion to their share.
        keys: list[list[str]] = [[] for _ in range(args.partitions)]
        i = 0
        while any(not k for k in keys):
            keys[first.partition_of(f"item-{i}")].append(f"item-{i}")
            i += 1
        client = PlacementClient([cluster.url(n) for n in names], retry=RetryPolicy(deadline_s=30.0))
        stop = threading.Event()
        sent = [0, 0]  # accepted, failed

        def send(worker: int) -> None:
            rng = np.random.default_rng(args.seed * 100 + worker)
            period = 4 / args.rate
            n = worker << 40
            next_at = time.monotonic()
            while not stop.is_set():
                p = int(rng.choice(args.partitions, p=offered))
                key = keys[p][n % len(keys[p])]
                n += 1
                try:
                    r = client.request("POST", key, "/v1/work", idempotent=True, spread=False,
                                       json={"job": "load", "items": [{"id": n, "key": key}]})
                    sent[0 if r.status_code == 200 else 1] += 1
                except Exception:
                    sent[1] += 1
                next_at += period
                time.sleep(max(0.0, next_at - time.monotonic()))  # pacing, not a wait for an effect

        workers = [threading.Thread(target=send, args=(w,), daemon=True) for w in range(4)]
        for w in workers:
            w.start()
        t0 = time.monotonic()
        last: str | None = None
        steps = 0  # placements changed (weights or pins)
        print(f"static (equal weights) max/mean {static:.3f}", flush=True)
        while time.monotonic() - t0 < args.duration:
            time.sleep(5.0)  # a sampling period, not a wait for an effect
            snap = PlacementSnapshot.from_json(httpx.get(f"{url0}/v1/placement", timeout=5).content).table
            weights = dict(snap.members)
            if last is not None and snap.checksum != last:
                steps += 1
            last = snap.checksum
            print(f"t={time.monotonic() - t0:5.1f}s max/mean {max_over_mean(snap, offered):.3f} steps {steps} "
                  f"weights {' '.join(f'{m}={w:.3f}' for m, w in sorted(weights.items()))} pins {len(snap.pins)} "
                  f"accepted {sent[0]} failed {sent[1]}", flush=True)
        stop.set()
        for w in workers:
            w.join(10)
        final = PlacementSnapshot.from_json(httpx.get(f"{url0}/v1/placement", timeout=5).content).table
        balancing = httpx.get(f"{url0}/v1/load", timeout=5).json()["balancing"]
        print(f"\nend: max/mean {max_over_mean(final, offered):.3f} (static {static:.3f}) after {steps} placement "
              f"changes, {len(final.pins)} partitions pinned; requests accepted {sent[0]}, failed {sent[1]}; "
              f"{names[0]}'s balancer: {balancing}")
        client.close()
    finally:
        hosts.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
