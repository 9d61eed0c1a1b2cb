"""``placement node | witness | members | owners | cluster``: run nodes and look at a running cluster.

Every ``node`` flag can also be set by an environment variable (``PLACEMENT_`` + the flag in
upper case with dashes as underscores, e.g. ``PLACEMENT_GOSSIP_ADVERTISE``; repeatable flags
take a comma-separated list), which is how ``docker-compose.yml`` configures its nodes. A flag
wins over its variable; both go through the same validator (``placement.argtypes``).

``placement witness`` is a member of weight 0 (issue 29): it votes on stable views and leases
when it is one of the view's witnesses, and owns no partitions. It takes the ``node`` flags
except those about work (``WITNESS_REFUSES``: a one-line error each); their variables, which a
settings file shared with the nodes may carry, are not read. ``--http`` is off by default.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import email.utils
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from membership.seeds import DnsSeed
from ownership import ExclusiveConfig

from .. import argtypes
from ..errors import InvalidConfigError, PlacementError
from .node import Node, NodeConfig, read_key_file
from .workers import PartitionProcessor, PartitionWorkers

if TYPE_CHECKING:
    import httpx
    import uvicorn


def _variable(flag: str) -> str:
    return "PLACEMENT_" + flag[2:].replace("-", "_").upper()


@dataclass(frozen=True)
class _NodeFlag:
    """A ``node`` flag and its ``PLACEMENT_*`` variable: command line, else variable, else default."""

    flag: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    many: bool = False  # repeatable; the variable takes a comma-separated list

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    @property
    def variable(self) -> str:
        return _variable(self.flag)

    def resolve(self, given: Any, environ: Mapping[str, str]) -> Any:
        if given is not None:
            return given
        text = environ.get(self.variable)
        if text is None:
            return self.default
        if self.many:
            return [argtypes.env_value(self.variable, v.strip(), self.parse) for v in text.split(",") if v.strip()]
        return argtypes.env_value(self.variable, text, self.parse)


NODE_FLAGS = (
    _NodeFlag("--id", argtypes.member_id, None, "member id, unique in the cluster (required)"),
    _NodeFlag("--gossip", argtypes.host_port, ("127.0.0.1", 7001), "UDP bind HOST:PORT (default 127.0.0.1:7001)"),
    _NodeFlag("--http", argtypes.host_port, ("127.0.0.1", 8001), "HTTP bind HOST:PORT (default 127.0.0.1:8001)"),
    _NodeFlag("--join", argtypes.seed, [], "seed HOST:PORT, or dns:NAME[:PORT] for every address NAME resolves "
              "to, resolved again before each retry (repeatable); none: start a new cluster", many=True),
    _NodeFlag("--join-timeout", argtypes.number(0, 86400), 0.0,
              "seconds to keep trying to join before exiting with status 5 (default 0: keep trying)"),
    _NodeFlag("--gossip-advertise", argtypes.host_port, None,
              "HOST:PORT others use to reach our gossip (required when binding 0.0.0.0)"),
    _NodeFlag("--http-advertise", argtypes.http_url, None, "base URL others use for our HTTP API"),
    _NodeFlag("--weight", argtypes.weight, 1.0, "share of partitions (default 1; 0: owns nothing)"),
    _NodeFlag("--tag", argtypes.key_value, [], "KEY=VALUE (repeatable)", many=True),
    _NodeFlag("--partitions", argtypes.partitions, 4096, "cluster-wide (default 4096)"),
    _NodeFlag("--replicas", argtypes.replicas, 1, "cluster-wide (default 1)"),
    _NodeFlag("--seed", argtypes.hash_seed, 0, "cluster-wide hash seed (default 0)"),
    _NodeFlag("--cluster", argtypes.non_empty, "placement", "cluster name (default placement)"),
    _NodeFlag("--key-file", argtypes.non_empty, None, "gossip encryption keys, one per line (hex/base64)"),
    _NodeFlag("--admin-token", argtypes.non_empty, None, "token required by POST /v1/leave"),
    _NodeFlag("--ownership", argtypes.ownership_mode, "exclusive",
              "exclusive (default: never two owners of a partition) or available (owns what its own view "
              "says at once; two owners possible during splits and freezes)"),
    _NodeFlag("--handoff-timeout", argtypes.number(0, 3600, lo_open=True), 5.0,
              "seconds a released partition may drain before it is handed on anyway (default 5)"),
    _NodeFlag("--worker", argtypes.import_ref, None,
              "MODULE:NAME of a PartitionProcessor factory (placement.service.workers): run one per owned partition"),
)
_WILDCARD_HOSTS = ("0.0.0.0", "::")

#: ``node`` flags a witness does not take, and why (the error it gives).
WITNESS_REFUSES = {
    "--weight": "a witness always has weight 0: it votes but owns no partitions (run `placement node` "
                "for a member that works)",
    "--worker": "a witness owns no partitions, so it runs no partition workers (give --worker to `placement node`)",
    "--work-sink": "a witness takes no work (give --work-sink to `placement node`)",
    "--handoff-timeout": "a witness owns no partitions, so it hands none on",
    "--ownership": "a witness votes in exclusive ownership only (the default); in --ownership available "
                   "nobody votes",
}
#: The witness's flags: the node's, less those above, with HTTP off unless asked for.
WITNESS_FLAGS = tuple(
    replace(f, default=None, help="HTTP bind HOST:PORT for /healthz, /readyz, /metrics and the read-only API "
                                  "(default: none, no HTTP server)") if f.flag == "--http" else f
    for f in NODE_FLAGS if f.flag not in WITNESS_REFUSES)


def add_node_arguments(p: argparse.ArgumentParser, witness: bool = False) -> None:
    """The ``node`` flags (also used by the compose-file test to check its commands parse);
    ``witness``: those of ``placement witness``, and the refused ones as one-line errors.

    Defaults are None here: ``config_from_args`` reads the variables then, not when the parser
    is built, so a bad variable is an error of ``node`` alone, naming the variable."""
    for f in WITNESS_FLAGS if witness else NODE_FLAGS:
        p.add_argument(f.flag, type=f.parse, action="append" if f.many else "store", default=None,
                       help=f"{f.help} [env {f.variable}]")
    if witness:
        for flag, why in WITNESS_REFUSES.items():
            p.add_argument(flag, nargs="?", action=_Refused, why=why, help=argparse.SUPPRESS)


class _Refused(argparse.Action):
    """A flag that makes no sense here: ``placement witness: error: --weight: <why>``."""

    def __init__(self, option_strings: list[str], dest: str, why: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, **kw)
        self.why = why

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser.error(f"{option_string}: {self.why}")


def config_from_args(args: argparse.Namespace,
                     environ: Mapping[str, str] = os.environ) -> tuple[NodeConfig, tuple[str, int]]:
    """``placement node``: the node's config and HTTP bind address."""
    config, http = _config(args, environ, witness=False)
    assert http is not None  # (--http has a default for a node)
    return config, http


