"""The client core (``placement.client.core``) driven by hand, and its two shells side by side.

The core is run here by ``drive``, a dozen lines doing what the shells do, with a fake node set
that answers each ``Call`` from a table in memory: no sockets, no httpx client, no threads. The
step lists asserted below are the exact requests a client makes. The last test runs the real
sync and async clients against one script of answers and checks that they send the same
requests in the same order, and come to the same results.
"""

from __future__ import annotations

import asyncio
import itertools
import re

import httpx
import pytest

from placement.client import AsyncPlacementClient, PlacementClient
from placement.client.core import (
    CHECKSUM_HEADER,
    Call,
    ClientCore,
    Done,
    NoNodeReachableError,
    NoReplicaReachableError,
    Outcome,
    Pause,
    advance,
)
from placement.snapshot import PlacementSnapshot
from placement.table import PlacementTable

KEY = "order-42"


def snapshot(members, addressed=None):
    table = PlacementTable.build(dict.fromkeys(members, 1.0), partitions=64, replicas=3)
    addressed = members if addressed is None else addressed
    return PlacementSnapshot(table, {m: f"http://{m}.test" for m in addressed})


@pytest.fixture(autouse=True)
def spread_from_zero(monkeypatch):
    """Idempotent requests start at the first replica: the orders below are exact."""
    monkeypatch.setattr(ClientCore, "_spread", itertools.count())


class Nodes:
    """Fake nodes: serve ``snap`` at /v1/placement; hosts in ``down`` refuse connections,
    hosts in ``misdirect`` answer 421, the rest 200 with ``checksum`` (default: the snapshot's)."""

    def __init__(self, snap):
        self.snap = snap
        self.down: set[str] = set()
        self.misdirect: set[str] = set()
        self.checksum: str | None = None
        self.broken_placement: set[str] = set()

    def answer(self, call: Call) -> httpx.Response:
        request = httpx.Request(call.method, call.url)
        host = request.url.host.split(".")[0]
        if host in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.path == "/v1/placement":
            if host in self.broken_placement:
                return httpx.Response(503, request=request)
            return httpx.Response(200, content=self.snap.to_msgpack(), request=request)
        status = 421 if host in self.misdirect else 200
        return httpx.Response(status, headers={CHECKSUM_HEADER: self.checksum or self.snap.checksum},
                              json={"served_by": host}, request=request)

    @property
    def owners(self):
        return self.snap.table.lookup(KEY)


class Driver:
    """Runs plans as a shell does; ``steps`` is every step the plans yielded, in order."""

    def __init__(self, nodes: Nodes):
        self.nodes = nodes
        self.steps: list[Call | Pause] = []

    def run(self, plan):
        outcome: Outcome = None
        while not isinstance(step := advance(plan, outcome), Done):
            self.steps.append(step)
            if isinstance(step, Pause):
                outcome = None
                continue
            try:
                outcome = self.nodes.answer(step)
            except httpx.HTTPError as exc:
                outcome = exc
        return step.value

    def calls(self):
        """(method, URL, checksum header) of each call, then forget them."""
        out = [(s.method, s.url, dict(s.options.get("headers", {})).get(CHECKSUM_HEADER))
               for s in self.steps if isinstance(s, Call)]
        self.steps.clear()
        return out


def connected(nodes, urls=("http://a.test",)):
    core, driver = ClientCore(list(urls)), Driver(nodes)
    driver.run(core.refresh())
    driver.steps.clear()
    return core, driver


def test_refresh_tries_the_urls_in_turn_and_asks_the_one_that_answered_first_next_time():
    nodes = Nodes(snapshot("abc"))
    nodes.down = {"x"}
    core, driver = ClientCore(["http://x.test", "http://b.test/"]), Driver(nodes)
    assert driver.run(core.refresh()).checksum == nodes.snap.checksum == core.snapshot.checksum
    assert driver.calls() == [("GET", "http://x.test/v1/placement", None), ("GET", "http://b.test/v1/placement", None)]
    assert core.urls == ["http://b.test", "http://x.test"]
    driver.run(core.refresh())
    assert driver.calls() == [("GET", "http://b.test/v1/placement", None)]


