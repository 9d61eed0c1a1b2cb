"""``placement node | members | owners | cluster``: run nodes and look at a running cluster.

Every ``node`` flag can also be set by an environment variable (``PLACEMENT_`` + the flag in
upper case with dashes as underscores, e.g. ``PLACEMENT_GOSSIP_ADVERTISE``; repeatable flags
take a comma-separated list), which is how ``docker-compose.yml`` configures its nodes.
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

import httpx

from .errors import InvalidConfigError, PlacementError
from .node import Node, NodeConfig, read_key_file


def parse_addr(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def parse_tag(text: str) -> tuple[str, str]:
    k, sep, v = text.partition("=")
    if not sep or not k:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return k, v


def _env(name: str, default=None, many: bool = False):
    value = os.environ.get("PLACEMENT_" + name.upper().replace("-", "_"))
    if value is None:
        return default
    return [v.strip() for v in value.split(",") if v.strip()] if many else value


def add_node_arguments(p: argparse.ArgumentParser) -> None:
    """The ``node`` flags (also used by the compose-file test to check its commands parse)."""
    p.add_argument("--id", default=_env("id"), required=_env("id") is None, help="member id, unique in the cluster")
    p.add_argument("--gossip", type=parse_addr, default=_env("gossip", "127.0.0.1:7001"), help="UDP bind HOST:PORT")
    p.add_argument("--http", type=parse_addr, default=_env("http", "127.0.0.1:8001"), help="HTTP bind HOST:PORT")
    p.add_argument("--join", type=parse_addr, action="append", default=_env("join", [], many=True),
                   help="seed HOST:PORT (repeatable); none: start a new cluster")
    p.add_argument("--gossip-advertise", type=parse_addr, default=_env("gossip-advertise"),
                   help="HOST:PORT others use to reach our gossip (required when binding 0.0.0.0)")
    p.add_argument("--http-advertise", default=_env("http-advertise"), help="base URL others use for our HTTP API")
    p.add_argument("--weight", type=float, default=float(_env("weight", "1.0")), help="share of partitions (default 1)")
    p.add_argument("--tag", type=parse_tag, action="append", default=_env("tag", [], many=True), help="KEY=VALUE")
    p.add_argument("--partitions", type=int, default=int(_env("partitions", "4096")), help="cluster-wide (default 4096)")
    p.add_argument("--replicas", type=int, default=int(_env("replicas", "1")), help="cluster-wide (default 1)")
    p.add_argument("--seed", type=int, default=int(_env("seed", "0")), help="cluster-wide hash seed (default 0)")
    p.add_argument("--cluster", default=_env("cluster", "placement"), help="cluster name (default placement)")
    p.add_argument("--key-file", default=_env("key-file"), help="gossip encryption keys, one per line (hex/base64)")
    p.add_argument("--admin-token", default=_env("admin-token"), help="token required by POST /v1/leave")


def config_from_args(args: argparse.Namespace) -> tuple[NodeConfig, tuple[str, int]]:
    join = tuple(parse_addr(j) if isinstance(j, str) else j for j in args.join)
    tags = dict(parse_tag(t) if isinstance(t, str) else t for t in args.tag)
    # argparse applies ``type`` to string defaults (the PLACEMENT_* values) but not to the
    # items of a list default, hence the parsing of join and tag entries above.
    gossip, http, advertise = args.gossip, args.http, args.gossip_advertise
    http_host = advertise[0] if advertise else http[0]
    config = NodeConfig(
        node_id=args.id, gossip_bind=gossip, gossip_advertise=advertise,
        http_advertise=args.http_advertise or f"http://{http_host}:{http[1]}", join=join, weight=args.weight,
        tags=tags, partitions=args.partitions, replicas=args.replicas, seed=args.seed, cluster=args.cluster,
        keys=read_key_file(args.key_file) if args.key_file else (), admin_token=args.admin_token,
    )
    return config, http


def _say(node_id: str, text: str) -> None:
    print(f"[{node_id}] {text}", flush=True)


async def serve(config: NodeConfig, http: tuple[str, int]) -> int:
    """Run one node until SIGTERM/SIGINT (graceful leave) or POST /v1/leave."""
    import uvicorn

    from .http_api import create_app

    node = Node(config)
    await node.start()
    done = asyncio.Event()
    app = create_app(node, config.admin_token, on_leave=done.set)
    server = uvicorn.Server(uvicorn.Config(app, host=http[0], port=http[1], log_level="warning", lifespan="off"))
    server.install_signal_handlers = lambda: None  # we handle signals: leave first, then stop
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    _say(config.node_id, f"gossip {config.gossip_advertise or config.gossip_bind} http {config.http_advertise} "
                         f"joining {list(config.join) or 'nobody (new cluster)'}")
    serving = asyncio.create_task(server.serve())
    watch = asyncio.create_task(_report(node))
    status = 0
    while not done.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), 0.2)
        if node.refused:
            _say(config.node_id, f"error: {node.refused}")
            status = 3
            break
        if serving.done():
            _say(config.node_id, f"error: HTTP server stopped (is {http[0]}:{http[1]} free?)")
            status = 4
            break
    if status == 0:
        _say(config.node_id, "leaving: releasing partitions, announcing the leave")
        await node.leave()
    else:
        node.close()
    watch.cancel()
    server.should_exit = True
    with contextlib.suppress(asyncio.CancelledError):
        await serving
    _say(config.node_id, "stopped")
    return status


async def _report(node: Node) -> None:
    """Stream membership and ownership changes to stdout."""
    seen: dict[str, str] = {}
    async for change in node.ownership_changes():
        for m in node.members():
            if seen.get(m.node_id) != m.status:
                seen[m.node_id] = m.status
                if m.node_id != node.node_id:
                    _say(node.node_id, f"member {m.node_id} is {m.status}")
        _say(node.node_id, f"owns {len(node.owned_partitions())} partitions "
                           f"(+{len(change.acquired)} -{len(change.released)}) placement {change.checksum[:12]}")


def cmd_node(args: argparse.Namespace) -> int:
    config, http = config_from_args(args)
    return asyncio.run(serve(config, http))


def _get(url: str, path: str, **params) -> httpx.Response:
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
    """Start N node processes on loopback, stream their output, stop them all on Ctrl-C."""
    if not 1 <= args.nodes <= 64:
        raise InvalidConfigError("--nodes must be between 1 and 64")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop like Ctrl-C: nodes leave
    procs = []
    seed = f"127.0.0.1:{args.gossip_port}"
    for i in range(args.nodes):
        cmd = [sys.executable, "-m", "placement.cli", "node", "--id", f"n{i + 1}",
               "--gossip", f"127.0.0.1:{args.gossip_port + i}", "--http", f"127.0.0.1:{args.http_port + i}",
               "--partitions", str(args.partitions), "--replicas", str(args.replicas)]
        if i:
            cmd += ["--join", seed]
        procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL))
        if i == 0:  # the seed must be up before the others join it
            _wait_healthy(f"http://127.0.0.1:{args.http_port}", procs[0])
    urls = ", ".join(f"http://127.0.0.1:{args.http_port + i}" for i in range(args.nodes))
    print(f"cluster of {args.nodes} nodes; HTTP: {urls}\n"
          f"try: placement members --url http://127.0.0.1:{args.http_port}   (Ctrl-C stops all)", flush=True)
    try:
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        print("a node exited; stopping the cluster", flush=True)
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


def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 20.0) -> None:
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
    node.set_defaults(func=cmd_node)
    for name, func, helptext in (("members", cmd_members, "list the members a node sees"),
                                 ("owners", cmd_owners, "owners of one key")):
        p = sub.add_parser(name, help=helptext)
        if name == "owners":
            p.add_argument("key")
        p.add_argument("--url", default="http://127.0.0.1:8001", help="a node's HTTP URL")
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)
    cluster = sub.add_parser("cluster", help="start a local cluster of node processes on loopback")
    cluster.add_argument("--nodes", type=int, default=5)
    cluster.add_argument("--gossip-port", type=int, default=7001, help="first gossip port (default 7001)")
    cluster.add_argument("--http-port", type=int, default=8001, help="first HTTP port (default 8001)")
    cluster.add_argument("--partitions", type=int, default=4096)
    cluster.add_argument("--replicas", type=int, default=2)
    cluster.set_defaults(func=cmd_cluster)

