"""The price and the proof of exclusive ownership, scenario by scenario (issue 11, "Measure"):
dual-owned and orphan partition-seconds from exact acquire/end intervals (a release drains 2 s),
handoff latency, crash takeover against detection, traffic - for ``swim-exclusive``, with the
availability-first ``swim`` beside it for dual ownership (sampled every 0.5 s).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_ownership.py                 # N=16, every scenario
    PYTHONPATH=. .venv/bin/python benchmarks/bench_ownership.py --nodes 128 --duration 60 --only \\
        join-one leave crash-one freeze split

Prints one markdown row per scenario (the table in docs/ownership.md and BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import sys
import time

from simulations.scenarios import run_scenario

#: (row label, scenario, parameters): the list of issue 11's Measure section.
MATRIX: list[tuple[str, str, dict]] = [
    ("join-one", "join-one", {}),
    ("leave", "leave", {}),
    ("crash-one", "crash-one", {}),
    ("scale-out 16->32", "scale-out", {}),
    ("scale-in 32->8", "scale-in", {}),
    ("rolling-restart", "rolling-restart", {}),
    ("crash-many (8 kills)", "crash-many", {}),
    ("weight change 1->2", "weight-change", {}),
    ("stalls (1-4 s)", "stalls", {}),
    ("freeze 20 s", "freeze", {}),
    ("split 50/50, 60 s", "split", {}),
    ("split 70/30, 60 s", "split", {"fraction": 0.7}),
    ("asymmetric (1/4 deaf, 30 s)", "oneway", {}),
    ("flapping", "flapping", {}),
    ("loss 5 % + crash", "loss", {}),
]
#: Scenarios whose default cluster size is not 16 keep it at N=16 (scale-out starts at 8).
OWN_SIZE = {"scale-out", "scale-in", "rolling-restart", "crash-many", "stalls"}


def _p(d: dict, key: str = "p50") -> str:
    v = d.get(key) if d else None
    return "-" if v is None else f"{v:.2f}"


def row(label: str, scenario: str, params: dict, nodes: int | None, duration: float | None, seed: int,
        baseline: bool) -> str:
    n = None if (nodes is None or (nodes == 16 and scenario in OWN_SIZE)) else nodes
    if n is not None and scenario in ("scale-out", "scale-in"):  # by a quarter of the cluster
        params = {**params, "to": n + n // 4 if scenario == "scale-out" else n - n // 4}
        label = f"{scenario} {n}->{params['to']}"
    t0 = time.perf_counter()
    r = run_scenario(scenario, nodes=n, duration_s=duration, seed=seed, system="swim-exclusive", params=params)
    wall = time.perf_counter() - t0
    h, tk, det = r["handoff_latency_s"], r["takeover_s"], r["detection_s"]
    swim = "-"
    if baseline:
        b = run_scenario(scenario, nodes=n, duration_s=duration, seed=seed, system="swim", params=params)
        swim = f"{b['dual_ownership_partition_s']:,.1f}"
    return (f"| {label} | {r['nodes']} | **{r['dual_owned_partition_s_exact']:g}** | {r['orphan_partition_s_exact']:,.0f} "
            f"| {_p(h)} / {_p(h, 'p99')} | {_p(tk)} / {_p(tk, 'p99')} | {_p(det)} / {_p(det, 'p99')} "
            f"| {r['handoffs_timed_out']} | {r['epoch_regressions']} | {r['datagrams_per_member_s']:.1f} | {swim} "
            f"| {wall:.0f} s |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--duration", type=float, default=None, help="simulated seconds (default: the scenario's)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", nargs="*", help="row labels or scenario names to run")
    ap.add_argument("--no-baseline", action="store_true", help="skip the availability-first `swim` column")
    args = ap.parse_args(argv)
    rows = [m for m in MATRIX if not args.only or m[0] in args.only or m[1] in args.only]
    print("| scenario | N | dual partition-s | orphan partition-s | handoff p50 / p99 s | takeover p50 / p99 s "
          "| detection p50 / p99 s | handoffs timed out | epoch regressions | datagrams/member/s | `swim` dual "
          "| wall |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    bad = 0
    for label, scenario, params in rows:
        line = row(label, scenario, params, args.nodes, args.duration, args.seed, not args.no_baseline)
        bad += "| **0** |" not in line
        print(line, flush=True)
    print(f"\n{len(rows) - bad} of {len(rows)} scenarios with 0 dual-owned partition-s", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
