"""``placement node | witness | members | owners | cluster``: run nodes and look at a running cluster.

The flags of ``node`` and ``witness`` and the ``NodeConfig`` they make are ``node_flags``'s; the
HTTP server a node runs is ``http_server``'s; ``serve``, which runs one, is ``node_serve``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from .. import argtypes
from ..errors import InvalidConfigError, PlacementError
from .node_flags import (
    NODE_FLAGS,
    add_node_arguments,
    config_from_args,
    witness_config_from_args,
)
from .node_serve import serve

if TYPE_CHECKING:
    import httpx


def cmd_node(args: argparse.Namespace) -> int:
    config, http = config_from_args(args)
    worker = next(f for f in NODE_FLAGS if f.flag == "--worker").resolve(args.worker, os.environ)
    factory = None
    if args.work_sink:
        from .work_sink import sink_app_factory  # (only a --work-sink node needs it)

        factory = sink_app_factory(config.admin_token)
    return asyncio.run(serve(config, http, worker, factory))


def cmd_witness(args: argparse.Namespace) -> int:
    config, http = witness_config_from_args(args)
    return asyncio.run(serve(config, http))


def _get(url: str, path: str, **params) -> httpx.Response:
    import httpx  # here, not at the top: ``placement node`` never needs it (~50 ms of its start-up)

    try:
        r = httpx.get(url.rstrip("/") + path, params=params, timeout=5.0)
    except httpx.HTTPError as exc:
        raise PlacementError(f"cannot reach {url}: {exc}") from None
    if r.status_code >= 400:
        raise PlacementError(f"{url}{path}: HTTP {r.status_code}: {r.text}")
    return r


def cmd_members(args: argparse.Namespace) -> int:
    members = _get(args.url, "/v1/members").json()
    if args.json:
        print(json.dumps(members, indent=2))
        return 0
    print(f"{'id':<12}{'status':<9}{'inc':>12}  {'weight':>6}  {'gossip':<22}http")
    for m in members:
        print(f"{m['id']:<12}{m['status']:<9}{m['incarnation']:>12}  {m['weight']:>6g}  {m['gossip']:<22}{m['http']}")
    return 0


def cmd_owners(args: argparse.Namespace) -> int:
    body = _get(args.url, "/v1/owners", key=args.key).json()
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        owners = ", ".join(f"{o['id']} ({o['http']})" for o in body["owners"])
        print(f"key {body['key']!r} -> partition {body['partition']} -> {owners}")
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    """Start N node processes on loopback (each also a work sink, so the README's
    ``spark-route --deliver`` example has receivers), stream their output, stop them all on Ctrl-C."""
    for flag, first in (("--gossip-port", args.gossip_port), ("--http-port", args.http_port)):
        if first + args.nodes - 1 > 65535:
            raise InvalidConfigError(f"{flag} {first} with --nodes {args.nodes} needs ports up to "
                                     f"{first + args.nodes - 1}; the last port is 65535")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop like Ctrl-C: nodes leave
    procs = []
    seed = f"127.0.0.1:{args.gossip_port}"
    for i in range(args.nodes):
        cmd = [sys.executable, "-m", "placement_cli", "node", "--id", f"n{i + 1}",
               "--gossip", f"127.0.0.1:{args.gossip_port + i}", "--http", f"127.0.0.1:{args.http_port + i}",
               "--partitions", str(args.partitions), "--replicas", str(args.replicas), "--work-sink"]
        # A new cluster each run: n1 founds it whatever its members file says of the last run.
        cmd += ["--join", seed] if i else ["--new-cluster"]
        procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL))
        if i == 0:  # the seed must be up before the others join it
            _wait_healthy(f"http://127.0.0.1:{args.http_port}", procs[0])
    urls = ", ".join(f"http://127.0.0.1:{args.http_port + i}" for i in range(args.nodes))
    print(f"cluster of {args.nodes} nodes; HTTP: {urls}\n"
          f"try: placement members --url http://127.0.0.1:{args.http_port}   (Ctrl-C stops all)", flush=True)
    try:
        _watch(procs, args.stop_on_exit)
    except KeyboardInterrupt:
        print("\nstopping: every node leaves gracefully", flush=True)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(max(0.1, deadline - time.monotonic()))
        if p.poll() is None:
            p.kill()
    return 0


def _watch(procs: list[subprocess.Popen], stop_on_exit: bool) -> None:
    """Report each node that exits; return when all have (or, with ``stop_on_exit``, at the
    first). One node leaving - a POST /v1/leave, a crash - must not stop the others (issue 16)."""
    running = dict(enumerate(procs, 1))
    while running:
        time.sleep(0.2)
        for i, p in list(running.items()):
            if p.poll() is not None:
                del running[i]
                print(f"node n{i} exited with status {p.returncode}; "
                      + ("stopping the cluster (--stop-on-exit)" if stop_on_exit else
                         f"{len(running)} still running" if running else "no node is left"), flush=True)
                if stop_on_exit:
                    return


def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 20.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/healthz", timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    raise PlacementError(f"the first node did not come up at {url} (are ports free?)")


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    node = sub.add_parser("node", help="run one node: gossip member + placement + HTTP API")
    add_node_arguments(node)
    node.add_argument("--work-sink", action="store_true",
                      help="also accept POST /v1/work, the endpoint spark-route --deliver sends to (records items)")
    node.set_defaults(func=cmd_node)
    witness = sub.add_parser(
        "witness", help="run a witness: a member that votes (stable views, leases) but owns no partitions",
        description="A member of weight 0: it votes on stable views and quorum leases as one of their witnesses, "
                    "owns no partitions and takes no work. Two nodes and one witness survive the crash of any one "
                    "of them. Same cluster flags as `placement node`; --http is off unless given.")
    add_node_arguments(witness, witness=True)
    witness.set_defaults(func=cmd_witness)
    for name, func, helptext in (("members", cmd_members, "list the members a node sees"),
                                 ("owners", cmd_owners, "owners of one key")):
        p = sub.add_parser(name, help=helptext)
        if name == "owners":
            p.add_argument("key")
        p.add_argument("--url", type=argtypes.http_url, default="http://127.0.0.1:8001", help="a node's HTTP URL")
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)
    cluster = sub.add_parser("cluster", help="start a local cluster of node processes on loopback")
    cluster.add_argument("--nodes", type=argtypes.integer(1, 64), default=5, help="1-64 (default 5)")
    cluster.add_argument("--gossip-port", type=argtypes.port, default=7001,
                         help="first gossip port (default 7001)")
    cluster.add_argument("--http-port", type=argtypes.port, default=8001,
                         help="first HTTP port (default 8001)")
    cluster.add_argument("--partitions", type=argtypes.partitions, default=4096, help="default 4096")
    cluster.add_argument("--replicas", type=argtypes.replicas, default=2, help="default 2")
    cluster.add_argument("--stop-on-exit", action="store_true",
                         help="stop every node when one exits (default: report it, keep the others)")
    cluster.set_defaults(func=cmd_cluster)

