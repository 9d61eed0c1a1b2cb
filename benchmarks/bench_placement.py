"""Placement benchmark: build, incremental update, bounded loads, lookups, batch routing, zones.

    .venv/bin/python benchmarks/bench_placement.py [--partitions 65536] [--members 1000]
    .venv/bin/python benchmarks/bench_placement.py --partitions 1048576 --members 2000 \
        --sections build,incremental --repeat 2        # the scale goal of issue 14

Comparisons are measured in the same run on the same machine: uhashring's ``get_node``
(the ketama ring users pick today) and a plain numpy float implementation of weighted HRW,
timed alternately with the builds they are compared with. Times are the best of
``--repeat`` runs (the machine is shared and noisy); the build ratio is also given as the
median over rounds of the per-round ratio.

``--kernel`` chooses the screen of the full build (``rendezvous.kernel``): ``both`` (the
default when numba is installed) times the compiled one (numba) and the numpy one side by
side, alternating with the plain version; the other sections use ``auto``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc

import numpy as np

from placement import PlacementTable, rendezvous
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
    assert ranked is not None  # a full build keeps its ranking (for incremental updates)
    arrays = ranked.idx.nbytes + ranked.h.nbytes + ranked.draw.nbytes
    return arrays, peak, lookup_cache


def build_with(kernel: str, members: dict[str, float], partitions: int, replicas: int) -> PlacementTable:
    before, rendezvous.kernel = rendezvous.kernel, kernel
    try:
        return PlacementTable.build(members, partitions=partitions, replicas=replicas)
    finally:
        rendezvous.kernel = before


_FIRST_CALL = """
import time
t0 = time.perf_counter()
from placement import PlacementTable, rendezvous
rendezvous.kernel = "numba"
t1 = time.perf_counter()
PlacementTable.build({"a": 1.0, "b": 2.0}, partitions=64)
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def numba_first_call() -> None:
    """Import of ``placement``, then the first compiled build in a new process: with an empty
    numba cache (compiles) and again with the cache it wrote (loads)."""
    print("\n## The compiled screen's first call (new process each; import numba + compile or load)\n")
    print("| numba cache | import placement | first build with kernel=numba (tiny table) |")
    print("|---|---|---|")
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": os.pathsep.join(sys.path)}
        for label in ("empty (compiles)", "written by the run above (loads)"):
            out = subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env, capture_output=True, text=True,
                                 check=True)
            imp, first = map(float, out.stdout.split())
            print(f"| {label} | {1000 * imp:.0f} ms | {1000 * first:.0f} ms |")


def have_numba() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


SECTIONS = ("build", "incremental", "balance", "lookups", "zones")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=65536)
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    ap.add_argument("--kernel", choices=("both", "numba", "numpy", "auto"), default="both" if have_numba() else "numpy",
                    help="screen of the timed full builds (default: both when numba is installed, else numpy)")
    args = ap.parse_args()
    if args.kernel in ("both", "numba") and not have_numba():
        ap.error("--kernel numba needs numba (pip install -e '.[fast]')")
    kernels = ("numba", "numpy") if args.kernel == "both" else (args.kernel,)
    P, N, R = args.partitions, args.members, args.repeat
    sections = set(args.sections.split(","))
    if not sections <= set(SECTIONS) or (sections & {"incremental", "lookups"} and "build" not in sections):
        ap.error(f"--sections: choose from {','.join(SECTIONS)}; incremental and lookups need build")
    equal = {f"node-{i:04d}": 1.0 for i in range(N)}
    weighted = {f"node-{i:04d}": float(1 << (i % 3)) for i in range(N)}  # weights 1, 2, 4
    distinct = {f"node-{i:04d}": 1.0 + i / N for i in range(N)}  # every weight different

    print(f"# P = {P:,} partitions, N = {N:,} members, best of {R}\n")
    tables: dict[tuple[str, int], PlacementTable] = {}
    if "build" in sections:
        print(f"## Full build (screen: {' and '.join(kernels)}; plain = plain numpy float HRW, replicas=1)\n")
        head = ["membership", "replicas"] + [f"{k} screen" for k in kernels] + ["plain"]
        head += [f"{k} / plain: best-of; median of rounds" for k in kernels]
        if len(kernels) == 2:
            head.append("numba / numpy: best-of; median of rounds")
        head += [f"ns per pair ({k})" for k in kernels]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        if "numba" in kernels:  # import and load (or compile) first: measured on their own below
            build_with("numba", {"a": 1.0}, 64, 1)
        for name, ms in (("equal weights", equal), ("weights 1/2/4", weighted), ("all weights distinct", distinct)):
            times: dict[object, list[float]] = {"plain": []}
            for _ in range(R):  # alternate, so all see the same machine
                times["plain"].append(best(lambda: plain_numpy_hrw(ms, P, 0), 1)[0])
                for r in (1, 3):
                    for kernel in kernels:
                        t, table = best(lambda: build_with(kernel, ms, P, r), 1)
                        times.setdefault((kernel, r), []).append(t)
                        if (name, r) in tables:
                            assert table == tables[(name, r)], "the screens disagree"
                        tables[(name, r)] = table
            plain = np.array(times["plain"])

            def ratio(a, b):
                a, b = np.array(a), np.array(b)
                return f"{a.min() / b.min():.2f}x; {np.median(a / b):.2f}x"

            for r in (1, 3):
                row = [name, str(r)] + [f"{1000 * min(times[(k, r)]):.0f} ms" for k in kernels]
                row += [f"{1000 * plain.min():.0f} ms"] + [ratio(times[(k, r)], plain) for k in kernels]
                if len(kernels) == 2:
                    row.append(ratio(times[("numba", r)], times[("numpy", r)]))
                row += [f"{1e9 * min(times[(k, r)]) / (P * N):.2f}" for k in kernels]
                print("| " + " | ".join(row) + " |")
        if "numba" in kernels:
            numba_first_call()
        print("\n## Table memory (all weights distinct)\n")
        print("| replicas | arrays (idx int32, H and draw uint64 per slot) | peak traced during build "
              "| lookup cache (owner tuples, built on first lookup) |")
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
    if "zones" in sections:
        zones(equal, P, R)


