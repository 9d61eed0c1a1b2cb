"""Random fault schedules for the exclusive-ownership rules: joins, graceful leaves, crashes,
restarts, two-way and one-way network partitions, heals, freezes up to 21 s and packet loss up to
10 %, in random order, on 8 nodes. Everything heals at 75 s. A schedule is a function of its
seed, so a failure is reproduced with ``python -m simulations.fuzz_ownership --seed K``. Every
invariant (``simulations.invariants``, the membership cores' own checks included) is checked
after every step: a run that breaks one stops there with ``InvariantViolation``.

``--wide`` (issue 29 item 4) draws the cluster size from ``--nodes-range`` (3-12) and 8-14
faults from a wider set: besides the above, *bursts* (2-4 of them within one second), *repeated
restarts* of one member (2-5, 0.5-8 s apart), *long one-way cuts* (20-50 s, then those links
heal) and *a witness restarted during a view change* (a member joins, crashes or leaves, and
0.05-2 s later a witness of the current stable view restarts). The old schedules stay what they
were: ``--seed K`` without ``--wide`` reproduces them.

Used by tests/test_exclusive.py and, for longer hunts, from the command line::

    python -m simulations.fuzz_ownership --seeds 0:200     # prints the seeds with dual ownership
    python -m simulations.fuzz_ownership --wide --seeds 0:2000 --duration 180
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from ownership.views import witness_set
from placement.pins import encode_pins

from .cluster import Cluster
from .engine import InvariantViolation
from .invariants import EPOCHS_RISE, EpochsRise
from .scenarios import run_scenario

__all__ = ["schedule", "wide_schedule", "run"]

KINDS = ("join", "leave", "crash", "restart", "partition", "oneway", "heal", "freeze", "loss")
#: ``--wide`` adds these (module docstring).
WIDE_KINDS = (*KINDS, "burst", "restarts", "longcut", "witness-restart")
HEAL_AT = 75.0  # everything heals then (after warm-up)


def schedule(seed: int, events: int = 10) -> list[tuple[float, str, float]]:
    """``events`` faults (time after warm-up, kind, a uniform draw that sizes it)."""
    rng = random.Random(seed)
    return [(round(rng.uniform(2, 70), 2), rng.choice(KINDS), rng.random()) for _ in range(events)]


def wide_schedule(seed: int, nodes_range: tuple[int, int] = (3, 12)) -> tuple[int, list[tuple[float, str, float]]]:
    """``--wide``: (cluster size, faults), from ``WIDE_KINDS``; a function of the seed."""
    rng = random.Random(f"wide/{seed}")
    nodes = rng.randint(*nodes_range)
    events = rng.randint(8, 14)
    return nodes, [(round(rng.uniform(2, 70), 2), rng.choice(WIDE_KINDS), rng.random()) for _ in range(events)]


def run(seed: int, nodes: int = 8, partitions: int = 128, duration_s: float = 90.0, *,
        epochs_invariant: bool = True, wide: bool = False,
        nodes_range: tuple[int, int] = (3, 12), durable_state: bool | str = False,
        bootstrap: bool = False, rejoin_files: bool = False,
        exclusive: dict[str, Any] | None = None, pins: bool = False) -> dict[str, Any]:
    """Run the schedule of ``seed`` on ``swim-exclusive``; the metrics dict, schedule included.
    ``epochs_invariant=False`` leaves out the "epochs rise" invariant: the run goes on past an
    epoch regression and counts it (``epoch_regressions``). ``wide``: the wider schedules of
    ``wide_schedule`` (``nodes`` is then drawn from ``nodes_range``). ``settled_at`` in the
    result: when the last fault ended (the heal, or a freeze that outlasted it), after warm-up.
    ``durable_state``: a restarted witness gets back the promises its previous process
    persisted (``--state-dir``), and so takes part in choosing views at once (``"yields"``: a
    node's default record, which yields to another incarnation). ``rejoin_files``:
    every restart rejoins through the members its previous process knew and may found a
    cluster (rule 11), as a node restarted without ``--join``. ``exclusive``: ``ExclusiveConfig``
    fields to set (``--witness-groups``). ``pins``: every 2-12 s until the heal, every running
    member is given pins "planned" from its own stable view (rule 13): a function of the view
    alone (``fuzz_pins``), as a planner's are, so members holding the same view agree."""
    if wide:
        nodes, faults = wide_schedule(seed, nodes_range)
    else:
        faults = schedule(seed)
    settled = [HEAL_AT]
    pin_sets: set[bytes] = set()  # the pins stable views held at the pin rounds (committed ones)

    def apply(cluster) -> None:
        rng = random.Random(seed * 7919)
        sim = cluster.sim
        t0 = sim.now

        def live() -> list[str]:
            return sorted(i for i, n in cluster.nodes.items() if n.up and not n.leaving)

        def later(dt: float, fn, *args) -> None:
            if sim.now + dt < t0 + HEAL_AT:  # (faults stop at the heal)
                sim.at(sim.now + dt, fn, *args)

        def witnesses() -> list[str]:
            owns = [n.own for n in cluster.nodes.values() if n.up and getattr(n, "own", None) is not None]
            if not owns:
                return []
            return list(max(owns, key=lambda o: o.lease.num).lease.witnesses)

        def unblock(links: list[tuple[str, str]]) -> None:
            cluster.sim.network.blocked.difference_update(links)

        def act(kind: str, x: float) -> None:
            up = live()
            if kind == "join" or (len(up) <= 3 and kind in ("leave", "crash")):
                cluster.join()
            elif kind == "leave":
                cluster.leave([rng.choice(up)])
            elif kind == "crash":
                cluster.crash([rng.choice(up)])
            elif kind == "restart":
                cluster.restart([rng.choice(sorted(cluster.nodes))])
            elif kind in ("partition", "oneway"):
                side = rng.sample(up, max(1, int(x * len(up))))
                cluster.partition(side, [i for i in up if i not in side], both_ways=kind == "partition")
            elif kind == "heal":
                cluster.heal()
            elif kind == "freeze":
                seconds = 1 + 20 * x
                cluster.stall([rng.choice(up)], seconds)
                settled[0] = max(settled[0], sim.now - t0 + seconds)
            elif kind == "loss":
                cluster.set_loss(round(0.1 * x, 3))
            elif kind == "burst":  # 2-4 faults within one second
                for _ in range(2 + int(3 * x)):
                    later(rng.uniform(0, 1), act, rng.choice(KINDS), rng.random())
            elif kind == "restarts":  # one member, again and again
                who, dt = rng.choice(sorted(cluster.nodes)), 0.0
                for _ in range(2 + int(4 * x)):
                    later(dt, cluster.restart, [who])
                    dt += rng.uniform(0.5, 8)
            elif kind == "longcut":  # one way, 20-50 s, then those links heal
                side = rng.sample(up, max(1, int(x * len(up))))
                before = set(cluster.sim.network.blocked)
                cluster.partition(side, [i for i in up if i not in side], both_ways=False)
                later(20 + 30 * rng.random(), unblock, sorted(cluster.sim.network.blocked - before))
            elif kind == "witness-restart":  # a view change, and a witness restarts while it is chosen
                change = rng.choice(("join", "crash", "leave"))
                act(change, x)
                ws = [w for w in witnesses() if cluster.nodes[w].up]
                if ws:
                    later(0.05 + 1.95 * x, cluster.restart, [rng.choice(ws)])

        def pin_round() -> None:
            for node in cluster.nodes.values():
                own = getattr(node, "own", None)
                if node.up and own is not None and own.lease.views.view.num:
                    v = own.lease.views.view
                    pin_sets.add(v.pins)
                    node.set_pins(encode_pins(fuzz_pins(seed, v, partitions)), v.pins, v.loads_at)
            later(rng.uniform(2, 12), pin_round)

        if pins:  # (the rounds draw from the faults' generator: with them, faults pick other members)
            later(rng.uniform(2, 12), pin_round)
        for at, kind, x in faults:
            sim.at(t0 + at, act, kind, x)
        sim.at(t0 + HEAL_AT, cluster.heal)
        sim.at(t0 + HEAL_AT, cluster.set_loss, 0.0)

    clusters: list[Cluster] = []

    def before_run(cluster: Cluster) -> None:
        clusters.append(cluster)
        if not epochs_invariant:
            cluster.sim.invariants[:] = [c for c in cluster.sim.invariants if not isinstance(c, EpochsRise)]
        apply(cluster)

    result = run_scenario("steady", nodes=nodes, duration_s=duration_s, seed=seed, partitions=partitions,
                          system="swim-exclusive", before_run=before_run, durable_state=durable_state,
                          bootstrap=bootstrap, rejoin_files=rejoin_files, exclusive=exclusive)
    result["schedule"] = faults
    result["nodes"] = nodes
    result["quorum_at_end"] = quorum_at_end(clusters[0])
    result["settled_at"] = round(settled[0], 2)
    result["pin_sets_committed"] = len(pin_sets - {b""})
    return result


def fuzz_pins(seed: int, view, partitions: int) -> dict[int, str]:
    """Pins "planned" from ``view``: up to 10 % of the partitions to members of positive weight
    (one plan in five drops them all), drawn from the seed and the view's checksum only."""
    rng = random.Random(f"pins/{seed}/{view.num}/{view.ck}")
    members = [m for m, w in zip(view.members, view.weights) if w > 0]
    if not members or rng.random() < 0.2:
        return {}
    return {p: rng.choice(members) for p in rng.sample(range(partitions), rng.randint(1, partitions // 10))}


def quorum_at_end(cluster) -> bool:
    """Does the latest stable view keep a majority of its witnesses running? Without one no
    member can hold a lease, so partitions stay unowned by design (keep-majority); with one,
    a partition unowned long after the heal is a liveness defect. "Latest" counts the views
    running witnesses kept in their persisted state too (``--durable-state``): a restarted
    witness that remembers view n refuses to go back to an older one, so only n's witnesses can
    move the cluster on."""
    running = [n for n in cluster.nodes.values() if n.up and getattr(n, "own", None) is not None]
    if not running:
        return False
    views = [n.own.lease.views.view for n in running]
    views += [n.durable[n.node_id].views.view for n in running
              if getattr(n, "durable", None) is not None and n.node_id in n.durable]
    latest = max(views, key=lambda v: v.num)
    lease_views = running[0].own.lease.views
    # (With witness groups: a quorum of every group, which choosing the next view takes.)
    return witness_set(latest.members, lease_views.k, lease_views.per_group).quorum({n.node_id for n in running})


#: A run must last this long after its last fault ended (``settled_at``) before partitions
#: unowned at its end count as a liveness defect: recovering takes SWIM's re-detection, a
#: settled stable view, ``query_after_s`` and census rounds, per view change (15-23 s seen).
JUDGE_AFTER_S = 60.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0:40", help="A:B, the seeds A..B-1 (default 0:40)")
    p.add_argument("--seed", type=int, help="one seed, with its schedule and the first overlaps")
    p.add_argument("--duration", type=float, default=90.0,
                   help="simulated seconds after warm-up (default 90; everything heals at 75; partitions "
                        f"unowned at the end are judged only {JUDGE_AFTER_S:g} s after the last fault ended: "
                        "use 180 for liveness)")
    p.add_argument("--count-epochs", action="store_true",
                   help="count epoch regressions instead of stopping a run at the first one (the "
                        "'epochs rise' invariant is left out)")
    p.add_argument("--wide", action="store_true",
                   help="the wider schedules: cluster size from --nodes-range, bursts, repeated restarts, "
                        "long one-way cuts, witness restarts during view changes (module docstring)")
    p.add_argument("--nodes-range", default="3:12", help="with --wide: A:B, cluster sizes A..B (default 3:12)")
    p.add_argument("--durable-state", nargs="?", const="binds", choices=("binds", "yields"), default=None,
                   help="witnesses keep their promises across restarts, as with --state-dir; 'yields': as a "
                        "node's default record (no --state-dir), which yields to a cluster founded anew")
    p.add_argument("--bootstrap", action="store_true",
                   help="no founder: every node starts as with --join, and the first three are the "
                        "--bootstrap list that chooses the first stable view (README, \"Forming a cluster\")")
    p.add_argument("--rejoin-file", action="store_true",
                   help="every restart rejoins through the members it knew (its members file) and may found a "
                        "cluster when every member it sees holds no view, as a node restarted without --join")
    p.add_argument("--witness-groups", type=int, default=0, metavar="M",
                   help="members per witness group (ExclusiveConfig.witness_group_members; 0: one group)")
    p.add_argument("--witnesses", type=int, default=None, metavar="K",
                   help="witnesses per view, per group with --witness-groups (default: ExclusiveConfig's)")
    p.add_argument("--pins", action="store_true",
                   help="members are given pins planned from their stable views every 2-12 s (rule 13), so "
                        "views that move pinned partitions interleave with the faults")
    args = p.parse_args(argv)
    exclusive: dict[str, Any] = {"witness_group_members": args.witness_groups} if args.witness_groups else {}
    if args.witnesses is not None:
        exclusive["witnesses"] = args.witnesses
    seeds = [args.seed] if args.seed is not None else range(*map(int, args.seeds.split(":")))
    lo, hi = map(int, args.nodes_range.split(":"))

    def faults(seed: int) -> Any:
        return wide_schedule(seed, (lo, hi)) if args.wide else schedule(seed)

    bad = regressed = stuck = quorumless = early = 0
    for seed in seeds:
        try:
            r = run(seed, duration_s=args.duration, epochs_invariant=not args.count_epochs,
                    wide=args.wide, nodes_range=(lo, hi), durable_state=args.durable_state or False,
                    bootstrap=args.bootstrap, rejoin_files=args.rejoin_file, exclusive=exclusive or None,
                    pins=args.pins)
        except InvariantViolation as exc:
            if exc.invariant == EPOCHS_RISE:
                regressed += 1
            else:
                bad += 1
            print(f"seed {seed}: {exc} schedule {faults(seed)}", flush=True)
            continue
        dual = r["dual_owned_partition_s_exact"]
        if r["unowned_at_end"]:
            after = args.duration - r["settled_at"]
            if not r["quorum_at_end"]:
                quorumless += 1
                why = "no witness quorum of the last stable view runs (by design)"
            elif after < JUDGE_AFTER_S:
                early += 1
                why = f"too soon to judge (run with --duration {r['settled_at'] + JUDGE_AFTER_S:g} or more)"
            else:
                stuck += 1
                why = "LIVENESS DEFECT"
            print(f"seed {seed}: {r['unowned_at_end']} partitions unowned at the end "
                  f"({after:g} s after the last fault ended, {r['nodes']} nodes): {why}", flush=True)
        if r["epoch_regressions"]:
            regressed += 1
            print(f"seed {seed}: {r['epoch_regressions']} epoch regressions", flush=True)
        if dual or args.seed is not None:
            bad += bool(dual)
            print(f"seed {seed}: {dual:g} dual-owned partition-s {r['dual_owned_examples'][:2]} "
                  f"{r['nodes']} nodes, schedule {r['schedule']}", flush=True)
    print(f"{bad} of {len(seeds)} seeds with dual ownership or another invariant violated, "
          f"{regressed} with epoch regressions, {stuck} with partitions unowned at the end despite a "
          f"witness quorum, {quorumless} without one, {early} too soon after the last fault to judge")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
