"""The project's simulation goals (issue 5), measured at N=256 with the default config.

    python benchmarks/bench_sim.py [--nodes 256] [--hour 3600] [--stalls 600] [--seed 1] [--out out/goals] [--only NAME]

Runs each goal scenario once (one process, one core), writes each run's metrics.json under
--out, and prints the goals table recorded in docs/simulations.md. Long: the 1-hour loss run
dominates (see docs/simulations.md for measured wall times).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from simulations.cluster import progress_bar  # noqa: E402
from simulations.scenarios import run_scenario  # noqa: E402


def runs(n: int, hour: float, stalls_s: float) -> dict[str, dict]:
    return {
        "crash": dict(name="crash-many", nodes=n, duration_s=330.0, params={"count": 16, "every_s": 20.0}),
        "loss5": dict(name="loss", nodes=n, duration_s=hour, params={"loss": 0.05, "crash_at_s": -1.0}),
        "stalls": dict(name="stalls", nodes=n, duration_s=stalls_s),
        "stalls-nolifeguard": dict(name="stalls", nodes=n, duration_s=stalls_s, system="swim-nolifeguard"),
        "split": dict(name="split", nodes=n, duration_s=120.0, params={"split_s": 60.0}),
        "steady-hour": dict(name="steady", nodes=n, duration_s=hour),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--hour", type=float, default=3600.0, help="length of the 'one hour' runs (s)")
    ap.add_argument("--stalls", type=float, default=600.0, help="length of the stall runs (s)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="out/goals")
    ap.add_argument("--only", action="append", help="run only these goal runs (repeatable)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for key, spec in runs(args.nodes, args.hour, args.stalls).items():
        if args.only and key not in args.only:
            continue
        spec = dict(spec)
        name = spec.pop("name")
        r = run_scenario(name, seed=args.seed, progress=progress_bar(key), **spec)
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
