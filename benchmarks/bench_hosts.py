"""Failure detection and takeover of real `placement node` processes: loopback vs separate hosts.

    python benchmarks/bench_hosts.py --where loopback [--kills 3] [--nodes 5] [--seed 1] [--out FILE]
    sudo python benchmarks/bench_hosts.py --where netns [--kills 3]     # network namespaces, root
    python benchmarks/bench_hosts.py --pool FILE [FILE ...]            # percentiles over --out files

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

Before each kill the script waits a random 0 to ``--jitter-s`` seconds (seeded by ``--seed``).
Members probe on a grid of the shared wall clock (``membership.core``, "Probe schedule"), and
without that wait the kills of a run fall at about the same phase of it, so detection would be
measured at one phase only (``--jitter-s 0``: the behaviour before 2026-11-25).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from simulations.metrics import percentiles  # nearest-rank, as the simulator reports them

from host_cluster import Cluster, Hosts, Loopback, alive


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
    c = Cluster(hosts, partitions=256)
    rows = []
    try:
        c.boot()
        c.settled(timeout_s=90)
        victim, survivors = c.names[-1], c.names[:-1]
        rng = random.Random(args.seed)
        for k in range(args.kills):
            time.sleep(rng.uniform(0.0, args.jitter_s))  # the kill's phase (docstring), not a wait for an effect
            t0, kill_wall = time.monotonic(), time.time()
            c.kill(victim)
            detected = c.wait(lambda r: r.sees(survivors, alive(survivors)), t0, 60, "the death everywhere").end - t0
            exact = from_events(victim_events(hosts, survivors, victim, kill_wall), kill_wall)
            expected = c.placed(survivors)
            taken = c.wait(lambda r: r.owns_exactly(expected), t0, 60, "the takeover").end - t0
            t1 = time.monotonic()
            c.start(victim)
            back = c.settled(timeout_s=90).end - t1
            c.assert_exclusive(t0)
            rows.append((detected, taken, back))
            logged = ", ".join(f"{what} {v:.2f}" if v is not None else f"{what} -" for what, v in exact.items())
            print(f"kill {k + 1}: detected {detected:.2f} s, taken over {taken:.2f} s, back after restart {back:.2f} s "
                  f"(event logs: {logged} s)", flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps({"detected": detected, "taken": taken, "back": back, **exact}) + "\n")
    finally:
        c.close()
    med = [statistics.median(col) for col in zip(*rows)]
    print(f"{args.where}, {args.nodes} nodes, {len(rows)} kills: median detected {med[0]:.2f} s, "
          f"taken over {med[1]:.2f} s, back {med[2]:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
