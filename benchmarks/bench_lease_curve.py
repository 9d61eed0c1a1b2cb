"""What leases cost: traffic against takeover and self-fencing time, one row per lease setting
(issue 34 item 1; docs/ownership.md, "What leases cost").

    PYTHONPATH=. .venv/bin/python benchmarks/bench_lease_curve.py                  # N=256, seeds 1-2
    PYTHONPATH=. .venv/bin/python benchmarks/bench_lease_curve.py --nodes 64 --seeds 1:4 --points 1.0 1.25

For each ``renew_s`` it sets ``lease_s`` = 4 ``renew_s`` + ``fence_drain_s`` + ``resend_s`` / 2
+ 0.25 (the shortest lease whose steady rounds are rolling ones, with a quarter second to spare:
``QuorumLease.rolling_margin_s``) and runs ``steady`` and ``crash-one`` on ``swim-exclusive``:
datagrams per member-second of the whole run (gossip included), crash takeover against SWIM's
detection, and the longest a cut-off member keeps working (``lease_s``). ``--base`` adds the row
of the rounds-to-a-quorum shape (``renew_s`` 1, ``lease_s`` 3: a lease too short for rolling).
Progress on stderr, markdown rows on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from membership import MembershipConfig
from ownership import ExclusiveConfig
from simulations import scenarios
from simulations.cluster import SwimSystem


def lease_for(renew_s: float, cfg: ExclusiveConfig) -> float:
    return 4 * renew_s + cfg.fence_drain_s + cfg.resend_s / 2 + 0.25


def measure(renew_s: float, lease_s: float, nodes: int, duration: float, seed: int) -> dict:
    cfg = dataclasses.replace(ExclusiveConfig(), renew_s=renew_s, lease_s=lease_s)
    scenarios.SYSTEMS["swim-exclusive"] = lambda: SwimSystem(MembershipConfig(lifeguard=True), name="swim-exclusive",
                                                             exclusive=cfg)
    out: dict = {}
    for name in ("steady", "crash-one"):
        t0 = time.perf_counter()
        r = scenarios.run_scenario(name, nodes=nodes, duration_s=duration, seed=seed, system="swim-exclusive",
                                   check_cores=False)
        out[name] = r
        print(f"  renew {renew_s} lease {lease_s} {name} seed {seed}: {r['datagrams_per_member_s']} datagrams/member-s "
              f"({time.perf_counter() - t0:.0f} s wall)", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--seeds", default="1:3", help="A:B, seeds A..B-1")
    ap.add_argument("--points", type=float, nargs="+", default=[0.5, 0.75, 1.0, 1.25, 1.5], help="renew_s values")
    ap.add_argument("--base", action="store_true", help="also the 1 s / 3 s rounds-to-a-quorum row")
    a = ap.parse_args(argv)
    lo, hi = (int(x) for x in a.seeds.split(":"))
    default = ExclusiveConfig()
    settings = [(1.0, 3.0)] if a.base else []
    settings += [(r, lease_for(r, default)) for r in a.points]
    print(f"N={a.nodes}, {a.duration:g} s, seeds {lo}-{hi - 1}; default renew_s {default.renew_s} / lease_s "
          f"{default.lease_s}\n")
    print("| `renew_s` / `lease_s` | at rest (`steady`) | crash run (`crash-one`) | takeover - detection | "
          "cut-off member stops within |")
    print("|---|---|---|---|---|")
    for renew_s, lease_s in settings:
        runs = [measure(renew_s, lease_s, a.nodes, a.duration, s) for s in range(lo, hi)]
        steady = [r["steady"]["datagrams_per_member_s"] for r in runs]
        crash = [r["crash-one"]["datagrams_per_member_s"] for r in runs]
        gaps = []
        for r in runs:
            tk, det = r["crash-one"]["takeover_exact_s"]["p50"], r["crash-one"]["detection_s"]["p50"]
            gaps.append("-" if tk is None or det is None else f"{tk - det:+.2f}")
        span = lambda xs: f"{min(xs):.2f}" if min(xs) == max(xs) else f"{min(xs):.2f}-{max(xs):.2f}"  # noqa: E731
        gap = " / ".join(gaps)
        print(f"| {renew_s:g} / {lease_s:g} s | {span(steady)} | {span(crash)} | {gap} s | {lease_s:g} s |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
