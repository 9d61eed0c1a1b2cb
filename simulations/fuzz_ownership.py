"""Random fault schedules for the exclusive-ownership rules: joins, graceful leaves, crashes,
restarts, two-way and one-way network partitions, heals, freezes up to 21 s and packet loss up to
10 %, in random order, on 8 nodes. Everything heals at 75 s. A schedule is a function of its
seed, so a failure is reproduced with ``python -m simulations.fuzz_ownership --seed K``. Every
invariant (``simulations.invariants``, the membership cores' own checks included) is checked
after every step: a run that breaks one stops there with ``InvariantViolation``.

Used by tests/test_exclusive.py and, for longer hunts, from the command line::

    python -m simulations.fuzz_ownership --seeds 0:200     # prints the seeds with dual ownership
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from ownership.lease import is_quorum

from .cluster import Cluster
from .engine import InvariantViolation
from .scenarios import run_scenario

__all__ = ["schedule", "run"]

KINDS = ("join", "leave", "crash", "restart", "partition", "oneway", "heal", "freeze", "loss")


def schedule(seed: int, events: int = 10) -> list[tuple[float, str, float]]:
    """``events`` faults (time after warm-up, kind, a uniform draw that sizes it)."""
    rng = random.Random(seed)
    return [(round(rng.uniform(2, 70), 2), rng.choice(KINDS), rng.random()) for _ in range(events)]


def run(seed: int, nodes: int = 8, partitions: int = 128, duration_s: float = 90.0,
        durable_state: bool = False) -> dict[str, Any]:
    """Run the schedule of ``seed`` on ``swim-exclusive``; the metrics dict, schedule included.
    ``durable_state``: a restarted witness gets back the promises its previous process
    persisted (``--state-dir``), and so takes part in choosing views at once."""
    faults = schedule(seed)

    def apply(cluster) -> None:
        rng = random.Random(seed * 7919)

        def act(kind: str, x: float) -> None:
            live = sorted(i for i, n in cluster.nodes.items() if n.up and not n.leaving)
            if kind == "join" or (len(live) <= 3 and kind in ("leave", "crash")):
                cluster.join()
            elif kind == "leave":
                cluster.leave([rng.choice(live)])
            elif kind == "crash":
                cluster.crash([rng.choice(live)])
            elif kind == "restart":
                cluster.restart([rng.choice(sorted(cluster.nodes))])
            elif kind in ("partition", "oneway"):
                side = rng.sample(live, max(1, int(x * len(live))))
                cluster.partition(side, [i for i in live if i not in side], both_ways=kind == "partition")
            elif kind == "heal":
                cluster.heal()
            elif kind == "freeze":
                cluster.stall([rng.choice(live)], 1 + 20 * x)
            else:
                cluster.set_loss(round(0.1 * x, 3))

        now = cluster.sim.now
        for at, kind, x in faults:
            cluster.sim.at(now + at, act, kind, x)
        cluster.sim.at(now + 75, cluster.heal)
        cluster.sim.at(now + 75, cluster.set_loss, 0.0)

    clusters: list[Cluster] = []

    def before_run(cluster: Cluster) -> None:
        clusters.append(cluster)
        apply(cluster)

    result = run_scenario("steady", nodes=nodes, duration_s=duration_s, seed=seed, partitions=partitions,
                          system="swim-exclusive", before_run=before_run, durable_state=durable_state)
    result["schedule"] = faults
    result["quorum_at_end"] = quorum_at_end(clusters[0])
    return result


def quorum_at_end(cluster) -> bool:
    """Does the latest stable view keep a majority of its witnesses running? Without one no
    member can hold a lease, so partitions stay unowned by design (keep-majority); with one,
    a partition unowned long after the heal is a liveness defect."""
    owns = [n.own for n in cluster.nodes.values() if n.up and getattr(n, "own", None) is not None]
    if not owns:
        return False
    latest = max(owns, key=lambda o: o.lease.num).lease
    running = {o.me for o in owns}
    return is_quorum(running & set(latest.witnesses), latest.witnesses)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0:40", help="A:B, the seeds A..B-1 (default 0:40)")
    p.add_argument("--seed", type=int, help="one seed, with its schedule and the first overlaps")
    p.add_argument("--duration", type=float, default=90.0,
                   help="simulated seconds after warm-up (default 90; everything heals at 75)")
    p.add_argument("--durable-state", action="store_true",
                   help="witnesses keep their promises across restarts, as with --state-dir")
    args = p.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(*map(int, args.seeds.split(":")))
    bad = regressed = stuck = quorumless = 0
    for seed in seeds:
        try:
            r = run(seed, duration_s=args.duration, durable_state=args.durable_state)
        except InvariantViolation as exc:
            bad += 1
            print(f"seed {seed}: {exc} schedule {schedule(seed)}", flush=True)
            continue
        dual = r["dual_owned_partition_s_exact"]
        if r["unowned_at_end"]:
            lost = not r["quorum_at_end"]
            quorumless += lost
            stuck += not lost
            why = "no witness quorum of the last stable view runs (by design)" if lost else "LIVENESS DEFECT"
            print(f"seed {seed}: {r['unowned_at_end']} partitions unowned at the end "
                  f"({args.duration - 75:g} s after the heal): {why}", flush=True)
        if r["epoch_regressions"]:
            regressed += 1
            print(f"seed {seed}: {r['epoch_regressions']} epoch regressions", flush=True)
        if dual or args.seed is not None:
            bad += bool(dual)
            print(f"seed {seed}: {dual:g} dual-owned partition-s {r['dual_owned_examples'][:2]} "
                  f"schedule {r['schedule']}", flush=True)
    print(f"{bad} of {len(seeds)} seeds with dual ownership or another invariant violated, "
          f"{regressed} with epoch regressions, {stuck} with partitions unowned at the end despite a "
          f"witness quorum, {quorumless} without one")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
