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
    OutcomeUnknownError,
    Pause,
    RetryPolicy,
    advance,
)
from placement.errors import PlacementError
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
    hosts in ``misdirect`` answer 421, hosts in ``unavailable`` 503 with that ``Retry-After``
    (None: none), hosts in ``lost`` drop the connection after the request (outcome unknown), the
    rest 200 with ``checksum`` (default: the snapshot's)."""

    def __init__(self, snap):
        self.snap = snap
        self.down: set[str] = set()
        self.lost: set[str] = set()
        self.unavailable: dict[str, str | None] = {}
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
        if host in self.lost:
            raise httpx.ReadError("connection reset by peer", request=request)
        if host in self.unavailable:
            retry_after = self.unavailable[host]
            return httpx.Response(503, headers={} if retry_after is None else {"Retry-After": retry_after},
                                  request=request)
        status = 421 if host in self.misdirect else 200
        return httpx.Response(status, headers={CHECKSUM_HEADER: self.checksum or self.snap.checksum},
                              json={"served_by": host}, request=request)

    @property
    def owners(self):
        return self.snap.table.lookup(KEY)


class Driver:
    """Runs plans as a shell does; ``steps`` is every step the plans yielded, in order. Its
    clock (``now``, the core's) moves only by the pauses: answers take no time."""

    def __init__(self, nodes: Nodes):
        self.nodes = nodes
        self.steps: list[Call | Pause] = []
        self.now = 0.0

    def run(self, plan):
        outcome: Outcome = None
        while not isinstance(step := advance(plan, outcome), Done):
            self.steps.append(step)
            if isinstance(step, Pause):
                self.now += step.seconds
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


    def pauses(self):
        return [s.seconds for s in self.steps if isinstance(s, Pause)]


def connected(nodes, urls=("http://a.test",), retry=None):
    driver = Driver(nodes)
    core = ClientCore(list(urls), retry=retry, clock=lambda: driver.now)
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
        driver.run(core.request("GET", KEY, "/thing", idempotent=True, retry=RetryPolicy(deadline_s=0)))
    assert [url for _, url, _ in driver.calls()] == [f"http://{m}.test/thing" for m in (b, c, a)]


def test_a_request_that_is_not_idempotent_goes_to_the_leader_only_and_is_not_sent_twice():
    nodes = Nodes(snapshot("abc"))
    core, driver = connected(nodes)
    leader = nodes.owners[0]
    nodes.lost = {leader}  # sent, then the connection dropped: did the leader act on it?
    with pytest.raises(OutcomeUnknownError, match="may or may not have acted on it") as err:
        driver.run(core.request("POST", KEY, "/thing", json={"x": 1}))
    assert isinstance(err.value.__cause__, httpx.ReadError)
    (call,) = driver.steps
    assert isinstance(call, Call) and call.url == f"http://{leader}.test/thing" and call.options["json"] == {"x": 1}


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

    nodes.misdirect = {new}  # misdirected again after the refresh: past the deadline, the 421 is the answer
    assert driver.run(core.request("POST", KEY, "/thing", retry=RetryPolicy(deadline_s=0))).status_code == 421
    assert [method for method, _, _ in driver.calls()] == ["POST", "GET", "POST"]
    # Within a deadline, repeated 421s are retried after a doubling backoff, and end the request
    # with the 421 once the next pause would pass it.
    assert driver.run(core.request("POST", KEY, "/thing", retry=RetryPolicy(deadline_s=1.0))).status_code == 421
    assert driver.pauses() == [0.05, 0.1, 0.2, 0.4]
    assert driver.now <= 1.0


def test_another_checksum_in_a_200_refreshes_and_the_200_is_the_answer():
    nodes = Nodes(snapshot("abc"))
    core, driver = connected(nodes)
    nodes.checksum = "f" * 64  # the node runs on a placement this client has not seen
    for method, idempotent in (("GET", True), ("POST", False)):  # it served it: never sent twice
        assert driver.run(core.request(method, KEY, "/thing", idempotent=idempotent)).status_code == 200
        assert [m for m, _, _ in driver.calls()] == [method, "GET"]  # request, refresh


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
        driver.run(core.request("GET", KEY, "/thing", idempotent=True, retry=RetryPolicy(deadline_s=0)))
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


# ----- issue 30: what a careful caller did during rolling restarts, done by the core ----------
def test_a_503_with_retry_after_is_waited_out_capped_and_bounded_by_the_deadline():
    nodes = Nodes(snapshot("abc"))
    core, driver = connected(nodes, retry=RetryPolicy(deadline_s=10, max_retry_after_s=3))
    leader = nodes.owners[0]
    nodes.unavailable = {leader: "1"}  # a handoff under way, or the owner is leaving

    plan = core.request("POST", KEY, "/thing")
    assert isinstance(advance(plan, None), Call)
    assert advance(plan, nodes.answer(Call("POST", f"http://{leader}.test/thing"))) == Pause(1.0)
    del nodes.unavailable[leader]  # it holds the partition now
    retried = advance(plan, None)
    assert isinstance(retried, Call) and retried.url == f"http://{leader}.test/thing"
    done = advance(plan, nodes.answer(retried))
    assert isinstance(done, Done) and done.value.status_code == 200

    nodes.unavailable = {leader: "60"}  # cut to max_retry_after_s; the 503 whose wait ends past 10 s is the answer
    assert driver.run(core.request("POST", KEY, "/thing")).status_code == 503
    assert driver.pauses() == [3.0, 3.0, 3.0] and driver.now == 9.0
    driver.steps.clear()
    nodes.unavailable = {leader: None}  # no Retry-After: not this protocol, the answer as it is
    assert driver.run(core.request("POST", KEY, "/thing")).status_code == 503 and driver.pauses() == []


def test_no_connection_refreshes_and_reroutes_any_request_and_gives_up_at_the_deadline():
    nodes = Nodes(snapshot("abc"))
    core, driver = connected(nodes, retry=RetryPolicy(deadline_s=2.0))
    old = nodes.owners[0]
    nodes.down = {old}
    # Not sent, so safe to send anywhere: a POST too. The refresh moved the key: at once, no pause.
    nodes.snap = snapshot([m for m in "abc" if m != old])
    new = nodes.owners[0]
    assert driver.run(core.request("POST", KEY, "/thing")).json() == {"served_by": new}
    assert [(m, url) for m, url, _ in driver.calls()] == [
        ("POST", f"http://{old}.test/thing"), ("GET", "http://a.test/v1/placement"), ("POST", f"http://{new}.test/thing")]
    assert driver.pauses() == []

    nodes.down = {new}  # crashed, still in everyone's view (not detected yet): pause, refresh, retry
    with pytest.raises(NoReplicaReachableError, match="no answer from the leader of 'order-42' within 2 s"):
        driver.run(core.request("POST", KEY, "/thing"))
    assert driver.pauses() == [0.05, 0.1, 0.2, 0.4, 0.8] and driver.now <= 2.0
    assert [m for m, _, _ in driver.calls()] == ["POST", "GET"] * 5 + ["POST"]  # the next pause would pass 2 s


def test_a_lost_connection_is_retried_only_for_requests_marked_idempotent():
    nodes = Nodes(snapshot("abc"))
    core, driver = connected(nodes)
    leader = nodes.owners[0]
    nodes.lost = {leader}
    with pytest.raises(OutcomeUnknownError):
        driver.run(core.request("POST", KEY, "/thing"))
    assert len(driver.calls()) == 1
    # idempotent=True, spread=False: to the leader alone (a guarded endpoint), sent again after a
    # refresh and a pause; it answers once it is back.
    plan = core.request("POST", KEY, "/thing", idempotent=True, spread=False)
    step = advance(plan, None)
    assert isinstance(step, Call) and step.url == f"http://{leader}.test/thing"
    with pytest.raises(httpx.ReadError) as lost:
        nodes.answer(step)
    step = advance(plan, lost.value)
    assert isinstance(step, Call) and step.url == "http://a.test/v1/placement"
    assert advance(plan, nodes.answer(step)) == Pause(0.05)
    nodes.lost = set()
    step = advance(plan, None)
    assert isinstance(step, Call) and step.url == f"http://{leader}.test/thing"
    assert isinstance(done := advance(plan, nodes.answer(step)), Done) and done.value.status_code == 200


def test_the_long_poll_moves_off_a_node_that_is_leaving():
    nodes = Nodes(snapshot("abc"))
    core, driver = connected(nodes, urls=("http://a.test", "http://b.test"))
    nodes.broken_placement = {"a"}  # a leaving node answers its long-poll with 503 at once
    nodes.snap = snapshot("bc")
    assert driver.run(core.poll()) is None
    assert [url for _, url, _ in driver.calls()] == ["http://a.test/v1/placement", "http://b.test/v1/placement"]
    assert core.urls == ["http://b.test", "http://a.test"]  # the next long-poll waits on b
    assert core.snapshot.checksum == nodes.snap.checksum


def test_a_retry_policy_is_checked():
    with pytest.raises(ValueError, match="invalid retry policy"):
        RetryPolicy(backoff_s=0)
    with pytest.raises(ValueError, match="invalid retry policy"):
        RetryPolicy(deadline_s=-1)


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
            "503", "ok",  # a POST the owner cannot take yet (Retry-After: 0): retried after a pause
            "down", second, "ok",  # a POST that found no connection (not sent): refresh, pause, retry
            "lost",  # a POST sent, then its connection lost: OutcomeUnknownError, not sent again
        ]

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.method, str(request.url), request.headers.get(CHECKSUM_HEADER),
                          request.content.decode()))
        answer = self.answers.pop(0)
        if answer == "down":
            raise httpx.ConnectError("connection refused", request=request)
        if answer == "lost":
            raise httpx.ReadError("connection reset by peer", request=request)
        if answer == "503":
            return httpx.Response(503, headers={"Retry-After": "0"})
        if isinstance(answer, PlacementSnapshot):
            return httpx.Response(200, content=answer.to_msgpack())
        return httpx.Response(int(answer.replace("ok", "200")), json={})


#: What a client is asked to do: (method, idempotent) requests for KEY, each with a JSON body.
SCENARIO = [("GET", True), ("POST", False), ("POST", False), ("POST", False), ("POST", False)]


def run_sync(script, urls):
    results: list[int | str] = []
    with PlacementClient(urls, refresh=False, transport=httpx.MockTransport(script.handle)) as client:
        for method, idempotent in SCENARIO:
            try:
                results.append(client.request(method, KEY, "/thing", idempotent=idempotent, json={"n": 1}).status_code)
            except (httpx.HTTPError, PlacementError) as exc:
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
                except (httpx.HTTPError, PlacementError) as exc:
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
    assert sync_results == async_results == [200, 200, 200, 200, "OutcomeUnknownError"]
    assert sync_seen == async_seen
    assert [(method, url.split("/")[3]) for method, url, _, _ in sync_seen] == [
        ("GET", "v1"), ("GET", "v1"), ("GET", "thing"), ("GET", "thing"), ("POST", "thing"), ("GET", "v1"),
        ("POST", "thing"), ("POST", "thing"), ("POST", "thing"), ("POST", "thing"), ("GET", "v1"), ("POST", "thing"),
        ("POST", "thing")]
