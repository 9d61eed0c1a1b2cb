"""``placement node | witness | members | owners | cluster``: run nodes and look at a running cluster.

The flags of ``node`` and ``witness`` and the ``NodeConfig`` they make are ``node_flags``'s; the
HTTP server a node runs is ``http_server``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from membership.seeds import DnsSeed

from .. import argtypes
from ..errors import InvalidConfigError, PlacementError
from .http_server import advertise_bound_port, bind_error, http_server, listen_http
from .node import Node, NodeConfig
from .node_flags import (
    NODE_FLAGS,
    add_node_arguments,
    config_from_args,
    witness_config_from_args,
)
from .workers import PartitionProcessor, PartitionWorkers

if TYPE_CHECKING:
    import httpx


def _say(node_id: str, text: str) -> None:
    print(f"[{node_id}] {text}", flush=True)


async def serve(config: NodeConfig, http: tuple[str, int] | None,
                worker: Callable[[], PartitionProcessor] | None = None, work_sink: bool = False) -> int:
    """Run one node until SIGTERM/SIGINT (graceful leave) or POST /v1/leave; with ``worker``,
    one processor per owned partition (``placement.service.workers``). ``work_sink``: also accept
    ``POST /v1/work`` (``placement.service.work_sink``: records what it receives), so that
    ``spark-route --deliver`` has a receiver. ``http`` None (a witness without ``--http``): no
    HTTP server, and its modules are never imported."""
    # Warnings of the node and its gossip (join attempts, refusals, id conflicts) on stderr,
    # what the cluster survives whenever that changes (INFO when all is well), and every other
    # member's join, suspicion, death, refutation and leave (rate-limited).
    logging.basicConfig(format=f"[{config.node_id}] %(levelname)s %(message)s", level=logging.WARNING)
    logging.getLogger("placement.survival").setLevel(logging.INFO)
    logging.getLogger("placement.membership").setLevel(logging.INFO)  # joins, suspicions, deaths, leaves
    sock = listen_http(http) if http is not None else None
    if sock is not None:  # --http HOST:0: advertise the port the system chose
        config = dataclasses.replace(config, http_advertise=advertise_bound_port(config.http_advertise, sock))
    node = Node(config)
    done = asyncio.Event()
    # The HTTP app and server are built (their modules imported) before the node starts: after
    # it, the ~70 ms this takes (~1 s when 16 nodes start at once on 2 cores) is the first
    # block of the application loop its lag gauge sees and logs (node_thread.AppLoopLag).
    server = None
    if http is not None:
        if work_sink:
            from placement.service.work_sink import create_sink_app  # (only a --work-sink node needs it)

            app = create_sink_app(node, admin_token=config.admin_token, on_leave=done.set)
        else:
            from .http_api import create_app

            app = create_app(node, config.admin_token, on_leave=done.set)
        server = http_server(app, http, tls=(config.tls_cert, config.tls_key) if config.tls_cert and config.tls_key
                             else None)
    try:
        await node.start()
    except OSError as exc:
        if sock is not None:
            sock.close()
        raise bind_error("gossip UDP", "--gossip", config.gossip_bind, exc) from None
    workers = PartitionWorkers(node, worker) if worker is not None else None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    seeds = ", ".join(str(s) if isinstance(s, DnsSeed) else f"{s[0]}:{s[1]}" for s in config.join)
    role = "witness (weight 0: votes, owns nothing) " if config.weight == 0 else ""
    gossip = node.member.core.advertise  # (the port the system chose for --gossip HOST:0)
    _say(config.node_id, f"{role}gossip {gossip[0]}:{gossip[1]} "
                         f"http {config.http_advertise or 'off'} joining {seeds or 'nobody (new cluster)'}")
    started = time.monotonic()
    serving = asyncio.create_task(server.serve(sockets=[sock]) if server is not None and sock is not None
                                  else asyncio.Event().wait())  # (no HTTP: never ends by itself)
    watch = asyncio.create_task(_report(node) if config.weight > 0 else _report_members(node))
    # What ends the loop below wakes it: a signal or a leave (``done``), the HTTP server
    # stopping, a refusal (the node logs it as an event), the join deadline. No polling: an idle
    # node's application loop then wakes only for its own work (issue 14: idle CPU).
    wake = asyncio.Event()
    node.events.listeners.append(wake.set)
    serving.add_done_callback(lambda _: wake.set())
    stop = asyncio.ensure_future(done.wait())
    status = 0
    while not done.is_set():
        deadline = (started + config.join_timeout_s - time.monotonic()
                    if config.join_timeout_s and not node.joined else None)
        woken = asyncio.ensure_future(wake.wait())
        await asyncio.wait((stop, woken), timeout=None if deadline is None else max(0.0, deadline) + 0.01,
                           return_when=asyncio.FIRST_COMPLETED)
        woken.cancel()
        wake.clear()
        if node.refused:
            _say(config.node_id, f"error: {node.refused}")
            status = 3
            break
        if config.join_timeout_s and not node.joined and time.monotonic() - started > config.join_timeout_s:
            _say(config.node_id, f"error: did not join through {seeds} within --join-timeout "
                                 f"{config.join_timeout_s:g} s (the join attempts above say why)")
            status = 5
            break
        if serving.done() and http is not None:
            _say(config.node_id, f"error: the HTTP server on {http[0]}:{http[1]} stopped")
            status = 4
            break
    stop.cancel()
    if status == 0:
        _say(config.node_id, "leaving: releasing partitions, announcing the leave")
        await node.leave()  # drains and hands on every partition (the processors' close)
    else:
        node.close()
    if workers is not None:
        await workers.close()
    watch.cancel()
    if server is not None:
        server.should_exit = True
    else:
        serving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await serving
    _say(config.node_id, "stopped")
    return status


async def _report(node: Node) -> None:
    """Stream membership and ownership changes to stdout. The count is kept from the changes
    themselves (the first is the ownership at start), so each line's count is the result of its
    own +/- (``owned_partitions()`` read later would already include changes not printed yet)."""
    seen: dict[str, str] = {}
    owned: frozenset[int] = frozenset()
    async for change in node.ownership_changes():
        owned = (owned - change.released) | change.acquired
        _say_members(node, seen)
        paused = f" - paused: {node.paused}" if node.paused else ""
        _say(node.node_id, f"owns {len(owned)} partitions (+{len(change.acquired)} -{len(change.released)}) "
                           f"placement {change.checksum[:12]}{paused}")


def _say_members(node: Node, seen: dict[str, str]) -> None:
    for m in node.members():
        if seen.get(m.node_id) != m.status:
            seen[m.node_id] = m.status
            if m.node_id != node.node_id:
                _say(node.node_id, f"member {m.node_id} is {m.status}")


async def _report_members(node: Node) -> None:
    """A witness's stdout: membership changes (it owns nothing, so ``_report`` would say little)."""
    seen: dict[str, str] = {}
    changed = asyncio.Event()
    node.events.listeners.append(changed.set)
    while not node.events.closed:
        _say_members(node, seen)
        await changed.wait()
        changed.clear()


def cmd_node(args: argparse.Namespace) -> int:
    config, http = config_from_args(args)
    worker = next(f for f in NODE_FLAGS if f.flag == "--worker").resolve(args.worker, os.environ)
    return asyncio.run(serve(config, http, worker, args.work_sink))


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
        if i:
            cmd += ["--join", seed]
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

