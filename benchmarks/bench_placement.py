"""Placement benchmark: build, incremental update, bounded loads, lookups, batch routing.

    .venv/bin/python benchmarks/bench_placement.py [--partitions 65536] [--members 1000]
    .venv/bin/python benchmarks/bench_placement.py --partitions 1048576 --members 2000 \
        --sections build,incremental --repeat 2        # the scale goal of issue 14

Comparisons are measured in the same run on the same machine: uhashring's ``get_node``
(the ketama ring users pick today) and a plain numpy float implementation of weighted HRW,
timed alternately with the builds they are compared with. Times are the best of
``--repeat`` runs (the machine is shared and noisy); the build ratio is also given as the
median over rounds of the per-round ratio.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

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


def best_wall_and_cpu(fn, repeat):
    """Best wall time, best process CPU time (less sensitive to other jobs on the box), result."""
    walls, cpus = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return min(walls), min(cpus), out


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


def table_memory(members: dict[str, float], partitions: int, replicas: int) -> tuple[int, int, int]:
    """Bytes of a table's arrays, peak traced allocation while building it, and the size of
    the per-key lookup cache (owner tuples, built on the first ``lookup``), via tracemalloc."""
    tracemalloc.start()
    table = PlacementTable.build(members, partitions=partitions, replicas=replicas)
    peak = tracemalloc.get_traced_memory()[1]
    before = tracemalloc.get_traced_memory()[0]
    table.lookup("x")
    lookup_cache = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    ranked = table._ranked
    arrays = ranked.idx.nbytes + ranked.h.nbytes + ranked.draw.nbytes
    return arrays, peak, lookup_cache


SECTIONS = ("build", "incremental", "balance", "lookups")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=65536)
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    args = ap.parse_args()
    P, N, R = args.partitions, args.members, args.repeat
    sections = set(args.sections.split(","))
    if not sections <= set(SECTIONS) or (sections & {"incremental", "lookups"} and "build" not in sections):
        ap.error(f"--sections: choose from {','.join(SECTIONS)}; incremental and lookups need build")
    equal = {f"node-{i:04d}": 1.0 for i in range(N)}
    weighted = {f"node-{i:04d}": float(1 << (i % 3)) for i in range(N)}  # weights 1, 2, 4
    distinct = {f"node-{i:04d}": 1.0 + i / N for i in range(N)}  # every weight different

    print(f"# P = {P:,} partitions, N = {N:,} members, best of {R}\n")
    tables = {}
    if "build" in sections:
        print("## Full build\n")
        print("| membership | replicas | this library | plain numpy float HRW (replicas=1) | ratio this / plain: best-of; median of rounds | ns per (partition, member) pair |")
        print("|---|---|---|---|---|---|")
        for name, ms in (("equal weights", equal), ("weights 1/2/4", weighted), ("all weights distinct", distinct)):
            times: dict[object, list[float]] = {"plain": [], 1: [], 3: []}
            for _ in range(R):  # alternate, so both see the same machine
                times["plain"].append(best(lambda: plain_numpy_hrw(ms, P, 0), 1)[0])
                for k in (1, 3):
                    t, tables[(name, k)] = best(lambda: PlacementTable.build(ms, partitions=P, replicas=k), 1)
                    times[k].append(t)
            plain = min(times["plain"])
            for k in (1, 3):
                t = min(times[k])
                rounds = np.median(np.array(times[k]) / np.array(times["plain"]))
                print(f"| {name} | {k} | {1000 * t:.0f} ms | {1000 * plain:.0f} ms | {t / plain:.2f}x; {rounds:.2f}x | {1e9 * t / (P * N):.2f} |")
        print("\n## Table memory (all weights distinct)\n")
        print("| replicas | arrays (idx int32, H and draw uint64 per slot) | peak traced during build | lookup cache (owner tuples, built on first lookup) |")
        print("|---|---|---|---|")
        for k in (1, 3):
            arrays, peak, cache = table_memory(distinct, P, k)
            print(f"| {k} | {arrays / 2**20:.0f} MiB | {peak / 2**20:.0f} MiB | {cache / 2**20:.0f} MiB |")

    if "incremental" in sections:
        incremental(tables, weighted, P, R)
    if "balance" in sections:
        balance(equal, P, N, R)
    if "lookups" in sections:
        lookups(tables[("weights 1/2/4", 1)], equal, N, R)


def incremental(tables: dict, weighted: dict[str, float], P: int, R: int) -> None:
    print("\n## Incremental updates (result == full build, checked)\n")
    print("| change | replicas | time: wall; CPU | partitions moved | optimum |")
    print("|---|---|---|---|---|")
    for k in (1, 3):
        base = tables[("weights 1/2/4", k)]
        joined_members = {**weighted, "joiner": 2.0}
        t_join, c_join, joined = best_wall_and_cpu(lambda: base.with_members(joined_members), R)
        left_members = {m: w for m, w in weighted.items() if m != "node-0002"}
        t_leave, c_leave, left = best_wall_and_cpu(lambda: base.with_members(left_members), R)
        assert joined == PlacementTable.build(joined_members, partitions=P, replicas=k)
        assert left == PlacementTable.build(left_members, partitions=P, replicas=k)
        total = sum(weighted.values())
        print(f"| join (weight 2) | {k} | {1000 * t_join:.1f} ms; {1000 * c_join:.1f} ms | {len(base.moved(joined))} | {P * k * 2 / (total + 2):.0f} (P*k*w/W) |")
        print(f"| leave (weight 4) | {k} | {1000 * t_leave:.1f} ms; {1000 * c_leave:.1f} ms | {len(base.moved(left))} | {len(base.owned_by('node-0002'))} (its partitions) |")


def balance(equal: dict[str, float], P: int, N: int, R: int) -> None:
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


def lookups(table: PlacementTable, equal: dict[str, float], N: int, R: int) -> None:
    print("\n## Lookups\n")
    import uhashring

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
