"""Wake-ups and CPU per thread of idle ``placement node`` processes (issue 14 item 1).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_wakeups.py                  # 8 nodes, this tree
    PYTHONPATH=. .venv/bin/python benchmarks/bench_wakeups.py --root /work/wt-base --n 16

Why: on this project's test machine (a Firecracker VM) each wake-up of an idle thread costs
~240 us of CPU, so an idle node's CPU is mostly how often its threads wake (BENCHMARKS.md, "Idle
CPU side by side with Serf"). ``bench_serf.py`` gives the totals against Serf; this says which
thread wakes how often. It starts N nodes on loopback as ``bench_serf.py``'s ``node`` variant
does (``--partitions 4096 --replicas 2 --work-sink``, exclusive ownership), polls until every
node sees N alive members (deadline 120 s), lets ``--settle`` seconds pass, then reads each
thread's voluntary context switches (``/proc/PID/task/TID/status``) and CPU time
(``schedstat``) at the start and end of a ``--window``. Threads are named through
``benchmarks/thread_names`` (prctl); the main thread is the application loop. Every process is
stopped at the end, also on errors.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def _snap(procs: list[subprocess.Popen]) -> dict[tuple[int, int], tuple[str, int, int]]:
    out = {}
    for i, p in enumerate(procs):
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


def _converged(http: int, n: int) -> bool:
    ok = 0
    for i in range(n):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http + i}/v1/members", timeout=2) as r:
                ok += sum(m["status"] == "alive" for m in json.load(r)) == n
        except (OSError, ValueError):
            pass
    return ok == n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(HERE), help="source tree to run (default: this one)")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--settle", type=float, default=45.0)
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--base-port", type=int, default=29600, help="gossip ports from here; HTTP from here + 200")
    a = ap.parse_args(argv)
    gossip, http = a.base_port, a.base_port + 200
    env = dict(os.environ, PYTHONPATH=a.root + os.pathsep + os.path.join(HERE, "thread_names"))
    procs: list[subprocess.Popen] = []
    try:
        for i in range(a.n):
            cmd = [sys.executable, "-m", "placement.service.cli", "node", "--id", f"n{i}",
                   "--gossip", f"127.0.0.1:{gossip + i}", "--http", f"127.0.0.1:{http + i}",
                   "--partitions", "4096", "--replicas", "2", "--work-sink"]
            if i:
                cmd += ["--join", f"127.0.0.1:{gossip}"]
            procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, env=env, cwd=a.root, start_new_session=True))
        deadline = time.monotonic() + 120
        while not _converged(http, a.n):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                print("the nodes did not converge within 120 s", file=sys.stderr)
                return 1
            time.sleep(1)
        print(f"{a.n} nodes converged; settling {a.settle:.0f} s, then a {a.window:.0f} s window", flush=True)
        time.sleep(a.settle)
        t0, s0 = time.monotonic(), _snap(procs)
        time.sleep(a.window)
        t1, s1 = time.monotonic(), _snap(procs)
        dt = t1 - t0
        by_kind: dict[str, list[tuple[float, float]]] = {}
        for key, (name, vol, cpu) in sorted(s1.items()):
            if key not in s0:
                continue
            rate, pct = (vol - s0[key][1]) / dt, (cpu - s0[key][2]) / dt / 1e9 * 100
            if rate >= 0.05:
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
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


if __name__ == "__main__":
    raise SystemExit(main())
