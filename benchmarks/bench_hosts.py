"""Failure detection and takeover of real `placement node` processes: loopback vs separate hosts.

    python benchmarks/bench_hosts.py --where loopback [--kills 3] [--nodes 5] [--seed 1] [--out FILE]
    sudo python benchmarks/bench_hosts.py --where netns [--kills 3]     # network namespaces, root
    python benchmarks/bench_hosts.py --pool FILE [FILE ...]            # percentiles over --out files
    python benchmarks/bench_hosts.py --nodes 3 --witness [--kills 6] [--footprint 60]  # 2 workers + a witness

Boots a cluster (P=256, exclusive ownership), then ``--kills`` times: kill -9 the last node,
measure until every survivor's view has it dead ("detected") and until the survivors own
exactly what the placement of the survivors says ("taken over"), restart it under the same id
and measure until all own what the placement of all says ("back"). Times are from the kill (or
the restart) to the end of the first sampler round that shows it (rounds take ~0.1-0.3 s), so
they include up to one round of sampling delay. Prints one line per kill and the medians.

Each survivor's event log (``GET /v1/events``, wall-clock stamps on one machine's clock) also
says exactly when *it* marked the victim suspect and dead: the line per kill gives the first
suspicion anywhere and the death in the first and in the last survivor's view ("dead
everywhere"), measured from the kill, and ``--out FILE`` appends them as JSON lines.
``--pool FILE...`` prints percentiles over the kills of several such files (the runs of one
tree, to compare with another's).

``--witness``: the last of the ``--nodes`` runs ``placement witness`` (weight 0), and the kills
go to each of the others in turn; "taken over" then also requires the witness to own nothing
(in every sampler round it must, throughout). ``--footprint S``: at the end, with the sampler
stopped (it polls every node several times a second), each process's RSS (``VmRSS``) and its
CPU over S idle seconds (utime + stime from ``/proc/PID/stat``); with ``--witness``, a second
witness without ``--http`` ("wx") joins first, so the figures also show a witness without the
HTTP stack (the cluster then has 4 members, 2 of weight 0).

Before each kill the script waits a random 0 to ``--jitter-s`` seconds (seeded by ``--seed``).
Members probe on a grid of the shared wall clock (``membership.core``, "Probe schedule"), and
without that wait the kills of a run fall at about the same phase of it, so detection would be
measured at one phase only (``--jitter-s 0``: the behaviour before 2026-11-25).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from simulations.stats import percentiles  # nearest-rank, as the simulator reports them

from host_cluster import Cluster, Hosts, Loopback, alive
from ownership_sampler import Round
from ports import free_port


def victim_events(hosts: Hosts, survivors: list[str], victim: str, since: float) -> dict[str, dict[str, float]]:
    """survivor -> {"suspect": wall time, "dead": wall time}: the first such event about
    ``victim`` at or after ``since`` in the survivor's event log (a kind missing: not seen).
    Fetched from a thread that entered the hosts' network first, as the sampler does."""
    out: dict[str, dict[str, float]] = {}
    failed: list[BaseException] = []

    def fetch() -> None:
        try:
            hosts.enter()
            with httpx.Client(timeout=5.0) as http:
                for name in survivors:
                    body = http.get(f"http://{hosts.http(name)}/v1/events", params={"limit": 1000}).json()
                    seen: dict[str, float] = {}
                    for e in body["events"]:
                        if e["member"] == victim and e["at"] >= since and e["kind"] in ("suspect", "dead"):
                            seen.setdefault(e["kind"], e["at"])
                    out[name] = seen
        except BaseException as exc:  # re-raised in the caller's thread
            failed.append(exc)

    t = threading.Thread(target=fetch)
    t.start()
    t.join()
    if failed:
        raise failed[0]
    return out


def from_events(events: dict[str, dict[str, float]], kill_wall: float) -> dict[str, float | None]:
    """First suspicion anywhere, and the death in the first and the last survivor's view, in
    seconds after the kill (None: some survivor's log has no death, e.g. the log wrapped)."""
    suspects = [e["suspect"] for e in events.values() if "suspect" in e]
    deaths = [e.get("dead") for e in events.values()]
    known = [d for d in deaths if d is not None]
    return {"suspect_first": min(suspects) - kill_wall if suspects else None,
            "dead_first": min(known) - kill_wall if known else None,
            "dead_everywhere": max(known) - kill_wall if known and len(known) == len(deaths) else None}


def survivor_drops(before: list[Round], after: list[Round], survivors: list[str]) -> int:
    """Partitions a survivor owned in the last round before the kill and missed in a later
    round up to the takeover: a kill moves partitions *to* survivors, never away from them,
    so each is a drop by a healthy member (issue 29 item 6; 0 is the goal)."""
    if not before:
        return 0
    held = {name: parts for name, parts in before[-1].owners().items() if name in survivors}
    lost: dict[str, set[int]] = {name: set() for name in held}
    for r in after:
        for name, parts in r.owners().items():
            if name in held:
                lost[name] |= held[name] - parts
    return sum(map(len, lost.values()))


