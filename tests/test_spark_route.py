"""The routing job on Spark: owners equal the library's, delivery to a real 3-node cluster is exact,
and a node leaving between planning and delivery loses and duplicates nothing (421 -> re-route)."""

import json

import pytest

from membership import MembershipConfig
from spark_jobs import route
from spark_jobs.deliver import DeliveryOptions
from spark_jobs.sink import LocalSinkCluster

pytestmark = pytest.mark.slow

FAST = MembershipConfig(probe_interval_s=0.2, probe_timeout_s=0.1, gossip_interval_s=0.05,
                        push_pull_min_interval_s=0.5, join_retry_interval_s=0.2)
P = 256


@pytest.fixture
def cluster():
    c = LocalSinkCluster(3, partitions=P, membership=FAST)
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
