"""Failure detection and takeover of real `placement node` processes: loopback vs separate hosts.

    python benchmarks/bench_hosts.py --where loopback [--kills 3] [--nodes 5]
    sudo python benchmarks/bench_hosts.py --where netns [--kills 3]     # network namespaces, root

Boots a cluster (P=256, exclusive ownership), then ``--kills`` times: kill -9 the last node,
measure until every survivor's view has it dead ("detected") and until the survivors own
exactly what the placement of the survivors says ("taken over"), restart it under the same id
and measure until all own what the placement of all says ("back"). Times are from the kill (or
the restart) to the end of the first sampler round that shows it (rounds take ~0.1-0.3 s), so
they include up to one round of sampling delay. Prints one line per kill and the medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from host_cluster import Cluster, Hosts, Loopback, alive


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--where", choices=("loopback", "netns"), default="loopback")
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=5)
    args = ap.parse_args()
    hosts: Hosts
    if args.where == "netns":
        from netns_lab import Lab, unavailable_reason

        reason = unavailable_reason()
        if reason:
            print(f"cannot run on namespaces: {reason}", file=sys.stderr)
            return 2
        hosts = Lab(args.nodes)
    else:
        hosts = Loopback(args.nodes)
    c = Cluster(hosts, partitions=256)
    rows = []
    try:
        c.boot()
        c.settled(timeout_s=90)
        victim, survivors = c.names[-1], c.names[:-1]
        for k in range(args.kills):
            t0 = time.monotonic()
            c.kill(victim)
            detected = c.wait(lambda r: r.sees(survivors, alive(survivors)), t0, 60, "the death everywhere").end - t0
            expected = c.placed(survivors)
            taken = c.wait(lambda r: r.owns_exactly(expected), t0, 60, "the takeover").end - t0
            t1 = time.monotonic()
            c.start(victim)
            back = c.settled(timeout_s=90).end - t1
            c.assert_exclusive(t0)
            rows.append((detected, taken, back))
            print(f"kill {k + 1}: detected {detected:.2f} s, taken over {taken:.2f} s, back after restart {back:.2f} s",
                  flush=True)
    finally:
        c.close()
    med = [statistics.median(col) for col in zip(*rows)]
    print(f"{args.where}, {args.nodes} nodes, {len(rows)} kills: median detected {med[0]:.2f} s, "
          f"taken over {med[1]:.2f} s, back {med[2]:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