def witness_config_from_args(args: argparse.Namespace, environ: Mapping[str, str] = os.environ
                             ) -> tuple[NodeConfig, tuple[str, int] | None]:
    """``placement witness``: weight 0, exclusive ownership; HTTP address None without ``--http``."""
    return _config(args, environ, witness=True)


def _config(args: argparse.Namespace, environ: Mapping[str, str],
            witness: bool) -> tuple[NodeConfig, tuple[str, int] | None]:
    v = {f.dest: f.resolve(getattr(args, f.dest), environ) for f in (WITNESS_FLAGS if witness else NODE_FLAGS)}
    if witness:
        v.update(weight=0.0, ownership="exclusive", handoff_timeout=ExclusiveConfig.handoff_timeout_s)
        if environ.get("PLACEMENT_OWNERSHIP", "exclusive").strip() != "exclusive":
            raise InvalidConfigError(f"PLACEMENT_OWNERSHIP={environ['PLACEMENT_OWNERSHIP']!r}: "
                                     f"{WITNESS_REFUSES['--ownership']}")
    if v["id"] is None:
        raise InvalidConfigError("give the member id with --id ID (or PLACEMENT_ID)")
    gossip, http, advertise = v["gossip"], v["http"], v["gossip_advertise"]
    if advertise is None and gossip[0] in _WILDCARD_HOSTS:
        raise InvalidConfigError(f"--gossip {gossip[0]}:{gossip[1]} binds every interface: give --gossip-advertise "
                                 "HOST:PORT (or PLACEMENT_GOSSIP_ADVERTISE), the address others reach us at")
    if http is None:  # a witness without HTTP: nothing to advertise
        if v["http_advertise"] is not None:
            raise InvalidConfigError("--http-advertise without --http: this witness serves no HTTP; give --http "
                                     "HOST:PORT too (or drop --http-advertise)")
        http_advertise = ""
    else:
        http_host = advertise[0] if advertise else http[0]
        if v["http_advertise"] is None and http_host in _WILDCARD_HOSTS:
            raise InvalidConfigError(f"--http {http[0]}:{http[1]} binds every interface: give --http-advertise URL "
                                     "(or PLACEMENT_HTTP_ADVERTISE), the address others reach us at")
        http_advertise = v["http_advertise"] or f"http://{http_host}:{http[1]}"
    config = NodeConfig(
        node_id=v["id"], gossip_bind=gossip, gossip_advertise=advertise,
        http_advertise=http_advertise, join=tuple(v["join"]),
        weight=v["weight"], tags=dict(v["tag"]), partitions=v["partitions"], replicas=v["replicas"], seed=v["seed"],
        cluster=v["cluster"], keys=_read_keys(v["key_file"]), admin_token=v["admin_token"],
        ownership=v["ownership"], exclusive=ExclusiveConfig(handoff_timeout_s=v["handoff_timeout"]),
        join_timeout_s=v["join_timeout"],
    )
    return config, http


