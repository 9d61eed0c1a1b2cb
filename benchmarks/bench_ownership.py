"""The price and the proof of exclusive ownership, scenario by scenario (issue 11, "Measure"):
dual-owned and orphan partition-seconds from exact acquire/end intervals (a release drains 2 s),
handoff latency, crash takeover against detection, traffic - for ``swim-exclusive``, with the
availability-first ``swim`` beside it for dual ownership (sampled every 0.5 s).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_ownership.py                 # N=16, every scenario
    PYTHONPATH=. .venv/bin/python benchmarks/bench_ownership.py --nodes 128 --duration 60 --only \\
        join-one leave crash-one freeze split

Prints one markdown row per scenario (the table in docs/ownership.md and docs/benchmarks-log.md).
``--seeds A:B`` runs each chosen scenario over many seeds and prints one summary row each.
"""

from __future__ import annotations

import argparse
import statistics
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
    ("asymmetric (1/4 mute, 30 s)", "oneway", {}),
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
    r = run_scenario(scenario, nodes=n, duration_s=duration, seed=seed, system="swim-exclusive", params=params,
                     check_cores=False)  # as `placement simulate`: wall times stay comparable
    wall = time.perf_counter() - t0
    h, tk, det = r["handoff_latency_s"], r["takeover_exact_s"], r["detection_s"]
    swim = "-"
    if baseline:
        b = run_scenario(scenario, nodes=n, duration_s=duration, seed=seed, system="swim", params=params,
                         check_cores=False)
        swim = f"{b['dual_ownership_partition_s']:,.1f}"
    return (f"| {label} | {r['nodes']} | **{r['dual_owned_partition_s_exact']:g}** "
            f"| {r['orphan_partition_s_exact']:,.0f} "
            f"| {_p(h)} / {_p(h, 'p99')} | {_p(tk)} / {_p(tk, 'p99')} | {_p(det)} / {_p(det, 'p99')} "
            f"| {r['unowned_at_end']} | {r['handoffs_timed_out']} | {r['epoch_regressions']} "
            f"| {r['datagrams_per_member_s']:.1f} | {swim} "
            f"| {wall:.0f} s |")


def sweep(label: str, scenario: str, params: dict, nodes: int | None, duration: float | None,
          seeds: range) -> str:
    """One scenario over many seeds, for a before/after comparison whose effect is smaller than
    one seed's luck (loss, restarts): totals and the spread of takeover minus detection."""
    n = None if (nodes is None or (nodes == 16 and scenario in OWN_SIZE)) else nodes
    dual = orphan = timed_out = 0.0
    gaps, datagrams = [], []
    for seed in seeds:
        r = run_scenario(scenario, nodes=n, duration_s=duration, seed=seed, system="swim-exclusive", params=params,
                         check_cores=False)
        dual += r["dual_owned_partition_s_exact"]
        orphan += r["orphan_partition_s_exact"]
        timed_out += r["handoffs_timed_out"]
        datagrams.append(r["datagrams_per_member_s"])
        tk, det = r["takeover_exact_s"], r["detection_s"]
        gap = None
        if tk and det and tk.get("p50") is not None and det.get("p50") is not None:
            gap = tk["p50"] - det["p50"]
            gaps.append(gap)
        print(f"  {label}, seed {seed}: takeover - detection {'-' if gap is None else f'{gap:.2f} s'}, "
              f"handoffs timed out {r['handoffs_timed_out']}", file=sys.stderr, flush=True)
    gap = "- / - / -" if not gaps else \
        f"{statistics.mean(gaps):.2f} / {statistics.median(gaps):.2f} / {max(gaps):.2f}"
    return (f"| {label} | {seeds.start}-{seeds.stop - 1} | **{dual:g}** | {orphan / len(seeds):,.0f} | {gap} "
            f"| {timed_out:g} | {statistics.mean(datagrams):.2f} |")


