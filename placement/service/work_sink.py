"""A work sink: a node's HTTP API plus ``POST /v1/work``, the endpoint ``spark-route --deliver`` calls.

The delivery contract (what any receiving application implements):

    POST {owner_http}/v1/work
    X-Placement-Checksum: <checksum of the placement the batch was routed with>
    {"job": "<run id>", "checksum": "<same>", "items": [{"id": 17, "key": "order-42", "data": {...}}, ...]}

* ``200 {"accepted": n, "duplicates": d}``: the node leads the partition of *every* key in the
  batch and has taken all of them. The response carries the node's own placement checksum in
  ``X-Placement-Checksum``; if it differs from the request's the sender refreshes its snapshot
  for later batches (these items are delivered: the receiver checked ownership itself).
* ``421 Misdirected Request``: the node does not lead some key; it took *none* of
  the batch, so the sender refreshes its snapshot and re-routes the whole batch. All-or-nothing
  keeps the accounting exact: an item is delivered by exactly one 200.
* ``503`` with ``Retry-After``: the node leads some key's partition but does not hold it (a
  handoff under way and not done within ``guard.HANDOFF_WAIT_S``, ownership paused, or the
  node is leaving: its leave is not announced yet); it took none of the batch; the sender
  retries later.
* Receivers are idempotent on ``(job, id)``: a retry after a lost response, or a Spark task
  retried after a failure, re-sends items the receiver already has; it counts them as
  duplicates and does not process them again.

Run one as an example (same flags as ``placement node``)::

    python -m placement.service.work_sink --id n1 --gossip 127.0.0.1:7001 --http 127.0.0.1:8001 [--journal n1.jsonl]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
from collections import Counter
from typing import Any

from fastapi import FastAPI, Response
from pydantic import BaseModel, Field

from placement.client import CHECKSUM_HEADER
from placement.errors import PlacementError
from placement.service.guard import Misdirected, NotYetOwned, hold
from placement.service.http_api import create_app
from placement.service.key_rules import MAX_KEY_CHARS
from placement.service.node import Node

WORK_PATH = "/v1/work"


class WorkItem(BaseModel):
    id: int
    key: str = Field(min_length=1, max_length=MAX_KEY_CHARS)  # the rule of every route (guard.key_error)
    data: dict[str, Any] = Field(default_factory=dict)


class WorkBatch(BaseModel):
    job: str = Field(min_length=1, max_length=128)
    checksum: str = ""
    items: list[WorkItem]


class WorkLog:
    """What a sink received: item ids per job (for idempotence) and counters. Thread-safe.

    With a ``journal`` path, every accepted batch is also appended there as one JSON line
    (``{"job", "items": [[id, key], ...new items], "duplicates": d}``) and flushed *before* the
    200 is sent: what a sink acknowledged survives a ``kill -9`` of its process (not a power
    loss: there is no fsync), so its own counts can be checked against a job's report after it
    died. ``read_journal`` sums such a file up.
    """

    def __init__(self, journal: str | None = None) -> None:
        self._lock = threading.Lock()
        self.received: dict[str, dict[int, str]] = {}  # job -> item id -> key
        self.duplicates = 0
        self.batches = 0
        self.misdirected_batches = 0
        self._journal = open(journal, "a", encoding="utf-8") if journal else None  # open while the sink runs

    def accept(self, batch: WorkBatch) -> tuple[int, int]:
        with self._lock:
            seen = self.received.setdefault(batch.job, {})
            new = []
            for item in batch.items:
                if item.id not in seen:
                    seen[item.id] = item.key
                    new.append(item)
            self.batches += 1
            self.duplicates += len(batch.items) - len(new)
            if self._journal is not None:
                self._journal.write(json.dumps({"job": batch.job, "items": [[it.id, it.key] for it in new],
                                                "duplicates": len(batch.items) - len(new)}) + "\n")
                self._journal.flush()
            return len(new), len(batch.items) - len(new)

    def misdirected(self) -> None:
        with self._lock:
            self.misdirected_batches += 1

    def count(self, job: str) -> int:
        with self._lock:
            return len(self.received.get(job, {}))

    def keys(self, job: str) -> Counter:
        with self._lock:
            return Counter(self.received.get(job, {}).values())


def read_journal(path: str, job: str) -> tuple[dict[int, str], int]:
    """What a ``WorkLog`` journal says a sink took for ``job``: ({item id: key}, duplicates).

    A last line cut short by a kill is ignored (it was not flushed, so never acknowledged)."""
    items: dict[int, str] = {}
    duplicates = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if entry["job"] == job:
                items.update((int(i), key) for i, key in entry["items"])
                duplicates += entry["duplicates"]
    return items, duplicates


def create_sink_app(node: Node, log: WorkLog | None = None, **create_app_kwargs: Any) -> FastAPI:
    """``create_app(node)`` plus ``POST /v1/work``; received items go to ``log`` (``app.state.work``)."""
    app = create_app(node, **create_app_kwargs)
    app.state.work = log = log if log is not None else WorkLog()

    @app.post(WORK_PATH)
    async def work(batch: WorkBatch, response: Response) -> dict[str, int]:
        for item in batch.items:
            try:
                await hold(node, item.key, WORK_PATH)  # the guard's rule: held, 421 or 503
            except (Misdirected, NotYetOwned):
                log.misdirected()
                raise
        accepted, duplicates = log.accept(batch)
        for item in batch.items:  # the work done per partition (load-aware weights plan from it)
            node.record_load(node.table.partition_of(item.key))
        response.headers[CHECKSUM_HEADER] = node.table.checksum
        return {"accepted": accepted, "duplicates": duplicates}

    return app


def sink_app_factory(admin_token: str | None, log: WorkLog | None = None):
    """``node_serve.serve``'s ``app_factory`` for a work sink recording into ``log``."""

    def make(node: Node, on_leave) -> FastAPI:
        return create_sink_app(node, log, admin_token=admin_token, on_leave=on_leave)

    return make


