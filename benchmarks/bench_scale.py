"""Exclusive ownership at scale in the simulator (issue 34 item 2): N = 256, 512, 1,024.

    PYTHONPATH=. python benchmarks/bench_scale.py [--nodes 256 512 1024] [--seeds 1 | A:B]
        [--duration 600] [--only steady crash-one crash-many] [--json FILE]
    PYTHONPATH=build/mypyc python benchmarks/bench_scale.py ...   # the mypyc build (`make sim-fast`)

One run per (N, seed) of ``swim-exclusive`` (``run_scenario("steady", ...)``, the per-step
invariants on, the cores' own index checks off, as ``placement simulate``), ``--duration``
simulated seconds after the bootstrap, on one timeline (D = duration):

* **bootstrap**: N processes started within the first second (the first founds the cluster and
  owns every partition at once; the others join it); simulated time until every view holds
  every member and until the cluster settled: the stable view is the whole cluster and every
  partition is owned with nothing waiting or releasing (every partition owned by the member the
  whole cluster's table names); wall and CPU time. Every 5 simulated seconds stderr shows what
  the settling waits for. A bootstrap that does not settle within ``--warmup-max`` simulated
  seconds is reported as such (its row says so) instead of failing the benchmark.
* **steady** (traffic): from min(60 s, D/4), when the gossip of the bootstrap's N joins has
  drained, to D/2 (to D without kills): datagrams and bytes per second sent and received per
  member, per witness of the stable view, by the busiest witness and per non-witness, with the
  ownership datagrams apart from the gossip (``Recorder.traffic``: the simulator's datagram
  accounting, nothing about how leases are renewed).
* **crash-one**: one kill -9 at D/2; **crash-many**: ``--kills`` (8) kills 10 s apart from
  0.6 D (the ``crash-many`` scenario's spacing). Victims are drawn among the members that own
  partitions (a member that owns none needs no takeover). Per kill: detection (dead in every running
  member's view) and takeover (every partition the dead member owned acquired again, exact,
  from the ownership intervals); the goal is takeover <= detection + 1 s. Orphan
  partition-seconds (exact) from the kill to the next phase (crash-one) or to the end.
* the traffic over the whole run, the wall and CPU time of the run.
* **reassembly**: ownership messages each process's ``Reassembler`` gave up (evicted at its
  bound of ``max_partial`` messages in assembly, or malformed once assembled; ``dropped``), summed
  over the run's processes (a victim's counted when it is killed), the most at one process, and
  how many processes gave any up: a witness that gives up renewals fences healthy members.

``--only`` keeps some of steady / crash-one / crash-many (the timeline stays; without kills the
steady window runs to D). Progress goes to stderr; two markdown tables (ownership, traffic) and
the per-witness law (received datagrams/s against N, least squares over the N measured) to
stdout once every run is done, each run's figures as one JSON line to ``--json`` as it ends.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import sys
import time
from typing import Any

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.append(ROOT)  # after PYTHONPATH, so a mypyc build there is used

from bench_sim import membership_build  # noqa: E402  (a sibling script, not a package)

from simulations.cluster import SettleError, SwimSystem, progress_bar  # noqa: E402
from simulations.metrics import witnesses_now  # noqa: E402
from simulations.scenarios import SYSTEMS, run_scenario  # noqa: E402
from simulations.stats import percentiles  # noqa: E402

PHASES = ("steady", "crash-one", "crash-many")
SYSTEM = "swim-exclusive"


def _given_up(node) -> int:
    """Messages the process's ownership reassembler gave up so far (module docstring)."""
    glue = getattr(node, "glue", None)
    return 0 if glue is None else glue.proto.fragments.dropped


