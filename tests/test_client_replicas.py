"""Replica-aware requests of the client library, sync and async, against httpx.MockTransport.

Three members a, b, c with replicas = 3, so every key has all three; the mock serves the
placement snapshot and answers (or fails) per host, and records where each request went. The
clients retry nothing past their first round (``NO_RETRIES``): the retries until a deadline are
``tests/test_client_core.py``'s, on a fake clock."""

import asyncio
import collections

import httpx
import pytest

from placement.client import (
    CHECKSUM_HEADER,
    AsyncPlacementClient,
    NoReplicaReachableError,
    PlacementClient,
    RetryPolicy,
)
from placement.snapshot import PlacementSnapshot
from placement.table import PlacementTable

KEY = "order-42"
NO_RETRIES = RetryPolicy(deadline_s=0)


def snapshot(members):
    table = PlacementTable.build(dict.fromkeys(members, 1.0), partitions=64, replicas=3)
    return PlacementSnapshot(table, {m: f"http://{m}.test" for m in members})


class Cluster:
    """The mock's state: which snapshot the nodes serve, which hosts are down or misdirect."""

    def __init__(self):
        self.snap = snapshot("abc")
        self.down: set[str] = set()
        self.misdirect: set[str] = set()
        self.hits: collections.Counter[str] = collections.Counter()
        self.sent_checksums = []

    def handle(self, request):
        host = request.url.host.split(".")[0]
        if request.url.path == "/v1/placement":
            return httpx.Response(200, content=self.snap.to_msgpack())
        if host in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        self.hits[host] += 1
        self.sent_checksums.append(request.headers[CHECKSUM_HEADER])
        if host in self.misdirect:
            return httpx.Response(421, headers={CHECKSUM_HEADER: self.snap.checksum})
        return httpx.Response(200, json={"served_by": host}, headers={CHECKSUM_HEADER: self.snap.checksum})

    @property
    def owners(self):
        return self.snap.table.lookup(KEY)


class SyncDriver:
    def __init__(self, cluster):
        self.client = PlacementClient("http://a.test", refresh=False, transport=httpx.MockTransport(cluster.handle),
                                      retry=NO_RETRIES)

    def request(self, method, idempotent):
        return self.client.request(method, KEY, "/thing", idempotent=idempotent)

    def close(self):
        self.client.close()


class AsyncDriver:
    def __init__(self, cluster):
        self.loop = asyncio.new_event_loop()
        self.client = self.loop.run_until_complete(AsyncPlacementClient.connect(
            "http://a.test", refresh=False, transport=httpx.MockTransport(cluster.handle), retry=NO_RETRIES))

    def request(self, method, idempotent):
        return self.loop.run_until_complete(self.client.request(method, KEY, "/thing", idempotent=idempotent))

    def close(self):
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


@pytest.fixture(params=[SyncDriver, AsyncDriver], ids=["sync", "async"])
def setup(request):
    cluster = Cluster()
    driver = request.param(cluster)
    yield cluster, driver
    driver.close()


def test_idempotent_requests_spread_over_every_replica(setup):
    cluster, driver = setup
    for _ in range(30):
        assert driver.request("GET", idempotent=True).status_code == 200
    assert cluster.hits == {"a": 10, "b": 10, "c": 10}
    assert set(cluster.sent_checksums) == {cluster.snap.checksum}


def test_idempotent_requests_fail_over_past_an_unreachable_replica(setup):
    cluster, driver = setup
    cluster.down = {cluster.owners[0]}
    served = [driver.request("GET", idempotent=True).json()["served_by"] for _ in range(12)]
    assert set(served) == set(cluster.owners[1:]) and cluster.owners[0] not in cluster.hits
    cluster.down = set(cluster.owners)
    with pytest.raises(NoReplicaReachableError, match="no answer from the replicas of 'order-42'") as err:
        driver.request("GET", idempotent=True)
    assert all(f"http://{m}.test: ConnectError" in str(err.value) for m in "abc")


def test_other_requests_go_to_the_leader_and_are_not_sent_elsewhere(setup):
    cluster, driver = setup
    for _ in range(5):
        assert driver.request("POST", idempotent=False).json()["served_by"] == cluster.owners[0]
    assert cluster.hits == {cluster.owners[0]: 5}
    cluster.down = {cluster.owners[0]}
    with pytest.raises(NoReplicaReachableError, match="no answer from the leader"):  # (not sent: no connection)
        driver.request("POST", idempotent=False)
    assert sum(cluster.hits.values()) == 5  # no replica got the write


def test_a_421_refreshes_the_snapshot_and_follows_the_new_leader_once(setup):
    cluster, driver = setup
    old_leader = cluster.owners[0]
    cluster.misdirect = {old_leader}
    cluster.snap = snapshot([m for m in "abcd" if m != old_leader])  # the leader left, d joined
    new_leader = cluster.owners[0]
    r = driver.request("POST", idempotent=False)
    assert r.status_code == 200 and r.json()["served_by"] == new_leader
    assert cluster.hits == {old_leader: 1, new_leader: 1}
    assert cluster.sent_checksums[-1] == cluster.snap.checksum  # the retry carries the new placement

    cluster.misdirect = {new_leader}  # misdirected again after a refresh: returned, not looped
    cluster.hits.clear()
    assert driver.request("POST", idempotent=False).status_code == 421
    assert cluster.hits == {new_leader: 2}


def test_an_idempotent_421_also_refreshes_once(setup):
    cluster, driver = setup
    cluster.misdirect = set("abc")
    assert driver.request("GET", idempotent=True).status_code == 421
    assert sum(cluster.hits.values()) == 2
