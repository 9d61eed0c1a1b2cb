"""Run one node process: its HTTP server, its reports on stdout, its graceful leave on SIGTERM.

``placement node`` and ``placement witness`` (``node_cli``) and ``python -m
placement.service.work_sink`` run a node through ``serve``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import time
from collections.abc import Callable
from typing import Any

from membership.seeds import DnsSeed

from .http_server import advertise_bound_port, bind_error, http_server, listen_http
from .node import Node, NodeConfig
from .workers import PartitionProcessor, PartitionWorkers

#: Builds a node's HTTP app: (node, on_leave) -> ASGI app; on_leave runs after POST /v1/leave.
AppFactory = Callable[[Node, Callable[[], None]], Any]


def _say(node_id: str, text: str) -> None:
    print(f"[{node_id}] {text}", flush=True)


async def serve(config: NodeConfig, http: tuple[str, int] | None,
                worker: Callable[[], PartitionProcessor] | None = None,
                app_factory: AppFactory | None = None) -> int:
    """Run one node until SIGTERM/SIGINT (graceful leave) or POST /v1/leave; with ``worker``,
    one processor per owned partition (``placement.service.workers``). ``app_factory(node,
    on_leave)``: the HTTP app (default ``http_api.create_app`` with the admin token; a work sink
    passes ``work_sink.create_sink_app``). ``http`` None (a witness without ``--http``): no HTTP
    server, and its modules are never imported.

    SIGTERM: the node leaves first - hands its partitions over, answers open long-polls with
    ``503 Leaving``, ends event streams (``Node.leave``) - then its HTTP server stops, waiting at
    most ``http_server.GRACEFUL_SHUTDOWN_S`` for requests still in flight (issue 30)."""
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
    # block of the application loop its lag gauge sees and logs (loop_lag.AppLoopLag).
    server = None
    if http is not None:
        if app_factory is not None:
            app = app_factory(node, done.set)
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
    seeds = ", ".join(str(s) if isinstance(s, DnsSeed) else f"{s[0]}:{s[1]}" for s in node.seeds)
    role = "witness (weight 0: votes, owns nothing) " if config.weight == 0 else ""
    gossip = node.member.core.advertise  # (the port the system chose for --gossip HOST:0)
    _say(config.node_id, f"{role}gossip {gossip[0]}:{gossip[1]} "
                         f"http {config.http_advertise or 'off'} "
                         + (f"joining {seeds}" + (" (the members it last knew; no --join)" if not config.join else "")
                            if seeds else "joining nobody (new cluster)"))
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
