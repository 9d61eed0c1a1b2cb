"""Load-aware placement against static weights in the ``load-skew`` scenario (issue 33 item 3).

    python benchmarks/bench_load_skew.py [--nodes 16] [--partitions 1024] [--seeds 5] [--duration 3600]
        [--balance-by pins|weights] [--period 300]

One run per seed (swim-exclusive, every member planning from its own stable view every 300 s);
prints per seed the static max/mean at the first round, the load-aware max/mean 60 s after
rounds 1 and 2 (handoffs done), the latter also under the figures round 2 planned from
(``step2_fig``: the drift since taken out), and at the end beside static's, the largest step's
moved fraction (observed owner changes), moved per hour overall and after the first two rounds,
whether every member's plan agreed and the dual-ownership partition-seconds; then the means.
Also, over the 30-s samples after step 2's settling: their mean max/mean (``mean_after``) and the
share at or under 1.2 (``share_1_2``). ``--balance-by``: pins (rule 13; the default, as on
nodes) or weights.
"""

from __future__ import annotations

import argparse
import statistics

from simulations.scenarios import run_scenario


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--partitions", type=int, default=1024)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=3600.0)
    ap.add_argument("--balance-by", choices=("pins", "weights"), default="pins")
    ap.add_argument("--period", type=float, default=300.0, help="seconds between rounds (period_s)")
    args = ap.parse_args()
    cols = ("static0", "step1", "step2", "step2_fig", "end", "static_end", "max_step", "per_h", "steady_h",
            "mean_after", "share_1_2")
    print(f"load-skew N={args.nodes} P={args.partitions} {args.duration:g} s, by {args.balance_by}, "
          f"a round every {args.period:g} s")
    print("seed " + " ".join(f"{c:>10}" for c in cols) + "  agree dual_ps wall_s")
    rows = []
    for seed in range(1, args.seeds + 1):
        r = run_scenario("load-skew", nodes=args.nodes, partitions=args.partitions, duration_s=args.duration,
                         seed=seed, system="swim-exclusive", check_cores=False,
                         params={"balance_by": args.balance_by, "period_s": args.period})
        rounds = r["load_rounds"]
        after = [s[1] for s in r["load_max_over_mean_series"] if s[0] >= 30 + args.period + 10 + 60]
        mean_after = round(statistics.fmean(after), 4) if after else float("nan")
        share = round(sum(x <= 1.2 for x in after) / len(after), 3) if after else float("nan")
        row = (rounds[0]["static"], rounds[0].get("ratio_settled"), rounds[1].get("ratio_settled"),
               rounds[1].get("ratio_settled_figures"),
               r["load_max_over_mean"], r["load_max_over_mean_static"], r["moved_fraction_max_step"],
               r["moved_fraction_per_hour"], r["moved_fraction_per_hour_steady"], mean_after, share)
        rows.append(row)
        print(f"{seed:>4} " + " ".join(f"{v:>10}" for v in row)
              + f"  {r['plans_agree']!s:>5} {r['dual_ownership_partition_s']:>7} {r['wall_s']:>6}", flush=True)
    means = [round(statistics.fmean(c), 3) for c in zip(*rows)]
    print("mean " + " ".join(f"{v:>10}" for v in means))


if __name__ == "__main__":
    main()