class _Timed:
    """Wraps the system's settling check (called every 0.5 s of the bootstrap) to note when
    every view held every member and when every partition was first owned, and to show the
    bootstrap's progress on stderr every ``every_s`` simulated seconds: what the settling check
    waits for (views, stable views, partitions owned, waiting, releasing)."""

    def __init__(self, system: SwimSystem, every_s: float = 5.0) -> None:
        self.system = system
        self.views_at: float | None = None
        self.owned_at: float | None = None
        self.lines: list[str] = []
        check = system.settled
        wall0 = time.perf_counter()
        next_report = [every_s]

        def settled(cluster) -> bool:
            now = cluster.sim.now
            report = now >= next_report[0]
            if self.views_at is None or report:  # O(N^2): as the settling check's own test
                members = [n for n in cluster.nodes.values() if n.up and not n.leaving]
                want = frozenset(n.node_id for n in members)
                views = sum(n.live_view() == want for n in members)
                if self.views_at is None and views == len(members):
                    self.views_at = now
            if self.owned_at is None or report:
                owned: set[int] = set()
                for n in cluster.nodes.values():
                    own = getattr(n, "own", None)
                    if own is not None and n.up:
                        owned.update(own.owned)
                if self.owned_at is None and len(owned) == cluster.placement.partitions:
                    self.owned_at = now
            if report:
                next_report[0] = now + every_s
                stable: dict[int, int] = {}
                waiting = releasing = whole = 0
                for n in members:
                    own = getattr(n, "own", None)
                    if own is not None:
                        waiting += len(own.waiting)
                        releasing += sum(1 for o in own.owned.values() if o.releasing)
                        size = len(own.lease.stable)
                        stable[size] = stable.get(size, 0) + 1
                        whole += frozenset(own.lease.stable) == want
                sizes = sorted(stable.items())
                shown = f"{sizes[:2]}...{sizes[-1:]}" if len(sizes) > 3 else str(sizes)
                line = (f"  t={now:.1f} s ({time.perf_counter() - wall0:.0f} s wall): views whole "
                        f"{views}/{len(members)}; stable view = the cluster at {whole}; (size, members) {shown}; "
                        f"partitions owned {len(owned)}, waiting {waiting}, releasing {releasing}")
                self.lines.append(line)
                print(line, file=sys.stderr, flush=True)
            return check(cluster)

        system.settled = settled  # type: ignore[method-assign]


