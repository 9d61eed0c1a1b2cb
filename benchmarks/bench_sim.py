"""The project's simulation goals (issue 5), measured at N=256 with the default config.

    python benchmarks/bench_sim.py [--nodes 256] [--hour 3600] [--stalls 600] [--seed 1] [--out out/goals] [--only NAME]
    python benchmarks/bench_sim.py --speed [--nodes 256] [--speed-s 300] [--repeat 3]
    python benchmarks/bench_sim.py --pool-seeds 8 [--seed 1]   # crash detection over 8 x 16 kills
    python benchmarks/bench_sim.py --speed --check-cores ...   # the cost of the core index check
    python benchmarks/bench_sim.py --large [--nodes 1024] [--large-s 600] [--kills 10]

Runs each goal scenario once (one process, one core), writes each run's metrics.json under
--out, and prints the goals table recorded in docs/simulations.md. Long: the 1-hour loss run
dominates (see docs/simulations.md for measured wall times).

``--speed`` measures only the simulator's speed (the "256 nodes x 1 simulated hour in <= 60 s
wall" goal): ``steady``, ``crash-many`` (one kill every 30 s) and ``loss`` at 5% for
``--speed-s`` simulated seconds after warm-up, each ``--repeat`` times; prints simulated
seconds per wall second and the wall seconds one simulated hour would take, best of the
repeats (the machine may be shared: the best run is the least disturbed one).

``--large`` measures membership at scale (issue 14 item 3) in one run of ``--large-s`` simulated
seconds after warm-up (default N=1,024 when --nodes is not given): traffic in a quiet window (from
60 s, once the gossip of the bootstrap's joins has died down, until the first kill), then kills
spread over the second half (every 27 s by default; detection: dead everywhere, first suspicion, first death) and one
join (how long until every view holds it), traffic over the whole run; and the simulator's wall
and CPU time for the bootstrap and for the run (CPU time: the box may be shared).

With ``PYTHONPATH=build/mypyc`` (after ``make sim-fast``) the membership core runs compiled;
the first line printed says which core ran, and a build older than the sources is refused.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import sys
import time
from typing import Any

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.append(ROOT)  # after PYTHONPATH, so a mypyc build there is used

from simulations.cluster import progress_bar  # noqa: E402
from simulations.scenarios import run_scenario  # noqa: E402
from simulations.stats import percentiles  # noqa: E402


def runs(n: int, hour: float, stalls_s: float) -> dict[str, dict]:
    return {
        "crash": dict(name="crash-many", nodes=n, duration_s=330.0, params={"count": 16, "every_s": 20.0}),
        "loss5": dict(name="loss", nodes=n, duration_s=hour, params={"loss": 0.05, "crash_at_s": -1.0}),
        "stalls": dict(name="stalls", nodes=n, duration_s=stalls_s),
        "stalls-nolifeguard": dict(name="stalls", nodes=n, duration_s=stalls_s, system="swim-nolifeguard"),
        "split": dict(name="split", nodes=n, duration_s=120.0, params={"split_s": 60.0}),
        "steady-hour": dict(name="steady", nodes=n, duration_s=hour),
    }


def membership_build() -> str:
    """Which membership core (and ownership rules) run: the sources, or a mypyc build of them
    (``make sim-fast`` copies and compiles both packages; exit if a copy is stale)."""
    import membership.core
    import ownership.core

    ran = []
    for mod in (membership.core, ownership.core):
        pkg = os.path.dirname(os.path.abspath(mod.__file__ or ""))
        name = os.path.basename(pkg)
        src = os.path.join(ROOT, name)
        if os.path.samefile(pkg, src):
            ran.append("pure Python")
            continue
        built = os.path.join(pkg, "{}")
        stale = [f for f in sorted(os.listdir(src)) if f.endswith(".py") and not (
            os.path.exists(built.format(f)) and filecmp.cmp(os.path.join(src, f), built.format(f), shallow=False))]
        if stale:
            sys.exit(f"{pkg} was built from older sources ({', '.join(stale)} changed): run `make sim-fast`")
        compiled = not (mod.__file__ or "").endswith(".py")
        ran.append(f"{'compiled with mypyc' if compiled else 'pure Python'}, from {pkg}")
    return ran[0] if ran[1] == "pure Python" else f"{ran[0]}; ownership: {ran[1]}"


def speed(n: int, sim_s: float, repeat: int, seed: int, check_cores: bool = False) -> None:
    specs: dict[str, dict[str, Any]] = {
        "steady": {"name": "steady"},
        "crash-many": {"name": "crash-many", "params": {"count": int(sim_s // 30), "every_s": 30.0}},
        "loss5": {"name": "loss", "params": {"loss": 0.05, "crash_at_s": -1.0}},
    }
    for key, spec in specs.items():
        spec = dict(spec)
        name = spec.pop("name")
        walls = []
        for _ in range(repeat):
            r = run_scenario(name, nodes=n, duration_s=sim_s, seed=seed, check_cores=check_cores, **spec)
            walls.append(r["wall_s"])
        best = min(walls)
        print(f"{key:<11} N={n} {sim_s:g} s simulated: wall {', '.join(f'{w:.1f}' for w in walls)} s; "
              f"best {sim_s / best:.1f} simulated s per wall s = {3600 * best / sim_s:.0f} s wall "
              f"per simulated hour", flush=True)


def pooled_detection(n: int, first_seed: int, seeds: int) -> None:
    """The crash run for ``seeds`` consecutive seeds; detection percentiles over all kills
    (16 kills per seed: one seed's p99 is its maximum, too few samples for a tail)."""
    spec = dict(runs(n, 0.0, 0.0)["crash"])
    name = spec.pop("name")
    samples: list[float] = []
    for seed in range(first_seed, first_seed + seeds):
        r = run_scenario(name, seed=seed, check_cores=False, **spec)
        samples += r["detection_samples_s"]
        print(f"seed {seed}: dead everywhere {r['detection_s']}, first suspicion {r['first_suspect_s']}, "
              f"false deaths {r['false_deaths']}, wall {r['wall_s']:.1f} s", flush=True)
    print(f"pooled over seeds {first_seed}-{first_seed + seeds - 1}: dead everywhere "
          f"{json.dumps(percentiles(samples))}", flush=True)


def large(n: int, sim_s: float, kills: int, seed: int) -> None:
    """Membership at N (``--large``, see the module docstring): one run, progress on stderr."""
    quiet_from, first_kill = 60.0, sim_s / 2
    every = (sim_s - 30.0 - first_kill) / max(1, kills)
    marks: dict[str, tuple[float, int, int, int]] = {}
    wall0, cpu0 = time.perf_counter(), time.process_time()
    print(f"bootstrap: {n} nodes ...", file=sys.stderr, flush=True)

    def plan(cluster) -> None:
        sim = cluster.sim
        t0 = sim.now
        print(f"bootstrap: settled at {t0:.1f} s simulated, {time.perf_counter() - wall0:.1f} s wall",
              file=sys.stderr, flush=True)
        marks["boot"] = (time.perf_counter() - wall0, 0, 0, 0)
        marks["boot_cpu"] = (time.process_time() - cpu0, 0, 0, 0)

        def mark(name: str) -> None:
            up = sum(1 for node in cluster.nodes.values() if node.up)
            marks[name] = (sim.now, sim.datagrams, sim.datagram_bytes, up)

        def kill() -> None:
            ids = [node.node_id for node in cluster.nodes.values() if node.up and not node.leaving]
            cluster.crash(sim.scenario_rng.sample(ids, 1))

        sim.at(t0 + quiet_from, mark, "quiet")
        sim.at(t0 + first_kill, mark, "quiet_end")
        for i in range(kills):
            sim.at(t0 + first_kill + i * every, kill)
        sim.at(t0 + first_kill + (kills - 0.5) * every, cluster.join)

    r = run_scenario("steady", nodes=n, duration_s=sim_s, seed=seed, check_cores=False, before_run=plan,
                     progress=progress_bar(f"N={n}"))
    (t1, d1, b1, up), (t2, d2, b2, _) = marks["quiet"], marks["quiet_end"]
    join = [e for e in r["events"] if e["kind"] == "join"]
    cpu = time.process_time() - cpu0 - marks["boot_cpu"][0]
    print(f"N={n}, seed {seed}, {sim_s:g} s simulated: bootstrap {marks['boot'][0]:.1f} s wall "
          f"({marks['boot_cpu'][0]:.1f} s CPU), run {r['wall_s']:.1f} s wall ({cpu:.1f} s CPU; "
          f"{r['steps']} events); load {os.getloadavg()[0]:.1f}")
    print(f"quiet window ({t2 - t1:.0f} s): {(d2 - d1) / up / (t2 - t1):.3f} datagrams/member/s, "
          f"{(b2 - b1) / up / (t2 - t1):.1f} bytes/member/s")
    print(f"whole run ({kills} kills, 1 join): {r['datagrams_per_member_s']} datagrams/member/s, "
          f"{r['bytes_per_member_s']} bytes/member/s, largest datagram {r['max_datagram_bytes']} B")
    print(f"dead everywhere {json.dumps(r['detection_s'])}; first suspicion {json.dumps(r['first_suspect_s'])}; "
          f"first death {json.dumps(r['first_dead_s'])}")
    print(f"join in every view (views converged, 0.5 s samples): {join[0]['converged_s'] if join else None} s; "
          f"false suspicions {r['false_suspicions']}, false deaths {r['false_deaths']}, "
          f"undetected crashes {r['undetected_crashes']}", flush=True)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, help="cluster size (default 256; 1024 with --large)")
    ap.add_argument("--hour", type=float, default=3600.0, help="length of the 'one hour' runs (s)")
    ap.add_argument("--stalls", type=float, default=600.0, help="length of the stall runs (s)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="out/goals")
    ap.add_argument("--only", action="append", choices=tuple(runs(0, 0.0, 0.0)),
                    help="run only these goal runs (repeatable)")
    ap.add_argument("--speed", action="store_true", help="measure simulator speed only (see above)")
    ap.add_argument("--pool-seeds", type=int, metavar="K",
                    help="only the crash run, for seeds --seed .. --seed+K-1, detection pooled")
    ap.add_argument("--speed-s", type=float, default=300.0, help="simulated seconds per --speed run")
    ap.add_argument("--repeat", type=int, default=3, help="--speed: runs per scenario (best counts)")
    ap.add_argument("--large", action="store_true", help="membership at scale, N=1024 by default (see above)")
    ap.add_argument("--large-s", type=float, default=600.0, help="--large: simulated seconds after warm-up")
    ap.add_argument("--kills", type=int, default=10, help="--large: kills in the second half of the run")
    ap.add_argument("--check-cores", action="store_true",
                    help="also run every touched membership core's own invariant check after every step "
                         "(as the tests do; off by default, as in `placement simulate`)")
    return ap


def main() -> int:
    args = build_parser().parse_args()
    print(f"membership core: {membership_build()}", flush=True)
    if args.large:
        large(args.nodes or 1024, args.large_s, args.kills, args.seed)
        return 0
    args.nodes = args.nodes or 256
    if args.speed:
        speed(args.nodes, args.speed_s, args.repeat, args.seed, args.check_cores)
        return 0
    if args.pool_seeds:
        pooled_detection(args.nodes, args.seed, args.pool_seeds)
        return 0
    os.makedirs(args.out, exist_ok=True)
    for key, spec in runs(args.nodes, args.hour, args.stalls).items():
        if args.only and key not in args.only:
            continue
        spec = dict(spec)
        name = spec.pop("name")
        r = run_scenario(name, seed=args.seed, progress=progress_bar(key), check_cores=args.check_cores, **spec)
        r.pop("series")
        with open(os.path.join(args.out, f"{key}.json"), "w", encoding="utf-8") as fh:
            json.dump(r, fh, indent=1)
        print(key, json.dumps({k: r[k] for k in (
            "detection_s", "false_deaths", "false_death_members", "healthy_false_deaths", "false_suspicions",
            "healthy_moves",
            "convergence_s", "dual_ownership_partition_s", "datagrams_per_member_s", "wall_s",
            "simulated_s")}), flush=True)
        heal = [e for e in r["events"] if e["kind"] == "heal"]
        if heal:
            print(key, "heal -> converged_s", heal[0].get("converged_s"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
