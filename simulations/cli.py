"""``placement simulate``: the churn simulator's command line.

    placement simulate --list
    placement simulate crash-one --nodes 64 --duration 60 --seed 3 --out out/crash
    placement simulate split --system swim  # the availability-first mode: two owners in a split
    placement simulate stalls --system swim-nolifeguard --param fraction=0.2
    placement simulate loss --duration 600 --json           # every metric, machine-readable
    placement simulate compare --out docs   # the comparison table of docs/simulations.md
    placement simulate split --check-cores  # also every membership core's own check, every step

Invariants (``simulations.invariants``) are checked after every step; a violation stops the run
with ``InvariantViolation`` naming the invariant, the nodes, the partition, the time and the seed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from placement import argtypes
from placement.errors import InvalidConfigError

# Allowed values of scenario parameters (``--param NAME=VALUE``) by name; any other parameter
# by its default's type: an int default takes integers >= 0, a float default numbers >= 0 (the
# others are counts and times). A zero gap or period would schedule events forever at one instant.
_PARAM_TYPES: dict[str, Callable[[str], Any]] = {
    "loss": argtypes.loss_rate,
    "fraction": argtypes.fraction,
    "gap_s": argtypes.positive_float,
    "period_s": argtypes.positive_float,
    "drift_every_s": argtypes.positive_float,
    "crash_at_s": argtypes.number(),  # negative: no crash
}


def _param(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    """Register this package's subcommands on the ``placement`` parser."""
    p = sub.add_parser("simulate", help="run a churn scenario on the deterministic cluster simulator",
                       description="Run N real membership cores (or a lease-based baseline) under a "
                                   "simulated clock and network; print a summary and write metrics.")
    p.add_argument("scenario", nargs="?", help="scenario name (see --list), or 'compare'")
    p.add_argument("--list", action="store_true", help="list scenarios and systems, then exit")
    p.add_argument("--nodes", type=argtypes.positive_int, help="cluster size at the start (default: the scenario's)")
    p.add_argument("--duration", type=argtypes.positive_float, help="simulated seconds measured after warm-up")
    p.add_argument("--seed", type=argtypes.integer(), default=1, help="run seed: same seed, same run (default 1)")
    p.add_argument("--loss", type=argtypes.loss_rate, help="packet loss rate on every link, in [0, 1), e.g. 0.05")
    p.add_argument("--system", default="swim-exclusive",
                   help="swim-exclusive (default, as a node's default: exclusive ownership), swim (the "
                        "availability-first mode, a node's --ownership available), swim-nolifeguard (the "
                        "same on plain SWIM), eventhubs, durabletask, redis-race (the lease baselines)")
    p.add_argument("--no-lifeguard", action="store_true", help="same as --system swim-nolifeguard")
    p.add_argument("--partitions", type=argtypes.partitions, default=1024, help="partition count (default 1024)")
    p.add_argument("--replicas", type=argtypes.replicas, default=1, help="replicas per partition (default 1)")
    p.add_argument("--latency", type=argtypes.non_negative_float, default=0.0005,
                   help="base one-way delay, s (default 0.0005)")
    p.add_argument("--jitter", type=argtypes.non_negative_float, default=0.0005,
                   help="mean exponential jitter, s (default 0.0005)")
    p.add_argument("--clock-skew", type=argtypes.non_negative_float, default=0.0, metavar="S",
                   help="each node's clock is off by up to +-S seconds (default 0: a shared clock)")
    p.add_argument("--sample", type=argtypes.positive_float, default=0.5,
                   help="ownership sampling interval, s (default 0.5)")
    p.add_argument("--param", action="append", type=_param, default=[], metavar="NAME=VALUE",
                   help="scenario parameter (repeatable), e.g. --param count=4")
    p.add_argument("--out", metavar="DIR", help="write metrics.json, series.json and PNG plots here")
    p.add_argument("--no-plots", action="store_true", help="with --out: skip the PNG plots")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON instead of the summary")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--check-cores", action="store_true",
                   help="also check every touched membership core's indexes after every step "
                        "(Swim.check_invariants; slower: ~x1.5 at 16 nodes, x6 at 64, x16 at 256, "
                        "docs/simulations.md); the other invariants are always checked")
    p.set_defaults(func=cmd_simulate)


def scenario_params(scenario: str, given: list[tuple[str, str]]) -> dict[str, Any]:
    """``--param`` values checked against the scenario's parameters and converted."""
    from .scenarios import SCENARIOS

    defaults = SCENARIOS[scenario].params
    params: dict[str, Any] = {}
    for name, text in given:
        if name not in defaults:
            takes = ", ".join(defaults) or "no parameters"
            raise InvalidConfigError(f"argument --param: scenario {scenario!r} has no parameter {name!r} "
                                     f"(it takes {takes})")
        parse = _PARAM_TYPES.get(name) or (argtypes.non_negative_int if isinstance(defaults[name], int)
                                           else argtypes.non_negative_float)
        try:
            params[name] = parse(text)
        except argparse.ArgumentTypeError as exc:
            raise InvalidConfigError(f"argument --param {name}: {exc}") from None
    return params


