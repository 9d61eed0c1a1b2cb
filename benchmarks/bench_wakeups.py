"""Wake-ups and CPU per thread of idle ``placement node`` processes (issue 14 item 1).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_wakeups.py                  # 8 nodes, this tree
    PYTHONPATH=. .venv/bin/python benchmarks/bench_wakeups.py --root /work/wt-base --n 16

Why: on this project's test machine (a Firecracker VM) each wake-up of an idle thread costs
~240 us of CPU, so an idle node's CPU is mostly how often its threads wake (docs/benchmarks-log.md,
"Idle CPU side by side with Serf"). ``bench_serf.py`` gives the totals against Serf; this says which
thread wakes how often. It starts, and waits for, N nodes exactly as ``bench_serf.py``'s
``node`` variant does (its ``Cluster``: ``--partitions 4096 --replicas 2 --work-sink``,
exclusive ownership, converged and every partition owned on one stable view), lets
``--settle`` seconds pass, then reads each thread's voluntary context switches
(``/proc/PID/task/TID/status``) and CPU time (``schedstat``) at the start and end of a
``--window``. Threads are named through
``benchmarks/thread_names`` (prctl); the main thread is the application loop. Every process is
stopped at the end, also on errors (``Cluster.stop``); logs go to a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serf import ROOT, Cluster, _wait  # a sibling script, not a package

HERE = os.path.dirname(os.path.abspath(__file__))


def _snap(cluster: Cluster) -> dict[tuple[int, int], tuple[str, int, int]]:
    """(node, thread id) -> (name, voluntary context switches, CPU ns) of every thread."""
    out = {}
    for i, p in enumerate(cluster.procs):
        for tid in os.listdir(f"/proc/{p.pid}/task"):
            base = f"/proc/{p.pid}/task/{tid}"
            try:
                with open(f"{base}/comm") as f:
                    comm = f.read().strip()
                with open(f"{base}/status") as f:
                    vol = int(next(line.split()[1] for line in f if line.startswith("voluntary_ctxt_switches")))
                with open(f"{base}/schedstat") as f:
                    cpu_ns = int(f.read().split()[0])
            except (OSError, StopIteration):
                continue
            out[(i, int(tid))] = ("app loop" if int(tid) == p.pid else comm, vol, cpu_ns)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=ROOT, help="source tree to run (default: this one)")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--settle", type=float, default=45.0)
    ap.add_argument("--window", type=float, default=30.0)
    a = ap.parse_args(argv)
    # The thread-naming aid rides on PYTHONPATH, which Cluster passes on to the nodes.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(HERE, "thread_names"),
                                                             os.environ.get("PYTHONPATH")]))
    cluster = Cluster("node", a.n, tempfile.mkdtemp(prefix="bench_wakeups-"), root=os.path.abspath(a.root))
    try:
        cluster.start(0)
        _wait("first node up", cluster.first_up, 30, [cluster])
        for i in range(1, a.n):
            cluster.start(i)
        _wait("converged", cluster.progress, 180, [cluster])
        print(f"settling {a.settle:.0f} s, then a {a.window:.0f} s window", flush=True)
        time.sleep(a.settle)  # the join's retransmissions die down (not waiting for an effect)
        t0, s0 = time.monotonic(), _snap(cluster)
        time.sleep(a.window)
        t1, s1 = time.monotonic(), _snap(cluster)
        # An exited node's threads count zero wake-ups, which is also what a quiet thread counts:
        # refuse to report one (another cluster on the same ports made every node of a run exit,
        # and the "converged" wait above was answered by that other cluster's nodes).
        exited = cluster.exited()
        if exited:
            print(f"error: node(s) {exited} exited (logs in {cluster.logdir}); no figures", flush=True)
            return 1
        dt = t1 - t0
        by_kind: dict[str, list[tuple[float, float]]] = {}
        for key, (name, vol, cpu) in sorted(s1.items()):
            if key not in s0:
                continue
            rate, pct = (vol - s0[key][1]) / dt, (cpu - s0[key][2]) / dt / 1e9 * 100
            if rate >= 0.05 or name == "app loop" or name.startswith("membership"):  # a quiet one counts too
                print(f"n{key[0]}\t{name:16s}\t{rate:6.2f} wake-ups/s\t{pct:6.3f} % CPU")
                kind = "membership" if name.startswith("membership") else name
                by_kind.setdefault(kind, []).append((rate, pct))
        print(f"window {dt:.1f} s")
        for kind, rows in sorted(by_kind.items()):
            rates = sorted(r for r, _ in rows)
            print(f"{kind}: {len(rows)} threads, wake-ups/s min {rates[0]:.2f} median {statistics.median(rates):.2f} "
                  f"max {rates[-1]:.2f}; CPU % mean {statistics.mean(p for _, p in rows):.3f}")
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    raise SystemExit(main())
