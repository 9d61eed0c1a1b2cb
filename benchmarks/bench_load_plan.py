"""The load-aware planner offline, on the ``load-skew`` scenario's timeline (issue 33): where the
gap between the planner alone and the simulator comes from, and what the move budget costs.

    python benchmarks/bench_load_plan.py [--nodes 64] [--partitions 4096] [--seeds 1-5]
        [--duration 700] [--variants quantised,exact,nodrift,exact-nodrift,pinned] [--refill 0.04]
        [--period 300] [--drift-bound]

Replays the simulator's rounds without the cluster: members ``n000``... at weight 1, the
scenario's load model (same seed), a round every 300 s from t=30 whose figures are the model's
rates at that time, every member's plan applied at once 10 s later (the simulator commits it by
a view and moves it by handoffs within the next 60 s), max/mean measured as the scenario does:
60 s after each plan (t=100, 400, ...) and every 30 s, with the true rates of that moment. At
N=64, P=4,096 it reproduces the simulator's "after step 1 / step 2" figures to the fourth decimal
(seeds 1-4, docs/benchmarks-log.md) in a second per seed instead of 1-2 minutes. Variants:

- ``quantised``: what the simulator does (figures committed as one byte per partition);
- ``exact``: the planner given the true rates (integer levels at 1e-9 of the largest rate);
- ``nodrift``: the rates frozen at t=30 (the planner alone, no hot-set drift);
- ``exact-nodrift``: both;
- ``pinned``: no weights: each round moves single partitions, chosen (``pin_moves``), within the
  same step budget, move bucket and trigger - what a placement that could move the partitions
  it chose (Slicer moves key ranges) would do; the weights' placement cannot.
- ``pins``: the pins planner itself (``placement.pinning.plan_pins``) on the table with the
  pins the last round committed (what ``load-skew`` with ``balance_by=pins`` runs).

Columns: static max/mean at t=30; after steps 1 and 2 (t=100, t=400); ``known2``: after step 2
measured with the figures step 2 planned from (what a planner can know: the drift event at
t=360 taken out); the moved fractions of steps 1 and 2; over the run after step 2's settling:
the mean max/mean of the 30-s samples, the share of samples <= 1.2, the end figure, moved
partitions per hour after the first two rounds, and the static table's mean max/mean over the
same samples. ``--refill`` sets the move bucket's refill
(fraction of the partitions per hour; the planner's default 0.04 = Slicer's ~4 %/h).
``--drift-bound``: what one drift event does to a perfectly balanced cluster (``drift_bound``).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from fractions import Fraction

import numpy as np

from placement.pinning import plan_pins
from placement.rebalance import LoadReport, MoveBudget, RebalanceConfig, plan
from placement.table import PlacementTable, TableConfig
from simulations.load_model import LoadModel

FIRST_S, PERIOD_S, PLAN_AFTER_S, SETTLE_S, SAMPLE_S = 30, 300, 10, 60, 30


class _Exact(LoadReport):
    """A report whose levels are the true rates (1e-9 resolution): quantisation taken out."""

    _levels: np.ndarray  # (not a dataclass field: this subclass is no dataclass)

    def __init__(self, rates: np.ndarray) -> None:
        super().__init__(LoadReport.of(rates).codes)
        object.__setattr__(self, "_levels", np.rint(rates / rates.max() * 1e9).astype(np.int64))

    def levels(self) -> np.ndarray:
        return self._levels


def leaders(table: PlacementTable) -> np.ndarray:
    """Each partition's leader, an index into the table's sorted member ids."""
    return table.owner_indices()[1][:, 0].copy()


def ratio(owners: np.ndarray, rates: np.ndarray, nodes: int) -> float:
    sums = np.bincount(owners, weights=rates, minlength=nodes)
    return float(sums.max() / sums.mean())


def pin_moves(owners: np.ndarray, rates: np.ndarray, nodes: int, allowed: int, trigger: float) -> int:
    """The ``pinned`` variant's step, a bound for what moving *chosen* partitions could do (no
    weight can): while max/mean is over ``trigger`` and moves are left, move the partition of the
    most loaded member whose move to the least loaded one lowers the maximum most. Returns the
    moves made (``owners`` is changed in place)."""
    moved = 0
    while moved < allowed:
        sums = np.bincount(owners, weights=rates, minlength=nodes)
        if sums.max() <= trigger * sums.mean():
            break
        top, bottom = int(sums.argmax()), int(sums.argmin())
        mine = np.flatnonzero(owners == top)
        rest = np.delete(sums, [top, bottom]).max(initial=0.0)
        peak = np.maximum(np.maximum(sums[top] - rates[mine], sums[bottom] + rates[mine]), rest)
        best = int(peak.argmin())
        if peak[best] >= sums.max():
            break
        owners[mine[best]] = bottom
        moved += 1
    return moved


def replay(nodes: int, partitions: int, seed: int, variant: str, duration_s: float = 700.0,
           rebalance: RebalanceConfig | None = None, refill: Fraction | None = None,
           period_s: int = PERIOD_S) -> dict[str, float]:
    config = TableConfig(partitions)
    model = LoadModel(partitions, seed)
    frozen = model.rates(FIRST_S).copy() if "nodrift" in variant else None

    def rates(t: float) -> np.ndarray:
        return frozen if frozen is not None else model.rates(t)

    weights = {f"n{i:03d}": 1.0 for i in range(nodes)}
    table = PlacementTable.from_config(config, weights)
    owners = static = leaders(table)
    out_pins = 0
    rb = rebalance or RebalanceConfig()
    budget = MoveBudget(at_s=FIRST_S) if refill is None else MoveBudget(rate_per_hour=refill, at_s=FIRST_S)
    rounds = [FIRST_S + k * period_s for k in range(int((duration_s - FIRST_S) // period_s) + 1)]
    plans = {r + PLAN_AFTER_S: r for r in rounds}
    out: dict[str, float] = {"static": ratio(owners, rates(FIRST_S), nodes)}
    samples, statics, moved_steady = [], [], 0
    # Events in time order; at equal times a plan goes before a sample (as in the simulator, whose
    # sample at t sees partitions that moved before t; plans are at t = 40, 340, ...: no tie).
    times = sorted({*plans, *range(0, int(duration_s) + 1, SAMPLE_S), *(p + SETTLE_S for p in plans)})
    for t in times:
        if t in plans:
            at = plans[t]
            figures = rates(at).copy()
            report = _Exact(figures) if variant.startswith("exact") else LoadReport.of(figures)
            budget = budget.refilled(at)
            if variant == "pins":
                pp = plan_pins(table, report, rb, allowance=budget.tokens)
                table, moved = table.with_pins(pp.pins), pp.moved
                owners, out_pins = leaders(table), max(out_pins, len(pp.pins))
            elif variant == "pinned":
                owners = owners.copy()
                moved = pin_moves(owners, figures, nodes, min(math.floor(rb.step_budget * partitions),
                                                              math.floor(budget.tokens * partitions)), rb.trigger)
            else:
                p = plan(weights, report, config, rb, allowance=budget.tokens)
                weights, moved = p.weights, p.moved
                owners = leaders(PlacementTable.from_config(config, weights))
            budget = budget.spent(moved, partitions)
            k = rounds.index(at) + 1
            if k <= 2:
                out[f"moved{k}"] = moved / partitions
                if k == 2:
                    out["known2"] = ratio(owners, figures, nodes)
            else:
                moved_steady += moved
        if t - SETTLE_S in plans and rounds.index(plans[t - SETTLE_S]) < 2:
            out[f"step{rounds.index(plans[t - SETTLE_S]) + 1}"] = ratio(owners, rates(t), nodes)
        if t % SAMPLE_S == 0 and len(rounds) > 1 and t >= rounds[1] + PLAN_AFTER_S + SETTLE_S:
            samples.append(ratio(owners, rates(t), nodes))
            statics.append(ratio(static, rates(t), nodes))
    out["end"] = ratio(owners, rates(duration_s), nodes)
    out["pins_max"] = out_pins / partitions
    out["static_end"] = ratio(static, rates(duration_s), nodes)
    if samples:
        out["mean_after"] = statistics.fmean(samples)
        out["share_le_1_2"] = sum(s <= 1.2 for s in samples) / len(samples)
        out["static_mean_after"] = statistics.fmean(statics)
    steady_h = (duration_s - FIRST_S - 2 * period_s) / 3600
    if steady_h > 0:
        out["moved_per_h_steady"] = moved_steady / partitions / steady_h
    return out


def drift_bound(nodes: int, partitions: int, seed: int, trials: int = 1000) -> tuple[float, float, float]:
    """What one drift event does to a *perfectly* balanced cluster (every member at the mean
    load at round 2's time, t=330): over ``trials`` draws of the model's next drift step (as many
    partitions cool and heat as it swaps; owners as in the equal-weight table), the share of draws
    after which max/mean is still <= 1.2, and its median and 90th percentile. The simulator's
    "after step 2" is measured at t=400, after the drift step of t=360: no plan made from the
    figures of t=330 does better than this, except by luck in where it leaves the members that
    the newly hot partitions land on."""
    model = LoadModel(partitions, seed)
    model.rates(FIRST_S + PERIOD_S)
    hot = np.zeros(partitions, dtype=bool)
    hot[model.hot()] = True
    swap = max(1, round(model.shape.drift_fraction * int(hot.sum())))
    extra = model.base * (model.shape.hot_factor - 1)  # what heating adds to a partition
    owners = leaders(PlacementTable.from_config(TableConfig(partitions), {f"n{i:03d}": 1.0 for i in range(nodes)}))
    mean = float(np.where(hot, model.base * model.shape.hot_factor, model.base).sum()) / nodes
    rng = np.random.default_rng([seed, 0xB0])
    after = []
    for _ in range(trials):
        delta = np.zeros(partitions)
        cool = rng.choice(np.flatnonzero(hot), swap, replace=False)
        heat = rng.choice(np.flatnonzero(~hot), swap, replace=False)
        delta[cool], delta[heat] = -extra[cool], extra[heat]
        gain = np.bincount(owners, weights=delta, minlength=nodes)
        after.append((mean + gain.max()) / (mean + delta.sum() / nodes))
    a = np.array(after)
    return float((a <= 1.2).mean()), float(np.median(a)), float(np.percentile(a, 90))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--partitions", type=int, default=4096)
    ap.add_argument("--seeds", default="1-5", help="first-last")
    ap.add_argument("--duration", type=float, default=700.0)
    ap.add_argument("--variants", default="quantised,exact,nodrift,exact-nodrift")
    ap.add_argument("--period", type=int, default=PERIOD_S, help="seconds between rounds (the scenario's period_s)")
    ap.add_argument("--refill", type=float, default=None, help="move bucket refill, fraction per hour")
    ap.add_argument("--drift-bound", action="store_true",
                    help="instead: one drift event after a perfect balance (drift_bound), per seed")
    args = ap.parse_args()
    first, last = (int(x) for x in args.seeds.split("-"))
    if args.drift_bound:
        print(f"N={args.nodes} P={args.partitions}: perfect balance at t=330, then one drift event")
        for seed in range(first, last + 1):
            share, median, p90 = drift_bound(args.nodes, args.partitions, seed)
            print(f"seed {seed}: share <= 1.2 {share:.3f}  median {median:.4f}  p90 {p90:.4f}")
        return
    refill = None if args.refill is None else Fraction(args.refill).limit_denominator(10_000)
    cols = ("static", "step1", "step2", "known2", "moved1", "moved2", "mean_after", "share_le_1_2", "end",
            "moved_per_h_steady", "static_mean_after", "pins_max")
    print(f"N={args.nodes} P={args.partitions} {args.duration:g} s refill "
          f"{'default' if refill is None else float(refill)}")
    print(f"{'variant':>14} seed " + " ".join(f"{c[:9]:>9}" for c in cols) + "  wall_s")
    for variant in args.variants.split(","):
        rows = []
        for seed in range(first, last + 1):
            t0 = time.perf_counter()
            r = replay(args.nodes, args.partitions, seed, variant, args.duration, refill=refill, period_s=args.period)
            rows.append([r.get(c, float("nan")) for c in cols])
            print(f"{variant:>14} {seed:>4} " + " ".join(f"{v:>9.4f}" for v in rows[-1])
                  + f"  {time.perf_counter() - t0:6.1f}", flush=True)
        print(f"{variant:>14} mean " + " ".join(f"{statistics.fmean(c):>9.4f}" for c in zip(*rows))
              + f"  max step2 {max(r[2] for r in rows):.4f}")


if __name__ == "__main__":
    main()