def pool(paths: list[str]) -> int:
    rows = [json.loads(line) for p in paths for line in Path(p).read_text().splitlines() if line.strip()]
    print(f"{len(rows)} kills from {len(paths)} file(s)")
    for key in ("detected", "suspect_first", "dead_first", "dead_everywhere", "taken"):
        xs = [r[key] for r in rows if r.get(key) is not None]
        if xs:
            p = percentiles(xs, (50, 90, 99))
            print(f"  {key:16s} n={len(xs):3d}  p50 {p['p50']:.3f}  p90 {p['p90']:.3f}  "
                  f"p99 {p['p99']:.3f}  mean {statistics.fmean(xs):.3f}  max {p['max']:.3f} s")
    return 0


def cpu_s(pid: int) -> float | None:
    """utime + stime of ``pid``, all its threads (``/proc/PID/stat`` fields 14-15), in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int | None:
    """Resident set size of ``pid`` (VmRSS, KiB), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
    except (OSError, StopIteration, ValueError):
        return None


def footprint(c: Cluster, seconds: float, bare_witness: bool) -> None:
    """RSS and idle CPU of every node process, the sampler stopped (module docstring).
    ``bare_witness``: first add a witness without ``--http`` (it never imports the HTTP stack)."""
    c.sampler.stop()
    if bare_witness:
        c.witnesses.add("wx")
        c.hosts.start("wx", ["--id", "wx", "--gossip", f"127.0.0.1:{free_port()}",
                             "--partitions", str(c.partitions), "--join", c.hosts.gossip(c.names[0])], "witness")
        time.sleep(15.0)  # joined, in the stable view, renewing
    time.sleep(5.0)  # the last requests' work done
    pids = {name: proc.pid for name, proc in c.hosts.procs.items() if proc.poll() is None}
    before, t0 = {n: cpu_s(pid) or 0.0 for n, pid in pids.items()}, time.monotonic()
    time.sleep(seconds)
    after, elapsed = {n: cpu_s(pid) or 0.0 for n, pid in pids.items()}, time.monotonic() - t0
    for name, pid in pids.items():
        role = ("witness" if name in c.witnesses else "node") + (", no HTTP" if name == "wx" else "")
        cpu = (after[name] - before[name]) / elapsed
        print(f"footprint {name} ({role}, pid {pid}): RSS {(rss_kib(pid) or 0) / 1024:.1f} MiB, "
              f"idle CPU {100 * cpu:.2f} % of a core over {elapsed:.0f} s", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--where", choices=("loopback", "netns"), default="loopback")
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--jitter-s", type=float, default=1.0,
                    help="wait a random 0..this before each kill (default: one probe period)")
    ap.add_argument("--seed", type=int, default=1, help="of the waits before the kills")
    ap.add_argument("--out", help="append one JSON line per kill to this file")
    ap.add_argument("--pool", nargs="+", metavar="FILE", help="only print percentiles over these --out files")
    ap.add_argument("--witness", action="store_true",
                    help="the last node is a `placement witness`; kill each of the others in turn")
    ap.add_argument("--footprint", type=float, default=0.0, metavar="S",
                    help="at the end: RSS and CPU of every process over S idle seconds")
    args = ap.parse_args()
    if args.pool:
        return pool(args.pool)
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
    c = Cluster(hosts, partitions=256, witnesses=hosts.names[-1:] if args.witness else ())
    rows = []
    try:
        c.boot()
        c.settled(timeout_s=90)
        rng = random.Random(args.seed)
        workers = [n for n in c.names if n not in c.witnesses]
        for k in range(args.kills):
            victim = workers[k % len(workers)] if args.witness else c.names[-1]
            survivors = [n for n in c.names if n != victim]
            time.sleep(rng.uniform(0.0, args.jitter_s))  # the kill's phase (docstring), not a wait for an effect
            t0, kill_wall = time.monotonic(), time.time()
            before = c.sampler.between(t0 - 5.0, t0)
            c.kill(victim)
            detected = c.wait(lambda r: r.sees(survivors, alive(survivors)), t0, 60, "the death everywhere").end - t0
            exact = from_events(victim_events(hosts, survivors, victim, kill_wall), kill_wall)
            expected = c.placed(survivors)
            taken = c.wait(lambda r: r.owns_exactly(expected), t0, 60, "the takeover").end - t0
            drops = survivor_drops(before, c.sampler.between(t0, t0 + taken), survivors)
            t1 = time.monotonic()
            c.start(victim)
            back = c.settled(timeout_s=90).end - t1
            c.assert_exclusive(t0)
            rows.append((detected, taken, back))
            logged = ", ".join(f"{what} {v:.2f}" if v is not None else f"{what} -" for what, v in exact.items())
            print(f"kill {k + 1} ({victim}): detected {detected:.2f} s, taken over {taken:.2f} s, "
                  f"back after restart {back:.2f} s (event logs: {logged} s); partitions dropped by "
                  f"survivors {drops}", flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps({"detected": detected, "taken": taken, "back": back, "victim": victim,
                                        "survivor_drops": drops, **exact}) + "\n")
        if args.footprint:
            footprint(c, args.footprint, args.witness and args.where == "loopback")
    finally:
        c.close()
    if not rows:
        return 0
    med = [statistics.median(col) for col in zip(*rows)]
    what = f"{args.nodes - 1} nodes + 1 witness" if args.witness else f"{args.nodes} nodes"
    print(f"{args.where}, {what}, {len(rows)} kills: median detected {med[0]:.2f} s, "
          f"taken over {med[1]:.2f} s, back {med[2]:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
