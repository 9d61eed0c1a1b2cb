"""The baseline comparison: every system under the same scenarios and seeds.

    placement simulate compare [--seed 1] [--out DIR]

Prints a markdown table (the one in docs/simulations.md) and, with ``--out``, writes every
run's metrics to ``DIR/compare.json``. Settings: N=16 nodes, P=256 partitions, 1 replica.
Dual ownership is exact (acquire/release intervals) for ``swim-exclusive``, sampled every
0.5 s for the others.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from .scenarios import run_scenario

SYSTEMS = ("swim", "swim-exclusive", "swim-nolifeguard", "eventhubs", "durabletask", "redis-race")
NODES, PARTITIONS = 16, 256
RUNS = {
    "crash": ("crash-one", 180.0, {"at_s": 10.0}),
    "join": ("join-one", 180.0, {"at_s": 10.0}),
    "leave": ("leave", 180.0, {"at_s": 10.0}),
    "stalls": ("stalls", 600.0, {"fraction": 0.125}),
    "split": ("split", 120.0, {"split_s": 60.0}),
    "freeze": ("freeze", 90.0, {"freeze_s": 20.0}),
}


def _dual(r: dict) -> float:
    """Dual-owned partition-seconds: exact (intervals) where the system reports them, else sampled."""
    return r["dual_owned_partition_s_exact"] if r.get("exclusive") else r["dual_ownership_partition_s"]


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1f}" if v < 100 else f"{v:.0f}"
    return str(v)


def _event(r: dict, kind: str) -> dict:
    return next((e for e in r["events"] if e["kind"] == kind), {})


def main(out_dir: str | None = None, seed: int = 1, quiet: bool = False, check_cores: bool = False) -> int:
    results: dict[str, dict[str, dict]] = {}
    for system in SYSTEMS:
        results[system] = {}
        for key, (name, duration, params) in RUNS.items():
            r = run_scenario(name, nodes=NODES, duration_s=duration, seed=seed, system=system,
                             partitions=PARTITIONS, params=params, check_cores=check_cores)
            r.pop("series")
            results[system][key] = r
            if not quiet:
                print(f"{system:>17} {key:<7} wall {r['wall_s']:.1f} s", file=sys.stderr)
    header = ("| system | crash: takeover s | crash: settled s | join: settled s | leave: settled s "
              "| moved / optimal (crash+join+leave) | healthy moves | flaps (stalls) "
              "| false deaths (stalls) | dual partition-s (crash+join+leave / stalls) "
              "| dual partition-s (split 60 s / freeze 20 s) | orphan partition-s (crash / split) |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for system, rs in results.items():
        crash, join, leave, stalls = rs["crash"], rs["join"], rs["leave"], rs["stalls"]
        moved = sum(rs[k]["moved_partitions"] for k in ("crash", "join", "leave"))
        optimal = sum(rs[k]["optimal_moves"] for k in ("crash", "join", "leave"))
        healthy = sum(rs[k]["healthy_moves"] for k in ("crash", "join", "leave", "stalls"))
        dual = sum(_dual(rs[k]) for k in ("crash", "join", "leave"))
        lines.append("| " + " | ".join([
            system,
            _fmt(crash["takeover_s"]["max"]),
            _fmt(_event(crash, "crash").get("rebalance_s")),
            _fmt(_event(join, "join").get("rebalance_s")),
            _fmt(_event(leave, "leave").get("rebalance_s")),
            f"{moved} / {optimal}",
            str(healthy),
            str(stalls["flaps"]),
            str(stalls["false_deaths"]) if system.startswith("swim") else "n/a",
            f"{_fmt(dual)} / {_fmt(_dual(stalls))}",
            f"{_fmt(_dual(rs['split']))} / {_fmt(_dual(rs['freeze']))}",
            f"{_fmt(crash['orphan_partition_s'])} / {_fmt(rs['split']['orphan_partition_s'])}",
        ]) + " |")
    table = "\n".join(lines)
    print(f"N={NODES}, P={PARTITIONS}, replicas=1, seed={seed}\n")
    print(table)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "compare.json"), "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
    return 0