def split_timing(fraction: float, nodes: int, seed: int, split_s: float = 60.0) -> dict:
    """Exact, from the ownership intervals: after a split starts, when the losing side owns
    nothing any more, and from when the winning side owns every partition until the heal."""
    seen: dict = {}

    def capture(cluster) -> None:
        seen["cluster"] = cluster
        cut = cluster.partition

        def partition(a, b, **kw):
            seen.setdefault("cut", (cluster.sim.now, list(a), list(b)))
            return cut(a, b, **kw)
        cluster.partition = partition

    run_scenario("split", nodes=nodes, seed=seed, system="swim-exclusive", before_run=capture,
                 params={"split_s": split_s, "fraction": fraction})
    cluster = seen["cluster"]
    start, side_a, side_b = seen["cut"]
    heal = start + split_s
    log = cluster.metrics.ownership_log
    ids = {n.index: n.node_id for n in cluster.nodes.values()}
    spans = [(p, a, b, ids[node]) for p, v in log.closed.items() for a, b, node in v]
    spans += [(p, a, cluster.sim.now, ids[node]) for (p, node), (a, _) in log.open.items()]

    def owned_in_split(side):
        return [(p, a, b) for p, a, b, who in spans if who in side and a < heal and b > start]

    a_own, b_own = owned_in_split(set(side_a)), owned_in_split(set(side_b))
    # The winner still owns partitions at the heal; the loser owns nothing by then.
    win, lose = (a_own, b_own) if sum(b >= heal for _, _, b in a_own) >= sum(b >= heal for _, _, b in b_own) \
        else (b_own, a_own)
    loser_zero = max((b for _, _, b in lose), default=start) - start
    if any(b >= heal for _, _, b in lose):
        loser_zero = None  # the losing side still owned something at the heal
    held_from: dict[int, float | None] = {}
    for p in range(cluster.placement.partitions):
        run_start, run_end = None, -1.0  # the union of the winner's spans, walked in order
        for a, b in sorted((a, b) for q, a, b in win if q == p):
            if run_start is None or a > run_end:
                run_start, run_end = a, b
            else:
                run_end = max(run_end, b)
        held_from[p] = run_start if run_end >= heal else None  # the run that lasts to the heal
    held = [t for t in held_from.values() if t is not None]
    winner_all = None if len(held) < len(held_from) else max(max(held) - start, 0.0)
    return {"losing_side_owns_nothing_after_s": loser_zero, "winning_side_owns_all_after_s": winner_all,
            "sides": (len(side_a), len(side_b))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--duration", type=float, default=None, help="simulated seconds (default: the scenario's)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", help="A:B: each scenario over seeds A..B-1, one summary row each (sweep)")
    ap.add_argument("--only", nargs="*", help="row labels or scenario names to run")
    ap.add_argument("--no-baseline", action="store_true", help="skip the availability-first `swim` column")
    ap.add_argument("--split-timing", action="store_true",
                    help="only: when the losing side of a 50/50 and a 70/30 split owns nothing, and the winner all")
    args = ap.parse_args(argv)
    if args.split_timing:
        for fraction in (0.5, 0.7):
            print(f"split {fraction:.0%} of N={args.nodes}:", split_timing(fraction, args.nodes, args.seed))
        return 0
    rows = [m for m in MATRIX if not args.only or m[0] in args.only or m[1] in args.only]
    if args.seeds:
        a, b = (int(x) for x in args.seeds.split(":"))
        print("| scenario | seeds | dual partition-s (total) | orphan partition-s (mean) "
              "| takeover - detection, mean / median / max s | handoffs timed out (total) | datagrams/member/s |")
        print("|---|---|---|---|---|---|---|")
        for label, scenario, params in rows:
            print(sweep(label, scenario, params, args.nodes, args.duration, range(a, b)), flush=True)
        return 0
    print("| scenario | N | dual partition-s | orphan partition-s | handoff p50 / p99 s | takeover p50 / p99 s "
          "| detection p50 / p99 s | unowned at the end | handoffs timed out | epoch regressions "
          "| datagrams/member/s | `swim` dual | wall |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    bad = 0
    for label, scenario, params in rows:
        line = row(label, scenario, params, args.nodes, args.duration, args.seed, not args.no_baseline)
        bad += "| **0** |" not in line
        print(line, flush=True)
    print(f"\n{len(rows) - bad} of {len(rows)} scenarios with 0 dual-owned partition-s", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