def _read_keys(path: str | None) -> tuple[bytes, ...]:
    if path is None:
        return ()
    try:
        return read_key_file(path)
    except InvalidConfigError as exc:  # "PATH:LINE: what is wrong", PATH as given to the flag
        raise InvalidConfigError(f"--key-file {exc}") from None
    except UnicodeDecodeError:
        raise InvalidConfigError(f"--key-file {path}: not a text file of hex or base64 keys") from None
    except OSError as exc:
        raise InvalidConfigError(f"--key-file {path}: {exc.strerror or exc}") from None


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
    # and what the cluster survives whenever that changes (INFO when all is well).
    logging.basicConfig(format=f"[{config.node_id}] %(levelname)s %(message)s", level=logging.WARNING)
    logging.getLogger("placement.survival").setLevel(logging.INFO)
    sock = _listen_http(http) if http is not None else None
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
        server = http_server(app, http)
    try:
        await node.start()
    except OSError as exc:
        if sock is not None:
            sock.close()
        raise _bind_error("gossip UDP", "--gossip", config.gossip_bind, exc) from None
    workers = PartitionWorkers(node, worker) if worker is not None else None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    seeds = ", ".join(str(s) if isinstance(s, DnsSeed) else f"{s[0]}:{s[1]}" for s in config.join)
    role = "witness (weight 0: votes, owns nothing) " if config.weight == 0 else ""
    _say(config.node_id, f"{role}gossip {config.gossip_advertise or config.gossip_bind} "
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


_Message = MutableMapping[str, Any]  # an ASGI scope or event
_Receive = Callable[[], Awaitable[_Message]]
_Send = Callable[[_Message], Awaitable[None]]
_ASGIApp = Callable[[_Message, _Receive, _Send], Awaitable[None]]


def http_server(app: _ASGIApp, http: tuple[str, int]) -> uvicorn.Server:
    """The node's uvicorn server for ``app`` (start it with ``serve(sockets=[...])``): no
    signal handling, no periodic tick (``_server_class``), the Date header added by ``DateHeader``.
    Its config is loaded here (the protocol modules imported), not when it starts serving."""
    import uvicorn

    config = uvicorn.Config(DateHeader(app), host=http[0], port=http[1], log_level="warning", lifespan="off",
                            date_header=False)
    config.load()
    return _server_class()(config)


class DateHeader:
    """ASGI middleware: a ``Date`` header on every HTTP response, as uvicorn's own would be.

    uvicorn adds the header from a value its ``main_loop`` refreshes on a timer (once a second,
    on a loop that wakes ten times a second); the node's server has no such tick (an idle
    node's application loop wakes for nothing: docs/benchmarks-log.md, "Idle CPU side by side
    with Serf, fifth pass"), so it runs with ``date_header=False`` and the header is made here, when a
    response starts: ``email.utils.formatdate(usegmt=True)`` of the whole second, as uvicorn
    formats it (RFC 9110's IMF-fixdate), computed once per second. A response that has a Date
    of its own keeps it. ``clock``: seconds since the epoch (tests give their own).

    Not dated any more: a 500 that uvicorn sends when the app fails before it starts a response
    (FastAPI's own 500s go through here; RFC 9110 section 6.6.1 makes Date optional on 5xx), and
    websocket handshakes, which the node does not serve. uvicorn's 400 to a request it cannot
    parse never had one with its h11 protocol (the one used here: httptools is not installed),
    which sends it without the default headers."""

    def __init__(self, app: _ASGIApp, clock: Callable[[], float] = time.time) -> None:
        self.app = app
        self._clock = clock
        self._date: tuple[int, bytes] = (-1, b"")  # (second, its header value): replaced whole

    def date(self) -> bytes:
        second = int(self._clock())
        cached = self._date
        if cached[0] != second:
            cached = (second, email.utils.formatdate(second, usegmt=True).encode("ascii"))
            self._date = cached
        return cached[1]

    async def __call__(self, scope: _Message, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_dated(message: _Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                if not any(name.lower() == b"date" for name, _ in headers):
                    message = {**message, "headers": [(b"date", self.date()), *headers]}
            await send(message)

        await self.app(scope, receive, send_dated)


def _server_class() -> type[uvicorn.Server]:
    """Built when a node starts: uvicorn is imported then, not with this module."""
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server without its signal handling and without a periodic tick.

        Signals: we handle them (leave first, then stop). uvicorn >= 0.29 captures SIGINT/SIGTERM
        in serve(), stops serving at once and raises the signal again afterwards: the node then
        saw its HTTP server gone and stopped abruptly.

        Tick: uvicorn's ``main_loop`` wakes every 0.1 s and calls ``on_tick``, which (uvicorn
        0.54) refreshes the default headers (Date and Server) every tenth call, awaits
        ``config.callback_notify`` every ``timeout_notify`` seconds, and returns True to stop
        when ``should_exit`` is set or ``limit_max_requests`` is reached. Ten wake-ups a second
        of an idle node's loop, then one (issue 14: idle CPU); here none. ``on_tick`` runs once
        at the start (it sets the default headers: Server only, as the config has
        ``date_header=False``; the Date header is ``DateHeader``'s) and ``main_loop`` then waits
        for ``should_exit``, an event here, so setting it wakes the server at once. The node
        sets neither ``limit_max_requests`` nor ``callback_notify``, which would need the tick:
        a config that does is refused."""

        def __init__(self, config: uvicorn.Config) -> None:
            if config.limit_max_requests is not None or config.callback_notify is not None:
                raise ValueError("this server has no tick: limit_max_requests and callback_notify are not supported")
            self._exit = asyncio.Event()
            super().__init__(config)

        @property
        def should_exit(self) -> bool:
            return self._exit.is_set()

        @should_exit.setter
        def should_exit(self, value: bool) -> None:
            if value:
                self._exit.set()
            else:
                self._exit.clear()

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        async def main_loop(self) -> None:
            if not await self.on_tick(0):  # the default headers; True if should_exit is already set
                await self._exit.wait()

    return Server


def _bind_error(what: str, flag: str, addr: tuple[str, int], exc: OSError) -> PlacementError:
    return PlacementError(f"cannot bind {what} {addr[0]}:{addr[1]} ({flag} or {_variable(flag)}): "
                          f"{exc.strerror or exc}")


def _listen_http(addr: tuple[str, int]) -> socket.socket:
    """The HTTP listening socket, bound here so a busy or foreign address names ``--http``."""
    try:
        family = socket.getaddrinfo(addr[0], addr[1], type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: rebind in TIME_WAIT
            sock.bind(addr)
            sock.listen(2048)
        except OSError:
            sock.close()
            raise
        return sock
    except OSError as exc:
        raise _bind_error("HTTP", "--http", addr, exc) from None


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
        cmd = [sys.executable, "-m", "placement.service.cli", "node", "--id", f"n{i + 1}",
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

