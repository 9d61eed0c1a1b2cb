"""The routing job on Spark: owners equal the library's, delivery to a real 3-node cluster is exact,
and a node leaving between planning and delivery loses and duplicates nothing (421 -> re-route)."""

import asyncio
import json
import socket
import threading
import time

import pytest

from membership import MembershipConfig
from placement.node import Node, NodeConfig
from spark_jobs import route
from spark_jobs.deliver import DeliveryOptions
from spark_jobs.sink import create_sink_app

pytestmark = pytest.mark.slow

FAST = MembershipConfig(probe_interval_s=0.2, probe_timeout_s=0.1, gossip_interval_s=0.05,
                        push_pull_min_interval_s=0.5, join_retry_interval_s=0.2)
P = 256


class SinkCluster:
    """In-process Nodes, each serving a sink app with uvicorn on a loopback port, on one event loop
    in a background thread (Spark's Python workers are other processes and reach them over HTTP)."""

    def __init__(self, n):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.nodes, self.apps, self.servers, self.urls = [], [], [], []
        self.call(self._start(n))

    def call(self, coro, timeout_s=30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    async def _start(self, n):
        import uvicorn

        for i in range(n):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{sock.getsockname()[1]}"
            join = (self.nodes[0].member.bound,) if self.nodes else ()
            node = await Node(NodeConfig(f"n{i + 1}", gossip_bind=("127.0.0.1", 0), join=join, partitions=P,
                                         settle_s=0.0, membership=FAST, http_advertise=url)).start()
            app = create_sink_app(node)
            server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
            self.loop.create_task(server.serve(sockets=[sock]))
            self.nodes.append(node)
            self.apps.append(app)
            self.servers.append(server)
            self.urls.append(url)
        await self.converged(n)

    async def converged(self, n, nodes=None, timeout_s=15):
        nodes = nodes or self.nodes
        deadline = time.monotonic() + timeout_s
        while not (all(len(x.table.members) == n for x in nodes) and len({x.table.checksum for x in nodes}) == 1
                   and all(s.started for s in self.servers)):
            assert time.monotonic() < deadline, "cluster did not converge"
            await asyncio.sleep(0.02)

    def received(self, job):
        return {n.node_id: app.state.work.count(job) for n, app in zip(self.nodes, self.apps)}

    def close(self):
        async def stop():
            for server in self.servers:
                server.should_exit = True
            for node in self.nodes:
                await node.leave(timeout_s=0.5)
        self.call(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def cluster():
    c = SinkCluster(3)
    yield c
    c.close()


@pytest.fixture(scope="module")
def items(spark, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("items") / "items.parquet")
    route.write_sample(spark, path, 3000, distinct_keys=1000)  # keys repeat: 3 items per key
    return path


def test_owner_columns_equal_the_library_row_for_row(spark, tmp_path):
    members = tmp_path / "members.json"
    members.write_text(json.dumps({"a": 1.0, "b": 2.0, "c": 0.5, "d": 1.0}))
    snap = route.offline_snapshot(str(members), partitions=1000, replicas=2, seed=7)
    csv = str(tmp_path / "items.csv")
    keys = [f"k{i}" for i in range(500)] + ["ünïcode-ключ", "", "42"]
    spark.createDataFrame([(k, i) for i, k in enumerate(keys)] + [(None, -1)], "key string, n long") \
        .coalesce(1).write.option("header", "true").csv(csv)
    rows = route.assign_owners(spark, route.read_items(spark, csv), "key", snap).collect()
    table = snap.table
    assert len(rows) == len(keys) + 1
    for r in rows:
        if r.key is None:  # CSV reads "" back as null too: a null key has no owner
            assert r.partition is None and r.owner is None
        else:
            assert (r.partition, r.owner) == (table.partition_of(r.key), table.lookup(r.key)[0])


def test_output_mode_writes_one_folder_per_owner(spark, items, tmp_path):
    members = tmp_path / "members.json"
    members.write_text(json.dumps({"n1": 1.0, "n2": 1.0}))
    snap = route.offline_snapshot(str(members), partitions=P)
    routed = route.assign_owners(spark, route.read_items(spark, items), "key", snap)
    report = route.write_by_owner(spark, routed, "key", snap, str(tmp_path / "out"))
    assert sorted(p.name for p in (tmp_path / "out").glob("owner=*")) == ["owner=n1", "owner=n2"]
    assert report.accounted and report.input_items == 3000 and sum(report.per_owner.values()) == 3000


def test_delivery_to_three_nodes_is_exact(spark, items, cluster, tmp_path):
    snap = route.fetch_snapshot(cluster.urls)
    routed = route.assign_owners(spark, route.read_items(spark, items), "key", snap)
    report = route.deliver(spark, routed, "key", snap, cluster.urls, DeliveryOptions(batch_size=200),
                           work_dir=str(tmp_path))
    expected = {m: 0 for m in snap.table.members}
    for k, n in route_counts(snap, 1000).items():
        expected[k] += n
    assert report.accounted and report.failed == 0 and report.rerouted == 0
    assert report.per_owner == expected == cluster.received(report.job)
    assert report.batches >= 3000 // 200


def route_counts(snap, distinct):
    counts = {}
    for i in range(distinct):
        owner = snap.table.lookup(f"item-{i}")[0]
        counts[owner] = counts.get(owner, 0) + 3
    return counts


def test_node_leaving_after_planning_loses_and_duplicates_nothing(spark, items, cluster, tmp_path):
    snap = route.fetch_snapshot(cluster.urls)
    routed = route.assign_owners(spark, route.read_items(spark, items), "key", snap)
    leaver, rest = cluster.nodes[2], cluster.nodes[:2]
    cluster.call(leaver.leave())  # its HTTP server keeps answering: 421 for everything
    cluster.call(cluster.converged(2, rest))
    report = route.deliver(spark, routed, "key", snap, cluster.urls, DeliveryOptions(batch_size=200),
                           work_dir=str(tmp_path))
    received = cluster.received(report.job)
    assert report.accounted and report.failed == 0 and report.input_items == 3000
    assert received["n3"] == 0 and sum(received.values()) == 3000
    assert report.rerouted == route_counts(snap, 1000)["n3"] and report.refreshes >= 1
    assert sum(app.state.work.duplicates for app in cluster.apps) == 0
    after = rest[0].table
    assert report.per_owner == {m: n for m, n in received.items() if n} == route_counts(
        type(snap)(after, {}), 1000)