def test_refresh_names_every_url_when_none_answers_with_a_snapshot():
    nodes = Nodes(snapshot("abc"))
    nodes.down, nodes.broken_placement = {"x"}, {"y"}
    core, driver = ClientCore(["http://x.test", "http://y.test"]), Driver(nodes)
    with pytest.raises(NoNodeReachableError, match="no node answered a placement request") as err:
        driver.run(core.refresh())
    assert "http://x.test: connection refused" in str(err.value)
    assert "http://y.test: Server error '503" in str(err.value)
    assert len(driver.calls()) == 2


def test_an_idempotent_request_fails_over_along_the_replica_set():
    nodes = Nodes(snapshot("abc"))
    core, driver = connected(nodes)
    a, b, c = nodes.owners
    nodes.down = {a}
    response = driver.run(core.request("GET", KEY, "/thing", idempotent=True))
    assert response.json() == {"served_by": b}
    checksum = nodes.snap.checksum
    assert driver.calls() == [("GET", f"http://{a}.test/thing", checksum), ("GET", f"http://{b}.test/thing", checksum)]

    nodes.down = {a, b, c}  # the next request starts at the next replica, and reaches none
    with pytest.raises(NoReplicaReachableError, match="no answer from the replicas of 'order-42'"):
        driver.run(core.request("GET", KEY, "/thing", idempotent=True))
    assert [url for _, url, _ in driver.calls()] == [f"http://{m}.test/thing" for m in (b, c, a)]


def test_a_request_that_is_not_idempotent_goes_to_the_leader_only():
    nodes = Nodes(snapshot("abc"))
    core, driver = connected(nodes)
    leader = nodes.owners[0]
    nodes.down = {leader}
    with pytest.raises(httpx.ConnectError):
        driver.run(core.request("POST", KEY, "/thing", json={"x": 1}))
    (call,) = [s for s in driver.steps if isinstance(s, Call)]
    assert call.url == f"http://{leader}.test/thing" and call.options["json"] == {"x": 1}


def test_a_421_refreshes_the_snapshot_and_retries_on_the_new_leader_once():
    nodes = Nodes(snapshot("abc"))
    core, driver = connected(nodes, urls=("http://a.test", "http://b.test"))
    old, old_checksum = nodes.owners[0], nodes.snap.checksum
    nodes.misdirect = {old}
    nodes.snap = snapshot([m for m in "abcd" if m != old])  # the leader left, d joined
    new = nodes.owners[0]
    response = driver.run(core.request("POST", KEY, "/thing"))
    assert response.status_code == 200 and response.json() == {"served_by": new}
    assert driver.calls() == [("POST", f"http://{old}.test/thing", old_checksum),
                              ("GET", "http://a.test/v1/placement", None),
                              ("POST", f"http://{new}.test/thing", nodes.snap.checksum)]

    nodes.misdirect = {new}  # misdirected again after the refresh: the 421 is the answer
    assert driver.run(core.request("POST", KEY, "/thing")).status_code == 421
    assert [method for method, _, _ in driver.calls()] == ["POST", "GET", "POST"]


def test_another_checksum_in_a_200_also_refreshes_once():
    nodes = Nodes(snapshot("abc"))
    core, driver = connected(nodes)
    nodes.checksum = "f" * 64  # the node runs on a placement this client has not seen
    assert driver.run(core.request("GET", KEY, "/thing", idempotent=True)).status_code == 200
    assert [method for method, _, _ in driver.calls()] == ["GET", "GET", "GET"]  # request, refresh, request


def test_a_refresh_that_reaches_no_node_ends_the_request():
    nodes = Nodes(snapshot("abc"))
    core, driver = connected(nodes)
    nodes.misdirect, nodes.broken_placement = {nodes.owners[0]}, {"a"}
    with pytest.raises(NoNodeReachableError, match=re.escape("http://a.test: Server error '503")):
        driver.run(core.request("POST", KEY, "/thing"))
    assert [method for method, _, _ in driver.calls()] == ["POST", "GET"]


