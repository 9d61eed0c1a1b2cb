"""Placement benchmark: build, incremental update, bounded loads, lookups, batch routing.

    .venv/bin/python benchmarks/bench_placement.py [--partitions 65536] [--members 1000]

Comparisons are measured in the same run on the same machine: uhashring's ``get_node``
(the ketama ring users pick today) and a plain numpy float implementation of weighted HRW.
Times are the best of ``--repeat`` runs (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from placement import PlacementTable
from placement.hashing import fmix64_np, member_hash, partition_hashes


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def plain_numpy_hrw(weights: dict[str, float], partitions: int, seed: int) -> np.ndarray:
    """The textbook vectorised version: float -ln(u)/w over the whole matrix, argmin per row."""
    ids = sorted(weights)
    hm = np.array([member_hash(m, seed) for m in ids], dtype=np.uint64)
    w = np.array([weights[m] for m in ids])
    hp = partition_hashes(np.arange(partitions), seed)
    owners = np.empty(partitions, dtype=np.int64)
    block = max(1, (1 << 16) // len(ids))
    for s in range(0, partitions, block):
        h = fmix64_np(hp[s : s + block, None] ^ hm[None, :])
        u = ((h >> np.uint64(11)).astype(np.float64) + 0.5) / 2.0**53
        owners[s : s + block] = (-np.log(u) / w).argmin(axis=1)
    return owners


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=65536)
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    P, N, R = args.partitions, args.members, args.repeat
    equal = {f"node-{i:04d}": 1.0 for i in range(N)}
    weighted = {f"node-{i:04d}": float(1 << (i % 3)) for i in range(N)}  # weights 1, 2, 4
    distinct = {f"node-{i:04d}": 1.0 + i / N for i in range(N)}  # every weight different

    print(f"# P = {P:,} partitions, N = {N:,} members, best of {R}\n")
    print("## Full build\n")
    print("| membership | replicas | this library | plain numpy float HRW | ratio |")
    print("|---|---|---|---|---|")
    tables = {}
    for name, ms in (("equal weights", equal), ("weights 1/2/4", weighted), ("all weights distinct", distinct)):
        plain, _ = best(lambda: plain_numpy_hrw(ms, P, 0), 1 if name.startswith("all") else R)
        for k in (1, 3):
            t, table = best(lambda: PlacementTable.build(ms, partitions=P, replicas=k), R)
            tables[(name, k)] = table
            ratio = f"{plain / t:.1f}x faster" if k == 1 else ""
            print(f"| {name} | {k} | {1000 * t:.0f} ms | {1000 * plain:.0f} ms (replicas=1) | {ratio} |")

    print("\n## Incremental updates (result == full build, checked)\n")
    print("| change | replicas | time | partitions moved | optimum |")
    print("|---|---|---|---|---|")
    for k in (1, 3):
        base = tables[("weights 1/2/4", k)]
        joined_members = {**weighted, "joiner": 2.0}
        t_join, joined = best(lambda: base.with_members(joined_members), R)
        left_members = {m: w for m, w in weighted.items() if m != "node-0002"}
        t_leave, left = best(lambda: base.with_members(left_members), R)
        assert joined == PlacementTable.build(joined_members, partitions=P, replicas=k)
        assert left == PlacementTable.build(left_members, partitions=P, replicas=k)
        total = sum(weighted.values())
        print(f"| join (weight 2) | {k} | {1000 * t_join:.1f} ms | {len(base.moved(joined))} | {P * k * 2 / (total + 2):.0f} (P*k*w/W) |")
        print(f"| leave (weight 4) | {k} | {1000 * t_leave:.1f} ms | {len(base.moved(left))} | {len(base.owned_by('node-0002'))} (its partitions) |")

    print("\n## Balance and movement, equal weights, replicas = 1\n")
    print("| mode | full build | max/mean load | moved on a join | x optimal (P/(N+1)) |")
    print("|---|---|---|---|---|")
    optimum = P / (N + 1)
    for c in (None, 1.1, 1.05, 1.0):
        t, table = best(lambda: PlacementTable.build(equal, partitions=P, capacity_factor=c), 1 if c else R)
        load = np.array(list(table.load().values()))
        grown = PlacementTable.build({**equal, "joiner": 1.0}, partitions=P, capacity_factor=c)
        moved = len(table.moved(grown))
        name = "pure HRW" if c is None else f"bounded c={c}"
        print(f"| {name} | {1000 * t:.0f} ms | {load.max() / load.mean():.3f} | {moved} | {moved / optimum:.2f} |")

    print("\n## Lookups\n")
    import uhashring

    table = tables[("weights 1/2/4", 1)]
    keys = [f"order-{i}" for i in range(1_000_000)]
    lookup = table.lookup

    def per_key():
        for k in keys:
            lookup(k)

    t_lookup, _ = best(per_key, R)
    ring = uhashring.HashRing(nodes=list(equal))
    few = keys[:100_000]

    def ring_keys():
        get = ring.get_node
        for k in few:
            get(k)

    t_ring, _ = best(ring_keys, R)
    ours, theirs = len(keys) / t_lookup, len(few) / t_ring
    print("| what | keys/s |")
    print("|---|---|")
    print(f"| `table.lookup(key)` (per key, owners tuple) | {ours / 1e6:.2f} M |")
    print(f"| uhashring `get_node(key)`, same {N} nodes | {theirs / 1e6:.3f} M |")
    print(f"| ratio | {ours / theirs:.1f}x |")

    def batch():
        ids, idx = table.owner_indices()
        return idx[table.partitions_of(keys), 0]

    t_batch, _ = best(batch, R)
    t_route, _ = best(lambda: table.route(keys), R)
    print(f"\nBatch routing of 1M keys: leader index per key {1000 * t_batch:.0f} ms; "
          f"`route()` grouping keys by leader {1000 * t_route:.0f} ms.")


if __name__ == "__main__":
    main()