def cmd_simulate(args: argparse.Namespace) -> int:
    from .cluster import progress_bar
    from .scenarios import SCENARIOS, SYSTEMS, describe, run_scenario

    if args.list or not args.scenario:
        print("scenarios:")
        for line in describe():
            print("  " + line)
        print("  compare          the baseline comparison table (docs/simulations.md)")
        print("systems: " + ", ".join(SYSTEMS))
        return 0
    if args.scenario == "compare":
        from .compare import main as compare_main
        return compare_main(out_dir=args.out, seed=args.seed, quiet=args.quiet, check_cores=args.check_cores)
    if args.scenario not in SCENARIOS:
        raise InvalidConfigError(f"argument scenario: unknown scenario {args.scenario!r} "
                                 f"(choose from {', '.join(SCENARIOS)}, compare)")
    system = "swim-nolifeguard" if args.no_lifeguard else args.system
    if system not in SYSTEMS:
        raise InvalidConfigError(f"argument --system: unknown system {system!r} (choose from {', '.join(SYSTEMS)})")
    params = scenario_params(args.scenario, args.param)
    progress = None if args.quiet else progress_bar(f"{args.scenario}/{system}")
    result = run_scenario(args.scenario, nodes=args.nodes, duration_s=args.duration, seed=args.seed,
                          system=system, loss=args.loss, partitions=args.partitions,
                          replicas=args.replicas, sample_interval_s=args.sample,
                          latency_s=args.latency, jitter_s=args.jitter, clock_skew_s=args.clock_skew,
                          params=params, progress=progress, check_cores=args.check_cores)
    series = result.pop("series")
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k not in ("events", "detection_samples_s")}, indent=1))
    else:
        print("\n".join(summary_lines(result)))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "metrics.json"), "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)
        with open(os.path.join(args.out, "series.json"), "w", encoding="utf-8") as fh:
            json.dump(series, fh)
        if not args.no_plots:
            from .plots import write_plots
            names = write_plots(result, series, args.out)
            print(f"wrote metrics.json, series.json, {', '.join(names)} to {args.out}", file=sys.stderr)
    return 0


def _percentiles(p: Mapping[str, Any]) -> str:
    if not p["n"]:
        return "none measured"
    return f"p50 {p['p50']:.2f} s, p99 {p['p99']:.2f} s, max {p['max']:.2f} s (n={p['n']})"


def summary_lines(r: Mapping[str, Any]) -> list[str]:
    """The result in a few aligned lines for a person (``--json`` and metrics.json hold it all)."""
    params = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in r["params"].items())
    rows = (
        ("run", f"{r['scenario']} on {r['system']}, {r['nodes']} nodes, {r['simulated_s']:g} simulated s, "
                f"seed {r['seed']}" + (f" ({params})" if params else "")),
        ("network", f"loss {r['loss']:.1%}, clock skew up to {r['clock_skew_s']:g} s"),
        # A lease baseline has no membership, so nothing "detects" a crash: its leases expire (takeover).
        ("detection", f"{_percentiles(r['detection_s'])}; {r['undetected_crashes']} "
                      f"crash{'' if r['undetected_crashes'] == 1 else 'es'} undetected"
                      if r["system"].startswith("swim")
                      else "n/a: a lease baseline has no membership (a crash ends by lease expiry: takeover)"),
        ("takeover", _percentiles(r["takeover_s"])),
        ("false alarms", f"{r['false_suspicions']} suspicions, {r['false_deaths']} deaths "
                         f"({r['healthy_false_deaths']} of never-faulted members)"),
        ("moves", f"{r['moved_partitions']} (optimal {r['optimal_moves']}; from healthy nodes {r['healthy_moves']}, "
                  f"flaps {r['flaps']})"),
        ("ownership gaps", f"{r['dual_owned_partition_s_exact']:g} partition-s with two owners, "
                           f"{r['orphan_partition_s_exact']:g} with none (exact intervals; handoff p99 "
                           f"{r['handoff_latency_s']['p99']} s)" if r.get("exclusive") else
                           f"{r['dual_ownership_partition_s']:g} partition-s with two owners, "
                           f"{r['orphan_partition_s']:g} with none (sampled, --sample)"),
        ("balance", f"max leader load / fair share {r['balance_max_over_mean']:.2f} "
                    f"(worst {r['balance_max_over_mean_worst']:.2f})"),
        ("traffic", f"{r['datagrams_per_member_s']:g} datagrams and {r['bytes_per_member_s']:g} B per member-s, "
                    f"largest {r['max_datagram_bytes']} B"),
        ("wall time", f"{r['wall_s']:.2f} s"),
    )
    width = max(len(label) for label, _ in rows)
    return [f"{label:<{width}}  {text}" for label, text in rows]
