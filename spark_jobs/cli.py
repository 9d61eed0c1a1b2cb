"""``placement spark-route``, ``spark-sweep`` and ``spark-sample``: the Spark jobs' command line.

    placement spark-sample --out items.parquet --items 100000
    placement spark-route --input items.parquet --key-column key --url http://127.0.0.1:8001 --deliver
    placement spark-route --input items.csv --key-column key --members members.json --output out/by-owner
    placement spark-route --input items.csv --key-column key --members members.json --zones zones.json --output out/z
    placement spark-sweep --out out/sweep [--grid grid.json]

pyspark is imported inside the commands, so ``placement --help`` works without Java or pyspark.
"""

from __future__ import annotations

import argparse
import json

from placement import argtypes
from placement.errors import PlacementError


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    """Register this package's subcommands on the ``placement`` parser."""
    p = sub.add_parser("spark-route", help="route work items to their owners on Spark (deliver or write)",
                       description="Assign every item to the owner of its key's partition on Spark executors, "
                                   "then POST each owner's items to it (--deliver) or write one folder per "
                                   "owner (--output). Prints a report with an exact accounting check.")
    p.add_argument("--input", required=True, metavar="PATH", help="Parquet (default), .csv (header) or .json lines")
    p.add_argument("--format", choices=("parquet", "csv", "json"), help="input format (default: from the extension)")
    p.add_argument("--key-column", required=True, metavar="NAME", help="column holding the routing key")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--url", action="append", type=argtypes.http_url, metavar="NODE_URL",
                     help="node to fetch the placement from (repeatable; also used to refresh it)")
    src.add_argument("--members", metavar="FILE", help='offline planning: JSON {"id": weight, ...}')
    p.add_argument("--partitions", type=argtypes.partitions, default=4096,
                   help="with --members: partition count (default 4096)")
    p.add_argument("--replicas", type=argtypes.replicas, default=1, help="with --members: replicas (default 1)")
    p.add_argument("--seed", type=argtypes.hash_seed, default=0, help="with --members: hash seed (default 0)")
    zoned = p.add_mutually_exclusive_group()
    zoned.add_argument("--zone", action="append", type=argtypes.member_zone, metavar="ID=ZONE",
                       help="with --members: a member's zone (repeatable), as the nodes' --zone (README, \"Zones\")")
    zoned.add_argument("--zones", metavar="FILE", help='with --members: JSON {"id": "zone", ...}')
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--deliver", action="store_true", help="POST items to {owner}/v1/work (needs --url)")
    out.add_argument("--output", metavar="DIR", help="write Parquet partitioned by owner (owner=<id>/)")
    p.add_argument("--batch-size", type=argtypes.positive_int, default=500, help="items per POST (default 500)")
    p.add_argument("--max-attempts", type=argtypes.positive_int, default=12,
                   help="POST attempts per batch (default 12: ~17 s of backoff, longer than a crash takeover)")
    p.add_argument("--work-dir", metavar="DIR", help="where delivery outcomes are written (default: a temp dir)")
    p.add_argument("--engine", choices=("auto", "jvm", "python"), default="auto",
                   help="where keys are hashed: jvm (a Java UDF, needs a JDK to build it), python (Python "
                        "workers), auto (default: jvm if available, else python with the reason logged)")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--report", metavar="FILE", help="also write the report as JSON here")
    p.set_defaults(func=cmd_route)

    s = sub.add_parser("spark-sweep", help="run a churn-simulation grid on Spark; metrics table + plots",
                       description="Run scenario x nodes x loss x Lifeguard on/off x seed simulator runs as Spark "
                                   "tasks; write metrics.parquet, metrics.csv and summary PNGs.")
    s.add_argument("--out", required=True, metavar="DIR", help="output directory")
    s.add_argument("--grid", metavar="FILE", help="JSON grid (see spark_jobs/sweep.py; default: a 72-run grid)")
    s.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    s.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    s.set_defaults(func=cmd_sweep)

    g = sub.add_parser("spark-sample", help="write sample work items for spark-route")
    g.add_argument("--out", required=True, metavar="PATH", help=".parquet (default), .csv or .json")
    g.add_argument("--items", type=argtypes.positive_int, default=100_000, help="number of items (default 100000)")
    g.add_argument("--distinct-keys", type=argtypes.positive_int, help="distinct keys (default: one per item)")
    g.add_argument("--master", help="Spark master (default local[*])")
    g.set_defaults(func=cmd_sample)


def cmd_route(args: argparse.Namespace) -> int:
    from . import route
    from .deliver import DeliveryOptions
    from .session import get_session

    if args.url:
        if args.zone or args.zones:
            raise PlacementError("--zone/--zones go with --members: with --url the nodes' snapshot has their zones")
        snapshot = route.fetch_snapshot(args.url)
    else:
        if args.deliver:
            raise PlacementError("--deliver needs --url: a members file has no HTTP addresses")
        snapshot = route.offline_snapshot(args.members, args.partitions, args.replicas, args.seed,
                                          zones=argtypes.zones_given(args.zone, args.zones))
    spark = get_session(args.master, "placement spark-route")
    engine = route.choose_engine(spark, args.engine, snapshot.table.partitions)
    routed = route.assign_owners(spark, route.read_items(spark, args.input, args.format), args.key_column, snapshot,
                                 engine=engine)
    if args.deliver:
        options = DeliveryOptions(batch_size=args.batch_size, max_attempts=args.max_attempts)
        report = route.deliver(spark, routed, args.key_column, snapshot, args.url, options, args.work_dir)
    else:
        report = route.write_by_owner(spark, routed, args.key_column, snapshot, args.output)
    report.engine = engine
    print(report.render())
    if args.report:
        with open(args.report, "w", encoding="utf-8") as fh:
            json.dump(report.to_dict(), fh, indent=2)
    return 0 if report.accounted and report.failed == 0 else 1


def cmd_sweep(args: argparse.Namespace) -> int:
    from .session import get_session
    from .sweep import DEFAULT_GRID, load_grid, run_sweep

    grid = load_grid(args.grid) if args.grid else DEFAULT_GRID
    spark = get_session(args.master, "placement spark-sweep")
    table = run_sweep(spark, grid, args.out, plots=not args.no_plots)
    errors = table["error"].notna().sum()
    print(f"{len(table)} runs ({errors} failed) -> {args.out}/metrics.parquet, metrics.csv and plots")
    return 0 if errors == 0 else 1


def cmd_sample(args: argparse.Namespace) -> int:
    from .route import write_sample
    from .session import get_session

    write_sample(get_session(args.master, "placement spark-sample"), args.out, args.items, None, args.distinct_keys)
    print(f"wrote {args.items} items to {args.out}")
    return 0
