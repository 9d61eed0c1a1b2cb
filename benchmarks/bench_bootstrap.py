"""Forming a cluster on real processes (loopback): a founder against ``--bootstrap``, and what a
restart of the first node costs in each (README, "Forming a cluster").

Per run, N ``placement node`` processes (P partitions) are started at once and watched from outside
(``tests/ownership_sampler``: two owners count only when proven by the order of the answers):

* **founder**: n1 without ``--join``, the others join it. Reported: seconds from the start to
  every partition owned as the placement says. Then n1 is killed (-9) and started again *with its
  own command* (no ``--join``; it rejoins through its members file, ``placement.service.members_file``;
  before that file it founded a second cluster): the partitions proven owned twice meanwhile, and
  how long.
* **bootstrap**: every node with ``--join`` (n1 to n2, the others to n1) and ``--bootstrap
  n1,n2,n3``. Reported: seconds to view 1 at every node, to every partition owned; then n1 is
  killed and started again with its command: partitions proven owned twice (the goal: 0), and
  seconds until it owns its share again.

Then, in both modes, every node is killed and all are started again with their commands: seconds
from the kill until every partition is owned again, and partitions proven owned twice meanwhile
(a founder's cluster forms again by rule 11, ``ownership.core``).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_bootstrap.py [--nodes 3] [--partitions 64] [--runs 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from host_cluster import Cluster, Loopback
from ownership_sampler import WaitTimeout


def _view_everywhere(c: Cluster, num: int) -> bool:
    try:
        return all(httpx.get(f"http://{c.hosts.http(n)}/v1/ownership", timeout=2).json()["stable_view"] >= num
                   for n in c.names)
    except (httpx.HTTPError, ValueError, KeyError):
        return False


def _poll(predicate, timeout_s: float) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if predicate():
            return time.monotonic()
        time.sleep(0.1)
    return None


def run(mode: str, nodes: int, partitions: int) -> dict[str, object]:
    hosts = Loopback(nodes)
    names = hosts.names
    extra: dict[str, list[str]] = {}
    if mode == "bootstrap":
        listed = ",".join(names[:3])
        extra = {n: ["--bootstrap", listed] for n in names}
        extra[names[0]] = ["--join", hosts.gossip(names[1]), "--bootstrap", listed]
    c = Cluster(hosts, partitions, extra_args=extra)
    out: dict[str, object] = {"mode": mode}

    def founder_cmd(name: str) -> None:  # the founder's own command: no --join
        c.hosts.start(name, ["--id", name, "--gossip", hosts.gossip(name), "--http", hosts.http(name),
                             "--partitions", str(partitions)])
    try:
        t0 = c.boot()
        seen = _poll(lambda: _view_everywhere(c, 1), 90)
        out["view_1_s"] = None if seen is None else round(seen - t0, 2)
        out["all_owned_s"] = round(c.settled(timeout_s=90).end - t0, 2)
        # kill -9 n1 and start it again with its command: the founder's has no --join.
        c.kill(names[0])
        c.hosts.procs[names[0]].wait(10)
        killed = time.monotonic()
        if mode == "founder":
            founder_cmd(names[0])
        else:
            c.start(names[0])
        try:
            back = c.settled(timeout_s=90)
            out["restart_owns_share_s"] = round(back.end - killed, 2)
        except WaitTimeout:
            out["restart_owns_share_s"] = None
        rounds = c.sampler.between(killed, time.monotonic())
        proven = {p for r in rounds for p, _, _ in r.proven}
        spans = [r.start - killed for r in rounds if r.proven]
        out["owned_twice_partitions"] = len(proven)
        out["owned_twice_for_s"] = round(max(spans) - min(spans), 2) if spans else 0.0
        # Every node killed, then all started again with their commands (n1 first).
        for name in names:
            c.kill(name)
            c.hosts.procs[name].wait(10)
        killed = time.monotonic()
        for name in names:
            founder_cmd(name) if mode == "founder" and name == names[0] else c.start(name)
        try:
            out["all_restarted_owned_s"] = round(c.settled(timeout_s=90).end - killed, 2)
        except WaitTimeout:
            out["all_restarted_owned_s"] = None
        rounds = c.sampler.between(killed, time.monotonic())
        out["all_restarted_owned_twice"] = len({p for r in rounds for p, _, _ in r.proven})
    finally:
        c.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--partitions", type=int, default=64)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args(argv)
    for i in range(args.runs):
        for mode in ("founder", "bootstrap"):
            print(f"run {i + 1}: {run(mode, args.nodes, args.partitions)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