def test_replicas_without_an_address_are_skipped_and_named():
    nodes = Nodes(snapshot("abc", addressed="a"))
    core, driver = connected(nodes)
    nodes.down = {"a"}
    with pytest.raises(NoReplicaReachableError) as err:
        driver.run(core.request("GET", KEY, "/thing", idempotent=True))
    assert str(err.value).count("a replica without an HTTP address") == 2
    assert [url for _, url, _ in driver.calls()] == ["http://a.test/thing"]


def test_poll_long_polls_past_the_current_etag_and_pauses_while_every_node_is_down():
    nodes = Nodes(snapshot("abc"))
    core, driver = connected(nodes)
    etag = core.snapshot.etag
    nodes.snap = snapshot("abcd")
    assert driver.run(core.poll()) is None
    (call,) = driver.steps
    assert call == Call("GET", "http://a.test/v1/placement", {"params": {"after": etag, "wait": 25.0}, "timeout": 35.0})
    assert core.snapshot.checksum == nodes.snap.checksum
    driver.steps.clear()

    nodes.down = {"a"}
    assert driver.run(core.poll()) is None
    assert [type(s) for s in driver.steps] == [Call, Pause] and driver.steps[-1] == Pause(1.0)
    assert core.snapshot.checksum == nodes.snap.checksum  # kept


# ----- the shells: one script of answers, the same requests --------------------------------
class Script:
    """Answers requests in the order they arrive, from a fixed list, and records them."""

    def __init__(self, first, second):
        self.seen: list[tuple[str, str, str | None, str]] = []
        self.answers = [
            "down",  # connect: the first URL refuses
            first,  # ... the second serves the snapshot
            "down", "ok",  # an idempotent GET: the first replica refuses, the next answers
            "421", second, "ok",  # a POST misdirected: refresh (the new snapshot), retry
            "down",  # a POST whose leader refuses: raised, not sent elsewhere
        ]

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.method, str(request.url), request.headers.get(CHECKSUM_HEADER),
                          request.content.decode()))
        answer = self.answers.pop(0)
        if answer == "down":
            raise httpx.ConnectError("connection refused", request=request)
        if isinstance(answer, PlacementSnapshot):
            return httpx.Response(200, content=answer.to_msgpack())
        return httpx.Response(int(answer.replace("ok", "200")), json={})


#: What a client is asked to do: (method, idempotent) requests for KEY, each with a JSON body.
SCENARIO = [("GET", True), ("POST", False), ("POST", False)]


def run_sync(script, urls):
    results: list[int | str] = []
    with PlacementClient(urls, refresh=False, transport=httpx.MockTransport(script.handle)) as client:
        for method, idempotent in SCENARIO:
            try:
                results.append(client.request(method, KEY, "/thing", idempotent=idempotent, json={"n": 1}).status_code)
            except httpx.HTTPError as exc:
                results.append(type(exc).__name__)
    return results


def run_async(script, urls):
    async def main():
        results: list[int | str] = []
        client = await AsyncPlacementClient.connect(urls, refresh=False, transport=httpx.MockTransport(script.handle))
        async with client:
            for method, idempotent in SCENARIO:
                try:
                    response = await client.request(method, KEY, "/thing", idempotent=idempotent, json={"n": 1})
                    results.append(response.status_code)
                except httpx.HTTPError as exc:
                    results.append(type(exc).__name__)
        return results

    return asyncio.run(main())


def test_the_sync_and_async_clients_send_the_same_requests_for_the_same_answers(monkeypatch):
    first, second = snapshot("abc"), snapshot("bcd")
    urls = ["http://x.test", "http://y.test"]
    runs = []
    for run in (run_sync, run_async):
        monkeypatch.setattr(ClientCore, "_spread", itertools.count())
        script = Script(first, second)
        runs.append((run(script, urls), script.seen))
        assert script.answers == []  # every scripted answer was used
    (sync_results, sync_seen), (async_results, async_seen) = runs
    assert sync_results == async_results == [200, 200, "ConnectError"]
    assert sync_seen == async_seen
    assert [(method, url.split("/")[3]) for method, url, _, _ in sync_seen] == [
        ("GET", "v1"), ("GET", "v1"), ("GET", "thing"), ("GET", "thing"), ("POST", "thing"), ("GET", "v1"),
        ("POST", "thing"), ("POST", "thing")]
