"""The routing job on Spark: owners equal the library's, delivery to a real 3-node cluster is exact,
and membership changes lose and duplicate nothing: a node leaving between planning and delivery
(421 -> re-route), and a node leaving or crashing *during* delivery, after it took some batches."""

import json

import pytest
from fastapi import HTTPException

from membership import MembershipConfig
from placement.service.work_sink import LocalSinkCluster
from spark_jobs import route
from spark_jobs.deliver import DeliveryOptions

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
    counts: dict[str, int] = {}
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


# Membership changes *during* delivery. The victim's WorkLog is hooked so the change happens at an
# exact point of the job - right after the victim accepted its AFTER-th batch - instead of after
# a sleep: the test is deterministic, and exactly AFTER * BATCH items must have reached the victim.
BATCH, AFTER = 100, 3
# Failure detection fast enough for a crash test (suspicion ~0.3-0.6 s instead of >= 3 s).
CRASHY = MembershipConfig(probe_interval_s=0.2, probe_timeout_s=0.1, gossip_interval_s=0.05,
                          push_pull_min_interval_s=0.5, join_retry_interval_s=0.2,
                          suspicion_min_floor_s=0.3, suspicion_max_timeout_mult=2.0)


def hook_after_batches(cluster, victim: int, action):
    """Run ``action()`` on the cluster's loop when node ``victim`` is about to accept its
    (AFTER+1)-th batch; from then on it accepts nothing (503 - the batch stays undelivered)."""
    log = cluster.apps[victim].state.work
    accept = log.accept
    fired: list[bool] = []

    def hooked(batch):
        if log.batches >= AFTER:
            if not fired:
                fired.append(True)
                action()
            raise HTTPException(503, "node going away (test)")
        return accept(batch)

    log.accept = hooked
    return fired


def check_exactly_once(cluster, report, snap, victim: int):
    """Every item reached exactly one node, which led its key when it took it; the report agrees."""
    job = report.job
    got = {node.node_id: dict(app.state.work.received.get(job, {})) for node, app in zip(cluster.nodes, cluster.apps)}
    all_ids = [i for items in got.values() for i in items]
    assert len(all_ids) == len(set(all_ids)) == 3000  # none lost, none at two nodes
    assert sum(app.state.work.duplicates for app in cluster.apps) == 0
    victim_id = cluster.nodes[victim].node_id
    assert len(got[victim_id]) == AFTER * BATCH  # what it took before the change, nothing after
    survivors = [n for i, n in enumerate(cluster.nodes) if i != victim]
    after = survivors[0].table
    assert victim_id not in after.members
    for node_id, items in got.items():
        table = snap.table if node_id == victim_id else after
        assert all(table.lookup(key)[0] == node_id for key in items.values())
    assert report.accounted and report.failed == 0 and report.input_items == 3000
    assert report.per_owner == {m: len(items) for m, items in got.items() if items}
    moved = route_counts(snap, 1000)[victim_id] - AFTER * BATCH
    assert moved > 0 and report.rerouted >= moved


def test_node_leaving_during_delivery_loses_and_duplicates_nothing(spark, items, tmp_path):
    cluster = LocalSinkCluster(3, partitions=P, membership=FAST)
    try:
        snap = route.fetch_snapshot(cluster.urls)
        victim = 2
        fired = hook_after_batches(cluster, victim, lambda: cluster.loop.create_task(cluster.nodes[victim].leave()))
        routed = route.assign_owners(spark, route.read_items(spark, items), "key", snap)
        report = route.deliver(spark, routed, "key", snap, cluster.urls, DeliveryOptions(batch_size=BATCH),
                               work_dir=str(tmp_path))
        assert fired
        check_exactly_once(cluster, report, snap, victim)
        assert report.refreshes >= 1
    finally:
        cluster.close()


def test_node_crashing_during_delivery_loses_and_duplicates_nothing(spark, items, tmp_path):
    """The victim dies without a word: POSTs to it fail (503, then connection refused) and are
    retried with backoff until the survivors have declared it dead and own its partitions."""
    cluster = LocalSinkCluster(3, partitions=P, membership=CRASHY)
    try:
        snap = route.fetch_snapshot(cluster.urls)
        victim = 1
        fired = hook_after_batches(cluster, victim, lambda: cluster.crash(victim))
        routed = route.assign_owners(spark, route.read_items(spark, items), "key", snap)
        # Enough attempts to outlast failure detection (deadline ~15 s of backoff, not a sleep).
        options = DeliveryOptions(batch_size=BATCH, max_attempts=40, backoff_s=0.05, backoff_max_s=0.4)
        report = route.deliver(spark, routed, "key", snap, cluster.urls, options, work_dir=str(tmp_path))
        assert fired
        check_exactly_once(cluster, report, snap, victim)
        assert report.retries >= 1
    finally:
        cluster.close()
