"""The ``placement`` command line: the root that gathers every package's subcommands.

It sits above the layers it imports (the service's ``node``/``status`` commands, the simulator's
``simulate``, the Spark jobs' ``spark-*``), so none of them imports another upwards to be on the
command line (tests/test_layout.py keeps it so). Its own commands are the placement math's:

    placement demo                         # placement of a demo membership, with a join and a leave
    placement table --member n1=1 --member n2=2 --partitions 4096 --replicas 2 [--json]
    placement table --members members.json # {"n1": 1.0, ...} or [["n1", 1.0], ...]
    placement table --member n1 --member n2 --member n3 --replicas 2 --zone n1=a --zone n2=b --zone n3=a
    placement table --members members.json --zones zones.json  # {"n1": "a", ...}
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from placement import argtypes
from placement.argtypes import read_members, zones_given
from placement.errors import NoOwnerError, PlacementError
from placement.service import keygen, node_cli
from placement.service.console import status
from placement.table import PlacementTable
from simulations import cli as simulations_cli
from spark_jobs import cli as spark_cli

# Modules that contribute subcommands: each has add_subcommands(subparsers), whose parsers set
# ``func`` (called with the parsed args; returns the exit status). simulations and spark_jobs
# give only their ``cli`` modules here; they import what their commands run when those run.
_SUBCOMMAND_MODULES = (node_cli, keygen, status, simulations_cli, spark_cli)

DEMO_MEMBERS = {"n1": 1.0, "n2": 1.0, "n3": 2.0, "n4": 1.0, "n5": 0.5}


def _members(args: argparse.Namespace) -> dict[str, float] | list[tuple[str, float]]:
    members = read_members(args.members) if args.members else args.member
    if not members:
        raise PlacementError("give members with --member ID=WEIGHT (repeatable) or --members FILE")
    if not any(w > 0 for _, w in (members.items() if isinstance(members, dict) else members)):
        raise NoOwnerError("no member has a positive weight, so no partition would have an owner")
    return members


def _add_table_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--partitions", type=argtypes.partitions, default=4096, help="partition count (default 4096)")
    p.add_argument("--replicas", type=argtypes.replicas, default=1,
                   help="replicas per partition, leader first (default 1)")
    p.add_argument("--seed", type=argtypes.hash_seed, default=0, help="hash seed shared by the cluster (default 0)")
    p.add_argument("--capacity-factor", type=argtypes.capacity_factor, default=None,
                   help="bounded loads, e.g. 1.05 (default off)")


def print_summary(t: PlacementTable) -> None:
    print(t)
    load = t.load()
    replica_load = t.load(leader_only=False)
    total = sum(t.members.values())
    zoned = bool(t.zones)  # a zone column only for a table with zones
    # "vs share": leaderships over the weighted share P * w / sum(w) (1.00 = exactly fair).
    print(f"{'member':<12}{'weight':>8}{'leader of':>11}{'replica of':>12}{'vs share':>10}"
          + ("  zone" if zoned else ""))
    for m, w in t.members.items():
        lead = load.get(m, 0)
        share = t.partitions * w / total
        ratio = f"{lead / share:.2f}" if share else "-"
        print(f"{m:<12}{w:>8g}{lead:>11}{replica_load.get(m, 0):>12}{ratio:>10}"
              + (f"  {t.zone_of(m) or '-'}" if zoned else ""))


def cmd_demo(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    t = PlacementTable.build(DEMO_MEMBERS, partitions=args.partitions, replicas=args.replicas, seed=args.seed)
    print(f"Built in {1000 * (time.perf_counter() - t0):.1f} ms (weights are shares: n3 has 2, n5 has 0.5)\n")
    print_summary(t)
    for key in ("order-42", "customer-7", "invoice-2026-11"):
        print(f"key {key!r:<18} -> partition {t.partition_of(key):>5} -> owners {t.lookup(key)}")
    joined = t.with_members({**DEMO_MEMBERS, "n6": 1.0})
    moved = t.moved(joined, leaders=True)
    expected = t.partitions / (sum(DEMO_MEMBERS.values()) + 1)
    print(f"\nn6 joins (weight 1): {len(moved)} leaderships move, all to n6: "
          f"{all(joined.owner(p) == 'n6' for p in moved)} (expected P*w/W = {expected:.0f})")
    left = joined.with_members({m: w for m, w in {**DEMO_MEMBERS, 'n6': 1.0}.items() if m != "n2"})
    moved = joined.moved(left, leaders=True)
    print(f"n2 leaves: {len(moved)} leaderships move, all were n2's: {all(joined.owner(p) == 'n2' for p in moved)}")
    print("\nThat was the math alone. To watch real nodes gossip and share partitions: `make run`\n"
          "(or `placement cluster`) starts 5 local nodes; `placement node --help` shows how to run one.")
    return 0


def cmd_table(args: argparse.Namespace) -> int:
    t = PlacementTable.build(
        _members(args), partitions=args.partitions, replicas=args.replicas, seed=args.seed,
        capacity_factor=args.capacity_factor, zones=zones_given(args.zone, args.zones),
    )
    if args.json:
        print(t.to_json())
    else:
        print_summary(t)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argtypes.Parser(prog="placement", description="Partition placement by weighted rendezvous hashing.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="print the placement of a demo membership, then a join and a leave")
    _add_table_options(demo)
    demo.set_defaults(func=cmd_demo)
    table = sub.add_parser("table", help="compute the placement table of a membership")
    given = table.add_mutually_exclusive_group()
    given.add_argument("--member", action="append", type=argtypes.member, metavar="ID=WEIGHT",
                       help="a member and its weight (repeatable; weight 0 owns nothing)")
    given.add_argument("--members", metavar="FILE", help='JSON file: {"id": weight, ...} or [["id", weight], ...]')
    zoned = table.add_mutually_exclusive_group()
    zoned.add_argument("--zone", action="append", type=argtypes.member_zone, metavar="ID=ZONE",
                       help="a member's zone (repeatable; others have none): each replica set spans distinct "
                            "zones where there are at least --replicas of them (README, \"Zones\")")
    zoned.add_argument("--zones", metavar="FILE", help='JSON file: {"id": "zone", ...}')
    table.add_argument("--json", action="store_true", help="print the snapshot as JSON (the wire form)")
    _add_table_options(table)
    table.set_defaults(func=cmd_table)
    for module in _SUBCOMMAND_MODULES:
        module.add_subcommands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (PlacementError, OSError, ValueError) as exc:
        # OSError's str() is "[Errno 2] No such file or directory: 'x'": say it plainly.
        text = f"{exc.filename}: {exc.strerror}" if isinstance(exc, OSError) and exc.filename else str(exc)
        print(f"placement {args.command}: error: {text}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