class LocalSinkCluster:
    """``n`` in-process nodes on loopback, each serving ``create_sink_app``, on one event loop in
    a background thread: for tests, benchmarks and demos (Spark's Python workers are separate
    processes and reach them over HTTP like any remote node)."""

    def __init__(self, n: int, partitions: int = 256, membership=None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="sink-cluster", daemon=True)
        self.thread.start()
        self.nodes: list[Node] = []
        self.apps: list[FastAPI] = []
        self.servers: list[Any] = []
        self.urls: list[str] = []
        self._crashed: set[int] = set()
        self.call(self._start(n, partitions, membership))

    def call(self, coro, timeout_s: float = 30.0):
        """Run ``coro`` on the cluster's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    async def _start(self, n: int, partitions: int, membership) -> None:
        import socket

        import uvicorn

        from placement.service.node import NodeConfig

        extra = {"membership": membership} if membership is not None else {}
        for i in range(n):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{sock.getsockname()[1]}"
            join = (self.nodes[0].member.bound,) if self.nodes else ()
            node = await Node(NodeConfig(f"n{i + 1}", gossip_bind=("127.0.0.1", 0), join=join, partitions=partitions,
                                         new_cluster=not join, settle_s=0.0, http_advertise=url, **extra)).start()
            app = create_sink_app(node)
            server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
            self.loop.create_task(server.serve(sockets=[sock]))
            self.nodes.append(node)
            self.apps.append(app)
            self.servers.append(server)
            self.urls.append(url)
        await self.converged(n)

    async def converged(self, n: int, nodes: list[Node] | None = None, timeout_s: float = 15.0) -> None:
        """Wait until ``nodes`` (default all) see ``n`` members, agree, each hold exactly the
        partitions it leads (exclusive ownership moves by handoff, a little after the views agree;
        "every partition held once" alone is also true while the first node still holds them all),
        and every server listens."""
        nodes = nodes or self.nodes

        def owned_once() -> bool:
            return all(set(x.owned_partitions()) == set(x.table.owned_by(x.node_id, leader_only=True)) for x in nodes)

        deadline = asyncio.get_running_loop().time() + timeout_s
        while not (all(len(x.table.members) == n for x in nodes) and len({x.table.checksum for x in nodes}) == 1
                   and owned_once() and all(s.started for s in self.servers)):
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"sink cluster did not converge to {n} members in {timeout_s} s")
            await asyncio.sleep(0.02)

    def crash(self, i: int) -> None:
        """Node ``i`` dies abruptly: its HTTP server stops listening and its gossip stops without a
        leave, so the others only learn of it by failure detection. Call on the cluster's loop
        (e.g. from a request handler) or through ``call_soon``; ``close`` then skips it."""
        self.servers[i].should_exit = True
        self.nodes[i].close()
        self._crashed.add(i)

    def received(self, job: str) -> dict[str, int]:
        """Distinct items each node took for ``job``."""
        return {node.node_id: app.state.work.count(job) for node, app in zip(self.nodes, self.apps)}

    def close(self) -> None:
        async def stop() -> None:
            for server in self.servers:
                server.should_exit = True
            for i, node in enumerate(self.nodes):
                if i not in self._crashed:
                    await node.leave(timeout_s=0.5)

        self.call(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def main(argv: list[str] | None = None) -> int:
    from placement.service.node_flags import add_node_arguments, config_from_args

    parser = argparse.ArgumentParser(prog="python -m placement.service.work_sink", description=__doc__.split("\n\n")[0])
    add_node_arguments(parser)
    parser.add_argument("--journal", metavar="FILE",
                        help="append every accepted batch here as a JSON line, flushed before the 200")
    args = parser.parse_args(argv)
    try:
        config, (host, port) = config_from_args(args)
        log = WorkLog(args.journal)
    except PlacementError as exc:
        parser.error(str(exc))
    except OSError as exc:
        parser.error(f"--journal {args.journal}: {exc.strerror or exc}")

    # As ``placement node --work-sink`` (issue 30): on SIGTERM/SIGINT it leaves first (hands its
    # partitions over, answers its long-polls and event streams), then stops its HTTP server.
    from placement.service.node_serve import serve

    print(f"[{config.node_id}] sink on http://{host}:{port}{WORK_PATH}", flush=True)
    return asyncio.run(serve(config, (host, port), app_factory=sink_app_factory(config.admin_token, log)))


if __name__ == "__main__":
    raise SystemExit(main())
