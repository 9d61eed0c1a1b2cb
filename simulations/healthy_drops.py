"""Hunt for partitions dropped by healthy members when others die (issue 29 item 6).

Runs fault schedules on ``swim-exclusive`` and counts, per run, the partitions that members
which never faulted (never crashed, frozen, slowed, cut off, restarted or left) stopped owning
without a graceful handoff: dropped at once (lease lost, condemned, a jump to a newer stable
view) or released because their lease was about to end (``Release(reason="fenced")``, which the
simulator's ``healthy_dropped_partitions`` counted as a handoff before 2026-11-26).

    python -m simulations.healthy_drops --seeds 0:40 [--kinds crash-one,crash-two ...] [--trace]

Kinds (each a function of its seed: which nodes, when, how much loss):

* ``crash-one``: one random member, kill -9;
* ``crash-witness``: one witness of the stable view;
* ``crash-many``: 2-4 members at once (an application process hosting several embedded nodes);
* ``crash-spread``: 2-4 members 0.05-3 s apart (several processes, or one whose deaths are
  detected at different times);
* ``crash-proposer``: one member, then the first member seen proposing its removal, as soon as
  it has sent its ``Accept``s (a proposer dying mid-view-change);
* ``crash-loss``: as ``crash-one`` with 2-10 % loss on every link;
* ``crash-lagged``: as ``crash-one``, while another member handles every datagram and timer
  0.05-1 s late from the start (a busy application loop or GIL hosting an embedded node). It is
  not marked slow, but its own drops are counted apart (``lagged_drops``), not as healthy ones;
* ``loss-only`` and ``lag-only`` (controls, not in the default list): the same loss, or the
  same lagging member, and nobody dies.

``--nodes`` fixes the cluster size (default: drawn from 3-16 per seed) and ``--loss`` sets the loss
of every kind.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from typing import Any

from ownership import Ended, Release
from ownership.views import witness_set

from .scenarios import run_scenario

KINDS = ("crash-one", "crash-witness", "crash-many", "crash-spread", "crash-proposer", "crash-loss", "crash-lagged")
#: Not run by default: the control for ``crash-loss`` (the same loss, nobody dies).
CONTROLS = ("loss-only", "lag-only")


def run(kind: str, seed: int, *, nodes: int | None = None, partitions: int = 256,
        duration_s: float = 40.0, loss: float | None = None, trace: bool = False) -> dict[str, Any]:
    # (The control draws what ``crash-loss`` draws: the same cluster size, time and loss.)
    rng = random.Random(f"{'crash-loss' if kind == 'loss-only' else kind}/{seed}")
    n = nodes or rng.choice((3, 4, 5, 6, 8, 12, 16))
    drops: list[tuple[float, str, str, int]] = []  # (time, node, how, partition)
    log: list[str] = []
    state: dict[str, Any] = {"t0": 0.0}

    def before_run(cluster) -> None:
        sim = cluster.sim
        metrics = cluster.metrics
        t0 = state["t0"] = sim.now
        state["cluster"] = cluster
        released: dict[tuple[str, int], str] = {}  # (node, partition) -> reason of its release under way

        def hook(node, action) -> None:
            metrics.ownership(node, action)
            key = (node.node_id, action.partition)
            if isinstance(action, Release):
                released[key] = action.reason
            elif isinstance(action, Ended):
                how = released.pop(key, "dropped")
                if how in ("dropped", "fenced") and sim.now >= t0:  # (faulted or not: judged at the end)
                    drops.append((round(sim.now - t0, 3), node.node_id, how, action.partition))
            else:
                released.pop(key, None)

        for node in cluster.nodes.values():
            node._on_ownership = hook

        def up() -> list[str]:
            return sorted(i for i, x in cluster.nodes.items() if x.up and not x.leaving)

        def stable_witnesses() -> list[str]:
            owns = [x.own for x in cluster.nodes.values() if x.up and getattr(x, "own", None) is not None]
            return list(max(owns, key=lambda o: o.lease.num).lease.witnesses) if owns else []

        def keeps_quorum(ids) -> bool:
            """A witness quorum of the stable view, and of the view without ``ids`` (and those
            already dead), keeps running: without one nobody may hold a lease, by design."""
            rest = set(up()) - set(ids)
            owns = [x.own for x in cluster.nodes.values() if x.up and getattr(x, "own", None) is not None]
            lease = max(owns, key=lambda o: o.lease.num).lease
            views = lease.views
            return views.witness_set.quorum(rest) and witness_set(rest, lease.k, views.per_group).quorum(rest)

        def victims_keeping_quorum(k: int, pool: list[str]) -> list[str]:
            for _ in range(50):
                ids = rng.sample(pool, k)
                if keeps_quorum(ids):
                    return ids
            log.append(f"{sim.now - t0:7.3f} no {k} victims keep a witness quorum: none")
            return []

        def crash(ids: list[str]) -> None:
            ids = [i for i in ids if cluster.nodes[i].up]
            if ids:
                log.append(f"{sim.now - t0:7.3f} crash {ids}")
                cluster.crash(ids)

        at = t0 + rng.uniform(5, 10)
        if kind in ("crash-loss", "loss-only"):
            cluster.set_loss(loss if loss is not None else round(rng.uniform(0.02, 0.10), 3))
        elif loss is not None:
            cluster.set_loss(loss)
        if kind in ("crash-one", "crash-loss"):
            sim.at(at, lambda: crash([rng.choice(up())]))
        elif kind == "loss-only":
            pass
        elif kind in ("crash-lagged", "lag-only"):
            lagged = rng.choice(up())
            state["lagged"] = lagged
            cluster.nodes[lagged].lag_s = rng.choice((0.05, 0.2, 0.5, 1.0))
            log.append(f"  0.000 {lagged} lags {cluster.nodes[lagged].lag_s} s")
            if kind == "crash-lagged":
                sim.at(at, lambda: crash(victims_keeping_quorum(1, [i for i in up() if i != lagged])))
        elif kind == "crash-witness":
            sim.at(at, lambda: crash([rng.choice([w for w in stable_witnesses() if w in up()])]))
        elif kind == "crash-many":
            k = min(rng.randint(2, 4), n // 2 - (n % 2 == 0))  # keep a witness quorum running
            sim.at(at, lambda: crash(victims_keeping_quorum(max(1, k), up())))
        elif kind == "crash-spread":
            k = max(1, min(rng.randint(2, 4), n // 2 - (n % 2 == 0)))
            dts = sorted(rng.uniform(0.05, 3) for _ in range(k - 1))
            victims: list[str] = []

            def first() -> None:
                victims.extend(victims_keeping_quorum(k, up()))
                if not victims:
                    return
                crash(victims[:1])
                for j, dt in enumerate(dts):
                    sim.at(sim.now + dt, lambda j=j: crash([victims[j + 1]]))
            sim.at(at, first)
        elif kind == "crash-proposer":
            def first() -> None:
                crash([rng.choice(up())])
                watch(sim.now + 15)

            def watch(until: float) -> None:
                for i in up():
                    own = getattr(cluster.nodes[i], "own", None)
                    p = None if own is None else own.lease.views._proposal
                    if p is not None and p.phase == 2:
                        # Only if a witness quorum of the view and of its successor keeps
                        # running: without one nobody holds a lease, by design (keep-majority).
                        rest = set(up()) - {i}
                        assert own is not None and p.value is not None  # (p came from own; phase 2 has a value)
                        k, per_group = own.lease.k, own.lease.views.per_group
                        if p.witnesses.quorum(rest) and witness_set(p.value.members, k, per_group).quorum(rest):
                            crash([i])
                        else:
                            log.append(f"{sim.now - t0:7.3f} no crash of proposer {i}: no witness quorum would run")
                        return
                if sim.now < until:
                    sim.at(sim.now + 0.002, watch, until)
            sim.at(at, first)
        else:
            raise ValueError(kind)

        if trace:
            def tracer() -> None:
                for i in up():
                    own = cluster.nodes[i].own
                    if own is None:
                        continue
                    lease = own.lease
                    key = (lease.num, round(lease.valid_until, 3), lease.views.pending, len(own.owned))
                    if state.get(i) != key:
                        state[i] = key
                        log.append(f"{sim.now - t0:7.3f} {i} view {lease.num} lease_num {lease.lease_num} "
                                   f"valid_until {lease.valid_until - t0:7.3f} pending {lease.views.pending} "
                                   f"owned {len(own.owned)} fenced {own.fenced_reason!r}")
                sim.at(sim.now + 0.01, tracer)
            sim.at(t0, tracer)

    result = run_scenario("steady", nodes=n, duration_s=duration_s, seed=seed, partitions=partitions,
                          system="swim-exclusive", before_run=before_run)
    cluster = state["cluster"]
    faulted = {i for i, x in cluster.nodes.items() if x.index in cluster.metrics.faulted}
    lagged = [d for d in drops if d[1] == state.get("lagged")]
    drops = [d for d in drops if d[1] not in faulted and d[1] != state.get("lagged")]
    by = Counter((node, how) for _, node, how, _ in drops)
    return {"kind": kind, "seed": seed, "nodes": n, "healthy_drops": len(drops),
            "by": dict(by), "first": drops[:1], "log": log, "lagged_drops": len(lagged),
            "dual": result["dual_owned_partition_s_exact"],
            "metric_healthy_dropped": result.get("healthy_dropped_partitions")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0:20")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"from {', '.join(KINDS + CONTROLS)}")
    p.add_argument("--nodes", type=int)
    p.add_argument("--duration", type=float, default=40.0)
    p.add_argument("--partitions", type=int, default=256)
    p.add_argument("--loss", type=float)
    p.add_argument("--trace", action="store_true")
    args = p.parse_args(argv)
    a, b = map(int, args.seeds.split(":"))
    total: Counter[str] = Counter()
    runs: Counter[str] = Counter()
    bad: Counter[str] = Counter()
    lagged: Counter[str] = Counter()
    for kind in args.kinds.split(","):
        for seed in range(a, b):
            r = run(kind, seed, nodes=args.nodes, partitions=args.partitions, duration_s=args.duration,
                    loss=args.loss, trace=args.trace)
            runs[kind] += 1
            total[kind] += r["healthy_drops"]
            lagged[kind] += r["lagged_drops"]
            if r["healthy_drops"]:
                bad[kind] += 1
                print(f"{kind} seed {seed} N={r['nodes']}: {r['healthy_drops']} partitions dropped by healthy "
                      f"members {r['by']} first {r['first']}", flush=True)
                if args.trace:
                    print("\n".join(r["log"]))
            if r["dual"]:
                print(f"{kind} seed {seed}: DUAL OWNERSHIP {r['dual']}", flush=True)
    for kind in runs:
        extra = f" (the lagging member itself: {lagged[kind]})" if kind in ("crash-lagged", "lag-only") else ""
        print(f"{kind}: {runs[kind]} runs, {bad[kind]} with healthy drops, {total[kind]} partitions dropped{extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