def one_run(n: int, seed: int, duration: float, phases: tuple[str, ...], kills: int,
            partitions: int, warmup_max_s: float, witness_groups: int = 0) -> dict[str, Any]:
    """One (N, seed): the timeline of the module docstring; returns the figures.
    ``witness_groups``: members per witness group (``ExclusiveConfig.witness_group_members``)."""
    made: dict[str, Any] = {}

    def make() -> SwimSystem:
        system = SYSTEMS[SYSTEM]()
        system.warmup_max_s = warmup_max_s
        if witness_groups:
            assert system.exclusive is not None
            system.exclusive = dataclasses.replace(system.exclusive, witness_group_members=witness_groups)
        made["timed"] = _Timed(system)
        return system

    name = f"{SYSTEM}/timed"
    SYSTEMS[name] = make
    crash_one_at = duration / 2
    many_from = 0.6 * duration
    quiet = (min(60.0, duration / 4), crash_one_at if {"crash-one", "crash-many"} & set(phases) else duration)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    marks: dict[str, Any] = {}
    print(f"N={n} seed {seed}: bootstrap ...", file=sys.stderr, flush=True)

    def plan(cluster) -> None:
        sim = cluster.sim
        t0 = sim.now
        marks.update(cluster=cluster, t0=t0, boot_wall=time.perf_counter() - wall0,
                     boot_cpu=time.process_time() - cpu0)
        timed = made["timed"]
        print(f"N={n} seed {seed}: settled at {t0:.1f} s simulated (views {timed.views_at} s, every partition "
              f"owned {timed.owned_at} s), {marks['boot_wall']:.1f} s wall", file=sys.stderr, flush=True)
        rec = cluster.metrics
        rec.mark_traffic("quiet", t0 + quiet[0])
        rec.mark_traffic("quiet_end", t0 + quiet[1])

        def kill(label: str) -> None:
            # Among the members that own partitions (at N=1,024 with P=1,024 about a third own
            # none: their death needs no takeover).
            ids = [x.node_id for x in cluster.nodes.values()
                   if x.up and not x.leaving and getattr(x, "own", None) is not None and x.own.owned]
            victim = sim.scenario_rng.sample(ids, 1)
            witness = victim[0] in witnesses_now([x for x in cluster.nodes.values() if x.up])
            marks.setdefault("given_up", []).append(_given_up(cluster.nodes[victim[0]]))
            cluster.crash(victim)
            marks.setdefault("kills", []).append((label, victim[0], sim.now, witness))

        if "crash-one" in phases:
            sim.at(t0 + crash_one_at, kill, "crash-one")
        if "crash-many" in phases:
            for i in range(kills):
                sim.at(t0 + many_from + 10.0 * i, kill, "crash-many")

    try:
        r = run_scenario("steady", nodes=n, duration_s=duration, seed=seed, system=name, partitions=partitions,
                         check_cores=False, before_run=plan, progress=progress_bar(f"N={n} seed {seed}"))
    except SettleError as e:
        timed = made["timed"]
        return {"nodes": n, "seed": seed, "partitions": partitions, "duration_s": duration, "settled": False,
                "warmup_max_s": warmup_max_s,
                "error": str(e), "core": membership_build(),
                "bootstrap": {"views_s": timed.views_at, "owned_s": timed.owned_at, "settled_s": None,
                              "wall_s": round(time.perf_counter() - wall0, 1),
                              "cpu_s": round(time.process_time() - cpu0, 1), "progress": timed.lines},
                "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                "load": round(os.getloadavg()[0], 1)}
    finally:
        del SYSTEMS[name]
    cpu = time.process_time() - cpu0 - marks["boot_cpu"]
    cluster = marks["cluster"]
    rec = cluster.metrics
    t0 = marks["t0"]
    timed = made["timed"]
    log = rec.ownership_log
    p = cluster.placement.partitions
    per_kill = []
    for crash in rec.crashes:
        label, witness = next((lbl, w) for lbl, who, at, w in marks.get("kills", [])
                              if who == crash.node_id and at == crash.at)
        taken = log.takeover_after(crash.led.tolist(), crash.at)
        detection = None if crash.everywhere is None else crash.everywhere - crash.at
        takeover = None if taken is None else taken - crash.at
        per_kill.append({
            "phase": label, "at": round(crash.at - t0, 3), "node": crash.node_id, "led": len(crash.led),
            "witness": witness,
            "first_dead_s": None if crash.first_dead is None else round(crash.first_dead - crash.at, 3),
            "detection_s": None if detection is None else round(detection, 3),
            "takeover_s": None if takeover is None else round(takeover, 3),
            "gap_s": None if detection is None or takeover is None else round(takeover - detection, 3)})
    end = cluster.sim.now
    given_up = marks.get("given_up", []) + [_given_up(x) for x in cluster.nodes.values() if x.up]
    orphan = {}
    if "crash-one" in phases:
        orphan["crash-one"] = log.summary(t0 + crash_one_at, t0 + many_from if "crash-many" in phases else end,
                                          p)["orphan_partition_s_exact"]
    if "crash-many" in phases:
        orphan["crash-many"] = log.summary(t0 + many_from, end, p)["orphan_partition_s_exact"]
    return {
        "nodes": n, "seed": seed, "partitions": p, "witness_groups": witness_groups, "duration_s": duration,
        "phases": list(phases), "settled": True,
        "core": membership_build(),
        "bootstrap": {"views_s": timed.views_at, "owned_s": timed.owned_at, "settled_s": round(t0, 3),
                      "wall_s": round(marks["boot_wall"], 1), "cpu_s": round(marks["boot_cpu"], 1)},
        "kills": per_kill,
        "orphan_partition_s": orphan,
        "orphan_partition_s_run": r["orphan_partition_s_exact"],
        "dual_owned_partition_s": r["dual_owned_partition_s_exact"],
        "unowned_at_end": r["unowned_at_end"], "epoch_regressions": r["epoch_regressions"],
        "dropped_partitions": r.get("dropped_partitions"),
        "healthy_dropped_partitions": r.get("healthy_dropped_partitions"),
        "false_deaths": r["false_deaths"], "undetected_crashes": r["undetected_crashes"],
        "traffic_steady": rec.traffic(since="quiet", until="quiet_end"),
        "traffic_run": r["traffic"],
        "max_datagram_bytes": r["max_datagram_bytes"],
        "reassembly_given_up": {"total": sum(given_up), "max_per_process": max(given_up, default=0),
                                "processes": sum(1 for g in given_up if g)},
        "run_wall_s": r["wall_s"], "run_cpu_s": round(cpu, 1), "steps": r["steps"],
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "load": round(os.getloadavg()[0], 1),
    }


def _f(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _kills(res: dict, phase: str) -> tuple[str, str, str, str]:
    """(detection, takeover, max takeover - detection, goal) for one phase's kills."""
    ks = [k for k in res["kills"] if k["phase"] == phase]
    if not ks:
        return "-", "-", "-", "-"
    det = percentiles([k["detection_s"] for k in ks if k["detection_s"] is not None])
    tk = percentiles([k["takeover_s"] for k in ks if k["takeover_s"] is not None])
    gaps = [k["gap_s"] for k in ks if k["gap_s"] is not None]
    met = len(gaps) == len(ks) and max(gaps) <= 1.0
    if len(ks) == 1:
        return _f(det["p50"]), _f(tk["p50"]), _f(max(gaps) if gaps else None), "met" if met else "**not met**"
    return (f"{_f(det['p50'])} / {_f(det['max'])}", f"{_f(tk['p50'])} / {_f(tk['max'])}",
            _f(max(gaps) if gaps else None), f"{'met' if met else '**not met**'} ({len(gaps)}/{len(ks)} kills)")


def ownership_row(res: dict) -> str:
    b = res["bootstrap"]
    if not res["settled"]:
        return (f"| {res['nodes']:,} | {res['seed']} | {_f(b['views_s'], 1)} / **not within "
                f"{res['warmup_max_s']:g} s** | {b['wall_s']:.0f} s ({b['cpu_s']:.0f} s CPU) |" + " - |" * 13)
    one, many = _kills(res, "crash-one"), _kills(res, "crash-many")
    orphan = res["orphan_partition_s"]
    return (f"| {res['nodes']:,} | {res['seed']} | {_f(b['views_s'], 1)} / {_f(b['settled_s'], 1)} "
            f"| {b['wall_s']:.0f} s | {one[0]} | {one[1]} | {one[2]} | {one[3]} "
            f"| {many[0]} | {many[1]} | {many[2]} | {many[3]} "
            f"| {orphan.get('crash-one', '-')} / {orphan.get('crash-many', '-')} "
            f"| **{res['dual_owned_partition_s']:g}** | {res['unowned_at_end']} "
            f"| {res['run_wall_s']:.0f} s ({res['run_cpu_s']:.0f} s CPU) for {res['duration_s']:g} s |")


def traffic_row(res: dict, key: str = "traffic_steady") -> str:
    if not res["settled"]:
        return f"| {res['nodes']:,} | {res['seed']} |" + " - |" * 8
    t = res[key]
    m, w, o, busy = t["member"], t.get("witness"), t.get("non_witness"), t.get("busiest_witness")

    def both(g: dict | None, what: str) -> str:
        if g is None:
            return "-"
        return f"{g[f'{what}_datagrams_s']:.1f} / {g[f'{what}_bytes_s']:,.0f}"

    def own(g: dict | None) -> str:
        return "-" if g is None else f"{g['ownership_received_datagrams_s']:.1f}"

    return (f"| {res['nodes']:,} | {res['seed']} | {t['window_s']:.0f} s | {both(m, 'sent')} | {both(o, 'sent')} "
            f"| {both(w, 'received')} | {own(w)} | {both(w, 'sent')} | {both(busy, 'received')} "
            f"| {_f(w['received_datagrams_s'] / res['nodes'], 3) if w else '-'} |")


def law(results: list[dict]) -> str:
    """Per-witness received datagrams/s against N: least squares a + b N over the runs."""
    pts = [(r["nodes"], r["traffic_steady"]["witness"]["received_datagrams_s"],
            r["traffic_steady"]["non_witness"]["received_datagrams_s"])
           for r in results if r["settled"] and "witness" in r["traffic_steady"]]
    if len({x for x, _, _ in pts}) < 2:
        return "per-witness law: needs two or more cluster sizes"
    xs, ys = [x for x, _, _ in pts], [y for _, y, _ in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    a = my - b * mx
    resid = max(abs(y - (a + b * x)) for x, y in zip(xs, ys))
    non = ", ".join(f"N={x}: {z:.2f}" for x, _, z in pts)
    return (f"per-witness datagrams received/s = {a:.2f} + {b:.4f} N (least squares over N = "
            f"{', '.join(map(str, sorted(set(xs))))}; largest residual {resid:.2f}); per non-witness: {non}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[256, 512, 1024])
    ap.add_argument("--seeds", default="1", help="K (one seed) or A:B (seeds A..B-1)")
    ap.add_argument("--duration", type=float, default=600.0, help="simulated seconds after the bootstrap")
    ap.add_argument("--only", nargs="+", choices=PHASES, help="phases to run (default: all)")
    ap.add_argument("--kills", type=int, default=8, help="kills of the crash-many phase, 10 s apart")
    ap.add_argument("--partitions", type=int, default=1024)
    ap.add_argument("--warmup-max", type=float, default=SwimSystem.warmup_max_s,
                    help="simulated seconds the bootstrap may take before the run fails (SettleError)")
    ap.add_argument("--json", help="append each run's figures to this file, one JSON line per run")
    ap.add_argument("--witness-groups", type=int, default=0, metavar="M",
                    help="members per witness group (ExclusiveConfig.witness_group_members; default 0: one group)")
    args = ap.parse_args(argv)
    if ":" in args.seeds:
        a, b = (int(x) for x in args.seeds.split(":"))
        seeds = list(range(a, b))
    else:
        seeds = [int(args.seeds)]
    phases = tuple(args.only or PHASES)
    if "crash-many" in phases and 0.6 * args.duration + 10.0 * args.kills + 20.0 > args.duration:
        ap.error(f"--duration {args.duration:g} leaves no time for {args.kills} kills 10 s apart from 0.6 D")
    print(f"membership core: {membership_build()}", file=sys.stderr, flush=True)
    results = []
    for n in args.nodes:
        for seed in seeds:
            res = one_run(n, seed, args.duration, phases, args.kills, args.partitions, args.warmup_max,
                          args.witness_groups)
            results.append(res)
            print(json.dumps({k: v for k, v in res.items() if k != "traffic_run"}), file=sys.stderr, flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(res) + "\n")
    print(f"{SYSTEM}, P={args.partitions}, {args.duration:g} simulated s after the bootstrap; core: "
          f"{results[0]['core'] if results else '?'}\n")
    print("| N | seed | bootstrap: views whole / settled (sim s) | bootstrap wall "
          "| crash-one: detection s | takeover s | takeover - detection s | <= detection + 1 s "
          "| crash-many: detection p50 / max s | takeover p50 / max s | max takeover - detection s "
          "| <= detection + 1 s | orphan partition-s (crash-one / crash-many) | dual partition-s | unowned at end "
          "| run wall |")
    print("|" + "---|" * 16)
    for res in results:
        print(ownership_row(res))
    print("\nTraffic in the steady window (datagrams / bytes per second; witnesses: those of the stable view):\n")
    print("| N | seed | window | member sent | non-witness sent | witness received | of which ownership "
          "| witness sent | busiest witness received | witness received / N |")
    print("|" + "---|" * 10)
    for res in results:
        print(traffic_row(res))
    print()
    for res in results:
        if res["settled"]:
            g = res["reassembly_given_up"]
            print(f"N={res['nodes']:,} seed {res['seed']}: ownership messages the reassemblers gave up: {g['total']} "
                  f"({g['processes']} processes, at most {g['max_per_process']} at one)")
    print(law(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