def zones(equal: dict[str, float], P: int, R: int) -> None:
    """Zone-aware replica sets (placement.zones): 3 zones, 3 replicas, against the same table
    without zones, timed alternately; incremental results checked against full builds."""
    print("\n## Zones: 3 zones, replicas = 3, equal weights (results == full build, checked)\n")
    print("| table | full build | join | leave | moved on a join / leave | leaders as without zones |")
    print("|---|---|---|---|---|---|")
    zone_of = {m: "abc"[i % 3] for i, m in enumerate(equal)}
    grown, left = {**equal, "joiner": 1.0}, {m: w for m, w in equal.items() if m != "node-0002"}
    runs = {}
    for name, z, zg, zl in (("no zones", None, None, None),
                            ("3 zones", zone_of, {**zone_of, "joiner": "a"},
                             {m: v for m, v in zone_of.items() if m != "node-0002"})):
        t_build, table = best(lambda z=z: PlacementTable.build(equal, partitions=P, replicas=3, zones=z), R)
        t_join, joined = best(lambda zg=zg: table.with_members(grown, zg), R)
        t_leave, gone = best(lambda zl=zl: table.with_members(left, zl), R)
        assert joined == PlacementTable.build(grown, partitions=P, replicas=3, zones=zg)
        assert gone == PlacementTable.build(left, partitions=P, replicas=3, zones=zl)
        runs[name] = table
        same = np.array_equal(table.owner_indices()[1][:, 0], runs["no zones"].owner_indices()[1][:, 0])
        print(f"| {name} | {1000 * t_build:.0f} ms | {1000 * t_join:.1f} ms | {1000 * t_leave:.1f} ms "
              f"| {len(table.moved(joined))} / {len(table.moved(gone))} | {'yes' if same else 'NO'} |")


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
        print(f"| join (weight 2) | {k} | {1000 * t_join:.1f} ms; {1000 * c_join:.1f} ms | {len(base.moved(joined))} "
              f"| {P * k * 2 / (total + 2):.0f} (P*k*w/W) |")
        print(f"| leave (weight 4) | {k} | {1000 * t_leave:.1f} ms; {1000 * c_leave:.1f} ms | {len(base.moved(left))} "
              f"| {len(base.owned_by('node-0002'))} (its partitions) |")


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
        _ids, idx = table.owner_indices()
        return idx[table.partitions_of(keys), 0]

    t_batch, _ = best(batch, R)
    t_route, _ = best(lambda: table.route(keys), R)
    print(f"\nBatch routing of 1M keys: leader index per key {1000 * t_batch:.0f} ms; "
          f"`route()` grouping keys by leader {1000 * t_route:.0f} ms.")


if __name__ == "__main__":
    main()
